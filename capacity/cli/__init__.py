"""The ``capacity`` command line: the parser and the one registry of subcommands (``COMMANDS``).

Exit status: 0 success, 2 invalid input (one line per problem on stderr), 1 an
internal error (reported in one line, never a traceback).

Start-up: this module imports only the standard library at the top. Each subcommand lives in its own module
(``capacity/cli/<name>_command.py``), imported only when the command line names it, so
``capacity --version`` imports neither numpy nor pandas and ``capacity evaluate`` not pandas
(``benchmarks/bench_startup.py`` measures it; ``tests/cli/test_startup.py`` checks which modules load). ``main``
starts OpenBLAS with one thread unless the user chose a number (``_one_blas_thread``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from capacity import __version__
from capacity.errors import ScenarioError, clean_line

#: The one registry of subcommands: name -> (help, module, function adding its parser, function running it).
#: A command's module is imported only when the command line names it; ``capacity --help`` lists each by its help
#: alone (tests check each help matches the module's own). A runner returns the text or bytes to write, or None
#: when it has written its output itself.
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "evaluate": ("evaluate a scenario YAML file with the analytic model",
                 "capacity.cli.evaluate_command", "add_evaluate_command", "run_evaluate"),
    "sweep": ("evaluate a scenario over a grid of inputs and write a table",
              "capacity.cli.sweep_command", "add_sweep_command", "run_sweep_command"),
    "simulate": ("simulate the scenario's serving engine request by request",
                 "capacity.cli.simulate_command", "add_simulate_command", "run_simulate"),
    "calibrate": ("fit the efficiency factors, step overhead and request latency to benchmark points",
                  "capacity.cli.calibrate_command", "add_calibrate_command", "run_calibrate"),
    "fleet": ("GPUs, replicas and cost for a target load, per GPU type and layout",
              "capacity.cli.fleet_command", "add_fleet_command", "run_fleet"),
    "search": ("simulate engine settings to find the cheapest that keeps the promises",
               "capacity.cli.search_command", "add_search_command", "run_search"),
    "report": ("a customer report: one self-contained HTML file (or PDF)",
               "capacity.cli.report_command", "add_report_command", "run_report"),
    "flags": ("the sizing as a serving engine's flags (vLLM, TensorRT-LLM, SGLang)",
              "capacity.cli.report_command", "add_flags_command", "run_flags"),
    "curve": ("curves and per-class sizing of a workload mix (concurrency, knee, classes, daily, guidance)",
              "capacity.cli.curve_command", "add_curve_command", "run_curve"),
    "autoscale": ("a day of traffic with an autoscaler: cost per policy against the promises kept, and the "
                  "reserved/on-demand split", "capacity.cli.autoscale_command", "add_autoscale_command",
                  "run_autoscale"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep it to one line
        self.exit(2, f"capacity: error: {clean_line(message)}\n")


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand on a command line: the first word not an option (the top level has only -h, --version)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; of the ``COMMANDS`` only ``command``'s module is imported to build its options."""
    parser = _Parser(prog="capacity", description="Capacity planner for LLM serving.")
    parser.add_argument("--version", action="version", version=f"capacity {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (help_text, module, adder, _runner) in COMMANDS.items():
        if name == command:
            getattr(importlib.import_module(module), adder)(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


class OutputFailed(Exception):
    """Standard output refused the bytes (a full disk, ``> /dev/full``, a closed pipe): ``__cause__`` says why."""


def _write(text: str | bytes, output: str | None) -> None:
    if output is None:
        try:
            sys.stdout.write(text if isinstance(text, str) else text.decode("utf-8"))
            sys.stdout.flush()  # here, not at exit: a full device is reported, not printed as a traceback
        except OSError as exc:
            raise OutputFailed from exc
        return
    from capacity.fileio.files import write_atomic

    write_atomic(output, text.encode("utf-8") if isinstance(text, str) else text)


def _runner(command: str) -> Callable[[argparse.Namespace], Any]:
    _help, module, _adder, runner = COMMANDS[command]
    return getattr(importlib.import_module(module), runner)


def _one_blas_thread() -> None:
    """Start OpenBLAS with one thread unless the user chose a number (``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``).

    No command multiplies matrices large enough for OpenBLAS to use threads (its work is elementwise numpy, dot
    products of a few values and pseudo-inverses of a few parameters), yet loading OpenBLAS with its default
    pool starts a worker thread per further core that spins waiting for work: 30-60 ms of CPU in ``import
    numpy`` on the 2-vCPU machine, and as much wall time when the cores are busy; the main thread's own time is
    unchanged (``benchmarks/bench_startup.py``). It takes effect only before numpy's first import, so the CLI
    sets it on entry; processes it starts inherit it.
    """
    if "numpy" not in sys.modules and not {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"} & os.environ.keys():
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


#: Argument names that hold input files a command reads: ``-o`` may name none of them.
INPUTS = ("scenario", "benchmark", "since")


#: Argument names that hold files a command writes: ``-o`` and the profile catalog ``calibrate --save`` updates.
OUTPUTS = (("output", "-o"), ("profiles", "--profiles"))


def _refuse_output_over_input(args: argparse.Namespace) -> None:
    """ScenarioError when a file the command writes (``-o``, ``--profiles``) is one it reads (``evaluate s.yaml
    -o s.yaml`` would replace the scenario with its own report), however it is spelled (links, ``./``)."""
    for attribute, flag in OUTPUTS:
        output = getattr(args, attribute, None)
        if not isinstance(output, str) or not os.path.isfile(output):
            continue
        if attribute == "profiles" and not getattr(args, "save", None):
            continue  # read, not written
        for name in INPUTS:
            values = getattr(args, name, None)
            for value in [values] if isinstance(values, str) else (values or []):
                try:
                    same = os.path.isfile(value) and os.path.samefile(output, value)
                except (OSError, ValueError):
                    same = False
                if same:
                    raise ScenarioError(f"{flag} {clean_line(output, 120)} is the {name} file this command reads; "
                                        f"write to another file")


def _silence_stdout() -> None:
    """After standard output failed: point it at /dev/null so the interpreter's flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _one_blas_thread()
    args = _parser(_command_named(argv)).parse_args(argv)
    import warnings

    from capacity.runtime.quiet import quiet_warnings

    with warnings.catch_warnings():
        quiet_warnings()  # never reach the user, here or in the processes the command starts
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        _refuse_output_over_input(args)
        text = _runner(args.command)(args)
        if text is not None:  # a command that streams its output has written it already
            _write(text, args.output)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(f"capacity: error: {problem}", file=sys.stderr)
        return 2
    except OutputFailed as exc:
        _silence_stdout()
        cause = exc.__cause__
        if not isinstance(cause, BrokenPipeError):  # a reader that stopped reading (| head) wants no message
            why = getattr(cause, "strerror", None) or cause
            print(f"capacity: error: cannot write to standard output: {clean_line(str(why))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None)
        print(f"capacity: interrupted{f' ({exc})' if signum else ''}", file=sys.stderr)
        return 128 + signum if signum else 130
    except MemoryError:
        print("capacity: error: the input needs more memory than this machine has; make it smaller",
              file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        print(f"capacity: internal error: {type(exc).__name__}: {clean_line(str(exc))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
