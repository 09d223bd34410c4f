"""Benchmark: start-up of the ``capacity`` command (issue 17: ``capacity evaluate`` under 150 ms of import).

Each case runs in a fresh interpreter, interleaved (case 1, 2, 3, 1, 2, 3, ...) so a busy machine slows all
alike; medians are reported, of the wall time, of the child's CPU time (user + system, all its threads) and of
its main thread's CPU time (``time.thread_time`` at exit): the last is steadier than the wall time when other
processes compete for the cores and leaves out helper threads, so it is the closest to the wall time of an
idle machine. Cases (each run as ``python -c CODE``; the commands as ``python -m capacity`` runs them):

* ``python -c pass``: the interpreter alone (the floor every command pays);
* ``import numpy``: numpy as a library user gets it (OpenBLAS starts its default thread pool);
* ``import numpy, 1 BLAS thread``: numpy as the CLI imports it (``OPENBLAS_NUM_THREADS=1``, set by
  ``capacity.cli.main`` unless the user chose a number): the floor of any numeric command;
* ``capacity --version``: the CLI's own start-up (no numpy, no pandas, no yaml);
* ``import for evaluate``: every module ``capacity evaluate`` imports, imported as the command does (the BLAS
  setting first), without evaluating: the import cost;
* ``capacity evaluate``: the whole command on essay 001 (inline model and GPU: import + load + evaluate +
  print), and on the chat scenario, whose model and GPU come from the catalogs (read with libyaml).

The import cost is ``import for evaluate`` minus ``python -c pass``; above the floor is ``import for
evaluate`` minus ``import numpy, 1 BLAS thread``. Bytecode caching is switched on for the runs
(``PYTHONDONTWRITEBYTECODE`` removed, one warm-up round first), as in any installed copy: without the ``.pyc``
files every start compiles the package's source again (~120 ms here). ``OPENBLAS_NUM_THREADS`` and
``OMP_NUM_THREADS`` are removed from the environment so each case runs as described.

``--breakdown`` adds where the import's CPU time goes: self CPU time per package, summed over modules, median
over the runs. It times ``importlib._bootstrap._find_and_load``, so it also sees the modules imported through
``importlib.import_module`` (``from . import engines`` reaches the package's ``__getattr__``, which does),
which ``python -X importtime`` leaves out and adds to their importer's own time.

    python benchmarks/bench_startup.py [--repeat 15] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "essay-001-sale-day.yaml"
CATALOG_SCENARIO = ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml"
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1"}
#: Prefixed to every case: at exit the child writes its main thread's CPU time [s] to stderr.
MAIN_THREAD = ("import atexit, sys, time\n"
               "atexit.register(lambda: sys.stderr.write(f'\\nmain thread cpu {time.thread_time()!r}\\n'))\n")


def _command(*argv: str) -> str:
    """Python code that runs ``capacity ARGV`` as ``python -m capacity ARGV`` does."""
    return f"import runpy, sys\nsys.argv = {['capacity', *argv]!r}\nrunpy.run_module('capacity', run_name='__main__')"


#: name -> (Python code run with ``python -c``, extra environment)
CASES: dict[str, tuple[str, dict[str, str]]] = {
    "python -c pass": ("pass", {}),
    "import numpy": ("import numpy", {}),
    "import numpy, 1 BLAS thread": ("import numpy", ONE_THREAD),
    "capacity --version": (_command("--version"), {}),
    "import for evaluate": ("import capacity.cli as cli\ncli._one_blas_thread()\n"
                            "import capacity.model.scenario, capacity.render.formatting", {}),
    "capacity evaluate": (_command("evaluate", str(SCENARIO)), {}),
    "capacity evaluate (catalog)": (_command("evaluate", str(CATALOG_SCENARIO)), {}),
}


#: Run in a child: the CPU time of each module's import less its imports' [s], as JSON {module: seconds}.
BREAKDOWN = """
import importlib._bootstrap as bootstrap, json, sys, time
find_and_load, stack, own = bootstrap._find_and_load, [], {}
def timed(name, import_):
    if name in sys.modules:
        return find_and_load(name, import_)
    start = time.process_time()
    stack.append(0.0)
    try:
        return find_and_load(name, import_)
    finally:
        spent, inner = time.process_time() - start, stack.pop()
        own[name] = spent - inner
        if stack:
            stack[-1] += spent
bootstrap._find_and_load = timed
import capacity.cli as cli
cli._one_blas_thread()
import capacity.model.scenario, capacity.render.formatting
print(json.dumps(own))
"""


def breakdown(repeat: int, env: dict[str, str]) -> None:
    """Print the import's self CPU time per top-level package (median over ``repeat`` runs) [ms]."""
    runs = []
    for run in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", BREAKDOWN], cwd=ROOT, check=True, capture_output=True,
                             text=True, env=env).stdout
        if run:
            runs.append(json.loads(out))
    packages: dict[str, list[float]] = {}
    for own in runs:
        per_package: dict[str, float] = {}
        for module, seconds in own.items():
            top = module.split(".")[0]
            per_package[top] = per_package.get(top, 0.0) + seconds
        for top, seconds in per_package.items():
            packages.setdefault(top, []).append(seconds)
    medians = sorted(((statistics.median(t) * 1e3, top) for top, t in packages.items()), reverse=True)
    shown = [(ms, top) for ms, top in medians if ms >= 0.5]
    print(f"import for evaluate, self CPU time by package [ms] (median of {repeat}): "
          + ", ".join(f"{top} {ms:.1f}" for ms, top in shown)
          + f", {len(medians) - len(shown)} others {sum(ms for ms, _ in medians) - sum(ms for ms, _ in shown):.1f}")
    module_ms = {m: statistics.median([own.get(m, 0.0) for own in runs]) * 1e3
                 for m in set().union(*runs) if m.startswith("capacity")}
    print("  capacity modules: " + ", ".join(f"{m.removeprefix('capacity.')} {ms:.1f}"
                                              for m, ms in sorted(module_ms.items(), key=lambda x: -x[1]) if ms >= 0.5))


def _run(code: str, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall time, the child's CPU time (user + system, all threads) and its main thread's CPU time [s]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", MAIN_THREAD + code], cwd=ROOT, check=True, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    main_thread = float(out.stderr.rsplit("main thread cpu ", 1)[1])
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), main_thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--breakdown", action="store_true", help="also: self CPU time of the import by package")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONDONTWRITEBYTECODE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CASES}
    for run in range(args.repeat + 1):
        for name, (code, extra) in CASES.items():
            measured = _run(code, {**base, **extra})
            if run:  # the first round writes the bytecode caches
                times[name].append(measured)
    wall, cpu, thread = ({name: statistics.median(t[i] for t in runs) * 1e3 for name, runs in times.items()}
                         for i in range(3))
    print(f"{args.repeat} runs per case, interleaved; medians [ms]")
    print(f"{'case':30s} {'wall':>7s} {'cpu':>7s} {'main thread':>12s} {'min wall':>9s}")
    for name, runs in times.items():
        fastest = min(t[0] for t in runs) * 1e3
        print(f"{name:30s} {wall[name]:7.1f} {cpu[name]:7.1f} {thread[name]:12.1f} {fastest:9.1f}")

    def over(case: str, floor: str) -> str:
        return (f"{wall[case] - wall[floor]:6.1f} ms wall, {cpu[case] - cpu[floor]:6.1f} ms cpu, "
                f"{thread[case] - thread[floor]:6.1f} ms main thread")

    imports = wall["import for evaluate"] - wall["python -c pass"]
    print(f"import cost of capacity evaluate:          {over('import for evaluate', 'python -c pass')}; "
          f"target <= 150 ms: {'met' if imports <= 150 else 'NOT met'} (wall)")
    print(f"  of which numpy (1 BLAS thread, floor):   {over('import numpy, 1 BLAS thread', 'python -c pass')}")
    print(f"  above the floor (capacity, yaml, ...):   {over('import for evaluate', 'import numpy, 1 BLAS thread')}")
    print(f"numpy's default BLAS threads cost:         {over('import numpy', 'import numpy, 1 BLAS thread')}")
    print(f"capacity --version over the interpreter:   {over('capacity --version', 'python -c pass')}")
    print(f"catalog scenario over essay 001:           {over('capacity evaluate (catalog)', 'capacity evaluate')}")
    if args.breakdown:
        breakdown(args.repeat, base)


if __name__ == "__main__":
    main()
