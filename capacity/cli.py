"""The ``capacity`` command line: evaluate scenario files (table, JSON, CSV, XLSX) and sweep them over grids.

Exit status: 0 success, 2 invalid input (one line per problem on stderr), 1 an
internal error (reported in one line, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .analysis import RESULTS
from .calibration import add_calibrate_command, run_calibrate
from .curve_command import add_curve_command, run_curve
from .errors import ScenarioError, clean_line
from .fleet_command import add_fleet_command, run_fleet
from .formatting import SECTIONS, format_value
from .report_command import add_report_commands, run_flags, run_report
from .scenario import Results, load_scenario


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep it to one line
        self.exit(2, f"capacity: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
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
    sw.add_argument("--units", choices=["base", "human"], default="base",
                    help="csv only: base (default) or human (each header names its unit: pool_bytes [GB], ...)")
    si = sub.add_parser("simulate", help="simulate the scenario's serving engine request by request")
    si.add_argument("scenario", help="scenario YAML file (its simulation: block sets the run)")
    si.add_argument("--format", choices=["json", "csv"], default="json",
                    help="json (default): the summary in base units; csv: one row per request")
    si.add_argument("-o", "--output", help="write to this file instead of standard output")
    si.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a key of the simulation block, e.g. --set policy=static --set rate=12")
    add_calibrate_command(sub)
    add_fleet_command(sub)
    add_report_commands(sub)
    add_curve_command(sub)
    return parser


def render_table(results: Results) -> str:
    """A readable table: every result with its unit, grouped by section, then the notes."""
    binary = results.scenario.units == "GiB"
    s = results.scenario
    lines = [f"{s.name}: {s.model.name} on {s.gpu.count} x {s.gpu.name}", ""]
    for section, keys in SECTIONS.items():
        lines.append(section)
        for key in keys:
            lines.append(f"  {key:<36} {format_value(key, results[key], binary):>20}   {RESULTS[key][1]}")
        lines.append("")
    for note in results.notes():
        lines.append(f"note: {note}")
    return "\n".join(lines).rstrip() + "\n"


def render_json(results: Results) -> str:
    """The report as one JSON object: every result in base units at the top level (the contract's keys among them),
    plus inputs with units and sources, binding resource, assumptions and the scenario (see ``report.py``)."""
    from .report import report_for, to_json

    return to_json(report_for(results))


def _evaluate(args: argparse.Namespace) -> str | bytes:
    if args.format == "xlsx" and not args.output:
        raise ScenarioError("--format xlsx writes a binary workbook: give -o FILE.xlsx")
    if args.units == "human" and args.format != "csv":
        raise ScenarioError(f"--units human is for --format csv; {args.format} keeps its own units")
    results = load_scenario(args.scenario).evaluate()
    if args.format in ("csv", "xlsx"):
        from .report import report_for, to_csv
        from .xlsx import workbook_bytes

        report = report_for(results)
        return to_csv(report, args.units) if args.format == "csv" else workbook_bytes(report)
    return render_json(results) if args.format == "json" else render_table(results)


def _sweep(args: argparse.Namespace) -> str | bytes:
    from .sweep import sweep_bytes

    suffix = (args.output or "").rsplit(".", 1)[-1].lower() if args.output and "." in args.output else ""
    fmt = args.format or (suffix if suffix in ("csv", "xlsx", "parquet", "json") else "csv")
    if fmt in ("xlsx", "parquet") and not args.output:
        raise ScenarioError(f"--format {fmt} writes a binary file: give -o FILE.{fmt}")
    data = sweep_bytes(load_scenario(args.scenario), args.vary, fmt, units=args.units)
    return data.decode("utf-8") if fmt in ("csv", "json") else data


def _simulate(args: argparse.Namespace) -> str:
    from .simulator.command import run

    return run(args)


def _write(text: str | bytes, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if isinstance(text, str) else text.decode("utf-8"))
        return
    from .files import write_atomic

    write_atomic(output, text.encode("utf-8") if isinstance(text, str) else text)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        text = {"evaluate": _evaluate, "sweep": _sweep, "simulate": _simulate,
                "calibrate": run_calibrate, "fleet": run_fleet, "curve": run_curve, "report": run_report,
                "flags": run_flags}[args.command](args)
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
