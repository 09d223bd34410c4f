"""``capacity report SCENARIO.yaml -o sizing.html`` and ``capacity flags SCENARIO.yaml --engine vllm``.

``report`` writes the customer report (``customer_report.customer_report_html``): HTML by default, PDF with
``--format pdf`` (printed by headless Chromium through Playwright; -o required). ``flags`` prints the
sizing as an engine's own launch command (``engine_flags``), as text or JSON.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError
from capacity.render.engine_flags import ENGINES, engine_settings, model_id, render_text


def add_report_command(subparsers: Any) -> None:
    """Add the ``report`` subcommand to the ``capacity`` parser."""
    p = subparsers.add_parser("report", help="a customer report: one self-contained HTML file (or PDF)")
    p.add_argument("scenario", type=options.path, help="scenario YAML file")
    p.add_argument("--format", choices=["html", "pdf"], default=None,
                   help="html (default, or from the -o suffix) or pdf (needs Chromium and playwright; needs -o)")
    p.add_argument("--arrival-rate", type=options.number(0, 1e9, unit="requests/s"), default=None,
                   help="load to size the fleet for, requests/s (default: the scenario's workload.arrival_rate)")
    p.add_argument("--peak", type=options.number(0, 1e6, open_low=True), default=None,
                   help="peak factor on the load (a sale day: 10; default: the scenario's fleet.peak_factor, else 1)")
    p.add_argument("--headroom", type=options.number(0, 1, open_high=True), default=None,
                   help="spare share of each replica's goodput, in [0, 1) (default: the scenario's fleet.headroom, "
                        "else 0)")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")


def add_flags_command(subparsers: Any) -> None:
    """Add the ``flags`` subcommand to the ``capacity`` parser."""
    f = subparsers.add_parser("flags", help="the sizing as a serving engine's flags (vLLM, TensorRT-LLM, SGLang)")
    f.add_argument("scenario", type=options.path, help="scenario YAML file")
    f.add_argument("--engine", choices=[*ENGINES, "all"], default=None,
                   help="engine (default: the scenario's serving engine, else vllm); all: every engine")
    f.add_argument("--format", choices=["text", "json"], default="text")
    f.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")


def _results(args: argparse.Namespace):
    from capacity.model.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    if getattr(args, "arrival_rate", None) is not None:
        scenario = scenario.with_changes(workload={"arrival_rate": args.arrival_rate})
    return scenario.evaluate()


def run_report(args: argparse.Namespace) -> str | bytes:
    """Run ``capacity report``; returns the HTML text or the PDF bytes. ScenarioError on bad input."""
    suffix = args.output.rsplit(".", 1)[-1].lower() if args.output and "." in args.output else ""
    fmt = args.format or ("pdf" if suffix == "pdf" else "html")
    if fmt == "pdf" and not args.output:
        raise ScenarioError("--format pdf writes a binary file: give -o FILE.pdf")
    results = _results(args)  # the scenario is read and checked before the charting libraries load
    from capacity.render.customer_report import customer_report_html, html_to_pdf

    plan = results.scenario.fleet  # the scenario's fleet section unless the options say otherwise
    document = customer_report_html(results, peak_factor=plan.peak_factor if args.peak is None else args.peak,
                                    headroom=plan.headroom if args.headroom is None else args.headroom)
    return html_to_pdf(document) if fmt == "pdf" else document


def run_flags(args: argparse.Namespace) -> str:
    """Run ``capacity flags``; returns the text to print."""
    results = _results(args)
    names = list(ENGINES) if args.engine == "all" else [args.engine]
    settings = [engine_settings(results, name) for name in names]
    model = model_id(results)
    if args.format == "json":
        return json.dumps([{**s.as_dict(), "command": s.command(model)} for s in settings], indent=2) + "\n"
    return "\n".join(render_text(s, model) for s in settings)


__all__ = ["add_flags_command", "add_report_command", "run_flags", "run_report"]
