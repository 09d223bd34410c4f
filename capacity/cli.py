"""The ``capacity`` command line: evaluate scenario files.

Exit status: 0 success, 2 invalid input (one line per problem on stderr), 1 an
internal error (reported in one line, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from .analysis import RESULTS
from .errors import ScenarioError
from .formatting import SECTIONS, format_value
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
    ev.add_argument("--format", choices=["table", "json"], default="table",
                    help="table (default, with units) or json (base units: bytes, seconds, requests/s)")
    ev.add_argument("-o", "--output", help="write to this file instead of standard output")
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
    """One JSON object of every result in base units (SPEC's result keys among them)."""
    return json.dumps({"name": results.scenario.name, **results.to_dict()}, indent=2) + "\n"


def _evaluate(args: argparse.Namespace) -> str:
    results = load_scenario(args.scenario).evaluate()
    return render_json(results) if args.format == "json" else render_table(results)


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from .files import write_atomic

    write_atomic(output, text.encode("utf-8"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        text = {"evaluate": _evaluate}[args.command](args)
        _write(text, args.output)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(f"capacity: error: {problem}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        print(f"capacity: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
