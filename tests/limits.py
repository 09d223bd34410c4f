"""Run ``capacity`` commands as child processes under a CPU-time, wall-clock and memory limit.

``run_forked`` forks this (already imported) test process, so a case costs milliseconds rather than the
second of a fresh interpreter's imports: the child sets ``RLIMIT_AS`` (its current size plus ``memory_bytes``)
and ``RLIMIT_CPU``, sends its output to files and calls ``capacity.cli.main``; the parent kills it at the wall
limit and reads its CPU time from ``wait4``. Arrow must use the system allocator (``conftest.py`` sets
ARROW_DEFAULT_MEMORY_POOL=system before anything allocates): mimalloc reserves address space a gigabyte at a
time and fails under RLIMIT_AS. ``run_subprocess`` does the same for ``python -m capacity`` (the
console path), with the limits set by ``preexec_fn``.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Memory a case may take beyond what the process holds when it starts [B].
MEMORY_BYTES = 1 << 30
#: Wall-clock limit of one case [s]; a case that answers takes a small fraction of it.
WALL_S = 20.0
#: CPU limit of one case [s] (RLIMIT_CPU): past it the kernel stops the child.
CPU_S = 10


@dataclass
class Outcome:
    code: int | None  # exit status; None when killed at the wall limit
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float
    signal: int = 0

    def describe(self) -> str:
        return (f"exit {self.code} (signal {self.signal}) after {self.wall_s:.2f} s wall, {self.cpu_s:.2f} s CPU; "
                f"stderr: {self.stderr[:500]!r}; stdout: {self.stdout[:200]!r}")


def _vm_size(field: str = "VmSize:") -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def run_forked(argv: list[str], cwd: str | Path | None = None, memory_bytes: int = MEMORY_BYTES,
               wall_s: float = WALL_S, cpu_s: int = CPU_S) -> Outcome:
    """``capacity.cli.main(argv)`` in a forked child under the limits; its exit status, output and CPU time."""
    import capacity.cli.simulate_command
    import capacity.planning.calibration
    import capacity.planning.sweep
    import capacity.render.xlsx  # noqa: F401 - imported once here, not again in every child
    from capacity.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out_path, err_path = Path(tmp) / "out", Path(tmp) / "err"
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 98
            try:
                limit = _vm_size() + memory_bytes
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
                out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT, 0o600)
                err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o600)
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(out_fd, 1)
                os.dup2(err_fd, 2)
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the child exits
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                if cwd is not None:
                    os.chdir(cwd)
                code = main(argv)
            except SystemExit as exc:  # the parser refused an option (exit 2), or --help / --version (0)
                code = exc.code if isinstance(exc.code, int) else 2
            except BaseException:  # noqa: BLE001 - report anything that escapes main as a traceback
                import traceback

                traceback.print_exc()
                code = 99
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code if isinstance(code, int) else 97)
        status, usage = 0, None
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > wall_s:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        wall = time.monotonic() - start
        code = os.waitstatus_to_exitcode(status)
        return Outcome(code if code >= 0 else None, out_path.read_text(errors="replace"),
                       err_path.read_text(errors="replace"), usage.ru_utime + usage.ru_stime, wall,
                       -code if code < 0 else 0)


def run_subprocess(argv: list[str], cwd: str | Path | None = None, memory_bytes: int = 2 << 30,
                   wall_s: float = 60.0, cpu_s: int = 30) -> Outcome:
    """``python -m capacity ARGV`` under ``RLIMIT_AS`` = ``memory_bytes`` and ``RLIMIT_CPU`` (``preexec_fn``)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))

    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "capacity", *argv], cwd=cwd, capture_output=True, text=True,
                              errors="replace", timeout=wall_s, preexec_fn=limit, env=env)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Outcome(code, out, err, cpu, time.monotonic() - start)
