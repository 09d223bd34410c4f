"""The ``capacity`` command line: evaluate scenario files (table, JSON, CSV, XLSX) and sweep them over grids.

Exit status: 0 success, 2 invalid input (one line per problem on stderr), 1 an
internal error (reported in one line, never a traceback).

Start-up: this module imports only the standard library at the top. Each subcommand imports what it needs
when it runs, and the subcommands defined in other modules (``EXTERNAL``) are imported only when named, so
``capacity --version`` imports neither numpy nor pandas and ``capacity evaluate`` not pandas
(``benchmarks/bench_startup.py`` measures it; ``tests/test_startup.py`` checks which modules load). ``main``
starts OpenBLAS with one thread unless the user chose a number (``_one_blas_thread``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .errors import ScenarioError, clean_line

if TYPE_CHECKING:
    from .scenario import Results

#: Subcommands defined in other modules: name -> (help, module, function adding its parser, function running it).
#: The module is imported only when the command line names that subcommand; ``capacity --help`` lists it by
#: its help alone (tests check each help matches the module's own).
EXTERNAL: dict[str, tuple[str, str, str, str]] = {
    "calibrate": ("fit the efficiency factors and step overhead to benchmark points",
                  "capacity.calibration", "add_calibrate_command", "run_calibrate"),
    "fleet": ("GPUs, replicas and cost for a target load, per GPU type and layout",
              "capacity.fleet_command", "add_fleet_command", "run_fleet"),
    "search": ("simulate engine settings to find the cheapest that keeps the promises",
               "capacity.search", "add_search_command", "run_search"),
    "report": ("a customer report: one self-contained HTML file (or PDF)",
               "capacity.report_command", "add_report_command", "run_report"),
    "flags": ("the sizing as a serving engine's flags (vLLM, TensorRT-LLM, SGLang)",
              "capacity.report_command", "add_flags_command", "run_flags"),
    "curve": ("curves and per-class sizing of a workload mix (concurrency, knee, classes, daily, guidance)",
              "capacity.curve_command", "add_curve_command", "run_curve"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep it to one line
        self.exit(2, f"capacity: error: {message}\n")


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand on a command line: the first word not an option (the top level has only -h, --version)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; of the ``EXTERNAL`` subcommands only ``command``'s module is imported to build its options."""
    parser = _Parser(prog="capacity", description="Capacity planner for LLM serving.")
    parser.add_argument("--version", action="version", version=f"capacity {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ev = sub.add_parser("evaluate", help="evaluate a scenario YAML file with the analytic model")
    ev.add_argument("scenario", help="scenario YAML file")
    ev.add_argument("--format", choices=["table", "json", "csv", "xlsx"], default="table",
                    help="table (default, with units); json or csv report (base units: bytes, seconds, "
                         "requests/s); xlsx workbook with live formulas (needs -o)")
    ev.add_argument("-o", "--output", help="write to this file instead of standard output")
    ev.add_argument("--units", choices=["base", "human"], default="base",
                    help="csv only: base (B, s, full precision; default) or human (GB/GiB, ms, 4 digits)")
    sw = sub.add_parser("sweep", help="evaluate a scenario over a grid of inputs and write a table")
    sw.add_argument("scenario", help="scenario YAML file")
    sw.add_argument("--vary", action="append", default=[], metavar="KEY=START:STOP:STEPS", required=True,
                    help="a scenario key (serving.memory_utilization, workload.prompt_tokens, slo.tpot, ...) or flat "
                         "input name, with STEPS even values from START to STOP; repeat for a grid")
    sw.add_argument("--format", choices=["csv", "xlsx", "parquet", "json"],
                    help="table format (default: from the -o suffix, else csv)")
    sw.add_argument("-o", "--output", help="write to this file (required for xlsx and parquet)")
    sw.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bar on stderr (default: on a terminal, for sweeps of 200,000 rows or more)")
    sw.add_argument("--units", choices=["base", "human"], default="base",
                    help="csv only: base (default) or human (each header names its unit: pool_bytes [GB], ...)")
    si = sub.add_parser("simulate", help="simulate the scenario's serving engine request by request")
    si.add_argument("scenario", help="scenario YAML file (its simulation: block sets the run)")
    si.add_argument("--format", choices=["json", "csv"], default="json",
                    help="json (default): the summary in base units; csv: one row per request")
    si.add_argument("-o", "--output", help="write to this file instead of standard output")
    si.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a key of the simulation block, e.g. --set policy=static --set rate=12")
    for name, (help_text, module, adder, _runner) in EXTERNAL.items():
        if name == command:
            getattr(importlib.import_module(module), adder)(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def render_table(results: Results) -> str:
    """A readable table: the answer's sentence, every result with its unit grouped by section (one replica of the
    scenario's own layout), the answer's figures (``sizing.Sizing``), then the notes."""
    from .analysis import RESULTS
    from .answer import answer
    from .formatting import SECTIONS, format_value
    from .sizing import SIZING_RESULTS, size

    binary = results.scenario.units == "GiB"
    s = results.scenario
    sizing = size(s, results)
    lines = [f"{s.name}: {s.model.name} on {s.gpu.count} x {s.gpu.name}" if s.name != s.model.name else
             f"{s.model.name} on {s.gpu.count} x {s.gpu.name}", "", answer(sizing), ""]
    for section, keys in SECTIONS.items():
        lines.append(section + (" (one replica as stated)" if section == "Memory" else ""))
        for key in keys:
            lines.append(f"  {key:<36} {format_value(key, results[key], binary):>20}   {RESULTS[key][1]}")
        lines.append("")
    lines.append("Answer (the layout chosen, the fleet for the load, its cost)")
    for key, value in sizing.to_dict().items():
        shown = format_value(key, value, binary)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        lines.append(f"  {key:<36} {shown:>20}   {SIZING_RESULTS[key][1]}")
    lines.append("")
    split = split_results(s)
    if split:
        from .split_pools import SPLIT_RESULTS

        lines.append("Split pools (scenario section pools: each pool its own GPU, count and parallelism)")
        for key, value in split.items():
            lines.append(f"  {key:<36} {format_value(key, value, binary):>20}   {SPLIT_RESULTS[key][1]}")
        lines.append("")
    for note in sizing.notes():
        lines.append(f"note: {note}")
    return "\n".join(lines).rstrip() + "\n"


def split_results(scenario: Any) -> dict[str, float]:
    """The split-pool results of a scenario with a ``pools`` section (``split_pools.evaluate``); {} without."""
    if not scenario.raw.get("pools"):
        return {}
    from .split_pools import evaluate, pool_scenarios

    return evaluate(pool_scenarios(scenario.raw))


def render_json(results: Results) -> str:
    """The report as one JSON object: every result in base units at the top level (the contract's keys among them),
    plus inputs with units and sources, binding resource, assumptions and the scenario (see ``report.py``)."""
    import json

    from .report import report_for, to_json, to_json_dict

    report = report_for(results)
    split = split_results(results.scenario)
    if not split:
        return to_json(report)
    return json.dumps({**to_json_dict(report), **split}, indent=2, ensure_ascii=False, default=str) + "\n"


def _evaluate(args: argparse.Namespace) -> str | bytes:
    if args.format == "xlsx" and not args.output:
        raise ScenarioError("--format xlsx writes a binary workbook: give -o FILE.xlsx")
    if args.units == "human" and args.format != "csv":
        raise ScenarioError(f"--units human is for --format csv; {args.format} keeps its own units")
    from .scenario import load_scenario

    results = load_scenario(args.scenario).evaluate()
    if args.format in ("csv", "xlsx"):
        from .report import report_for, to_csv
        from .xlsx import workbook_bytes

        report = report_for(results)
        return to_csv(report, args.units) if args.format == "csv" else workbook_bytes(report)
    return render_json(results) if args.format == "json" else render_table(results)


def _sweep(args: argparse.Namespace) -> None:
    """Stream the sweep into the output (written beside it, renamed when complete) or standard output."""
    from .files import atomic_output
    from .scenario import load_scenario
    from .sweep import run_to

    suffix = (args.output or "").rsplit(".", 1)[-1].lower() if args.output and "." in args.output else ""
    fmt = args.format or (suffix if suffix in ("csv", "xlsx", "parquet", "json") else "csv")
    if fmt in ("xlsx", "parquet") and not args.output:
        raise ScenarioError(f"--format {fmt} writes a binary file: give -o FILE.{fmt}")
    scenario = load_scenario(args.scenario)
    if args.output is None:
        sys.stdout.flush()
        run_to(scenario, args.vary, fmt, sys.stdout.buffer, progress=args.progress, units=args.units)
        return None
    with atomic_output(args.output) as sink:
        run_to(scenario, args.vary, fmt, sink, output=args.output, progress=args.progress, units=args.units)
    return None


def _simulate(args: argparse.Namespace) -> str:
    from .scenario import load_scenario

    scenario = load_scenario(Path(args.scenario))  # a bad file is refused before the simulator's imports (~0.9 s)
    from .simulator.command import run

    return run(args, scenario)


def _write(text: str | bytes, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if isinstance(text, str) else text.decode("utf-8"))
        return
    from .files import write_atomic

    write_atomic(output, text.encode("utf-8") if isinstance(text, str) else text)


def _runner(command: str) -> Callable[[argparse.Namespace], Any]:
    if command in EXTERNAL:
        _help, module, _adder, runner = EXTERNAL[command]
        return getattr(importlib.import_module(module), runner)
    return {"evaluate": _evaluate, "sweep": _sweep, "simulate": _simulate}[command]


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _one_blas_thread()
    args = _parser(_command_named(argv)).parse_args(argv)
    try:
        text = _runner(args.command)(args)
        if text is not None:  # a command that streams its output has written it already
            _write(text, args.output)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(f"capacity: error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("capacity: interrupted", file=sys.stderr)
        return 130
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
