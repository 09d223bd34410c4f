"""``capacity fleet SCENARIO.yaml --target-rps 100 [--peak 10] [--headroom 0.2] [--gpus h100-sxm,h200 ...]``.

Prints the ranked fleet options of ``capacity.fleet.fleet_options`` as a table (default), CSV or JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import ScenarioError
from .fleet import MODES, TENSOR_PARALLEL, fleet_options
from .scenario import read_scenario_mapping


def add_fleet_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``fleet`` subcommand to the ``capacity`` parser."""
    p = subparsers.add_parser("fleet", help="GPUs, replicas and cost for a target load, per GPU type and layout")
    p.add_argument("scenario", help="scenario YAML file (its model, serving settings, workload shape, promises)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--target-rps", type=float, help="target load in requests/s")
    load.add_argument("--tokens-per-day", type=float, help="target load in (input + output) tokens per day")
    p.add_argument("--peak", type=float, default=1.0, help="peak factor on the target (a sale day: 10)")
    p.add_argument("--headroom", type=float, default=0.0, help="spare share of each replica's goodput, in [0, 1)")
    p.add_argument("--gpus", default="", help="comma-separated catalog GPUs (default: the scenario's GPU)")
    p.add_argument("--tp", default=",".join(map(str, TENSOR_PARALLEL)), help="tensor-parallel sizes, e.g. 1,2,4,8")
    p.add_argument("--modes", default=",".join(MODES), help=f"serving modes, from {', '.join(MODES)}")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    return p


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run_fleet(args: argparse.Namespace) -> str:
    """Run ``capacity fleet``; returns the text to print. ScenarioError on bad input."""
    mapping = read_scenario_mapping(args.scenario)
    if not isinstance(mapping, Mapping):
        raise ScenarioError(f"{args.scenario} must hold a scenario mapping")
    try:
        sizes = [int(v) for v in _list(args.tp)]
        table = fleet_options(mapping, target=args.target_rps, tokens_per_day=args.tokens_per_day,
                              peak_factor=args.peak, headroom=args.headroom, gpus=_list(args.gpus) or None,
                              tensor_parallel=sizes, modes=_list(args.modes))
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if args.format == "csv":
        return table.to_csv(index=False)
    if args.format == "json":
        rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in table.to_dict("records")]
        return json.dumps(rows, indent=2, default=str) + "\n"
    return render(table)


def render(table) -> str:
    """The options as aligned text: cheapest that keeps the promises first."""
    lines = [f"{'rank':>4}  {'GPU':<12} {'TP':>2}  {'serving':<13} {'GPUs':>6} {'$/hour':>10} {'$/M in':>8} "
             f"{'$/M out':>8} {'TPOT':>9} {'TTFT':>9}  note"]
    for row in table.to_dict("records"):
        def num(v: float, fmt: str) -> str:
            return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else "-"

        note = row["problem"] or ("pareto" if row["pareto"] else "") or ("" if row["meets_slo"] else "misses")
        mode = row["mode"] if isinstance(row["mode"], str) else ""
        lines.append(f"{num(row['rank'], '.0f'):>4}  {row['gpu']:<12} {row['tensor_parallel']:>2}  {mode:<13} "
                     f"{num(row['gpus'], ',.0f'):>6} {num(row['cost_per_hour'], ',.2f'):>10} "
                     f"{num(row['cost_per_million_input_tokens'], '.3f'):>8} "
                     f"{num(row['cost_per_million_output_tokens'], '.3f'):>8} "
                     f"{num(row['tpot_at_design_s'] * 1e3, ',.1f'):>7}ms "
                     f"{num(row['ttft_at_design_s'] * 1e3, ',.0f'):>7}ms  {note}")
    return "\n".join(lines) + "\n"


__all__ = ["add_fleet_command", "render", "run_fleet"]
