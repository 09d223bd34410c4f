"""``capacity evaluate SCENARIO.yaml [--format table|json|csv|xlsx] [-o FILE] [--units base|human]``.

The formats are the one registry ``capacity.render.formats.FORMATS``; this module imports only the scenario
loader and the chosen renderer.
"""

from __future__ import annotations

import argparse
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError
from capacity.render.formats import FORMATS, render


def add_evaluate_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capacity evaluate``; its ``--format`` choices are the registry's."""
    p = subparsers.add_parser("evaluate", help="evaluate a scenario YAML file with the analytic model")
    p.add_argument("scenario", type=options.path, help="scenario YAML file")
    p.add_argument("--format", choices=list(FORMATS), default=next(iter(FORMATS)),
                   help="; ".join(f"{name}: {f.help}" for name, f in FORMATS.items()))
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    p.add_argument("--units", choices=["base", "human"], default="base",
                   help="csv only: base (B, s, full precision; default) or human (GB/GiB, ms, 4 digits)")
    return p


def run_evaluate(args: argparse.Namespace) -> str | bytes:
    """What ``capacity evaluate`` writes; ScenarioError on a bad file or option."""
    if FORMATS[args.format].binary and not args.output:
        kind = "workbook" if args.format == "xlsx" else "file"
        raise ScenarioError(f"--format {args.format} writes a binary {kind}: give -o FILE.{args.format}")
    if args.units == "human" and args.format != "csv":
        raise ScenarioError(f"--units human is for --format csv; {args.format} keeps its own units")
    from capacity.model.scenario import load_scenario

    return render(load_scenario(args.scenario).evaluate(), args.format, args.units)


__all__ = ["add_evaluate_command", "run_evaluate"]
