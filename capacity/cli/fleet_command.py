"""``capacity fleet SCENARIO.yaml --target-rps 100 | --tokens-per-day N | --users N [--peak 10] [--headroom 0.2]
[--gpus h100-sxm,h200 ...]``.

``--peak`` and ``--headroom`` default to the scenario's ``fleet: {peak_factor, headroom}`` (what the app saves).

Prints the ranked fleet options of ``capacity.planning.fleet.fleet_options`` as a table (default), CSV or JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError, clean_line
from capacity.inputs.specs import ALL_FLEET_MODES, FLEET_FIELDS, FleetPlan, check_section
from capacity.model.scenario import read_scenario_mapping


def add_fleet_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``fleet`` subcommand to the ``capacity`` parser."""
    p = subparsers.add_parser("fleet", help="GPUs, replicas and cost for a target load, per GPU type and layout")
    p.add_argument("scenario", type=options.path,
                   help="scenario YAML file (its model, serving settings, workload shape, promises)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--target-rps", type=options.number(0, 1e9, unit="requests/s"),
                      help="target load in requests/s")
    load.add_argument("--tokens-per-day", type=options.number(0, 1e18, unit="tokens/day"),
                      help="target load in (input + output) tokens per day")
    load.add_argument("--users", type=options.number(0, 1e9, open_low=True, unit="users"),
                      help="target load in concurrent users (a closed loop; the scenario's workload.think_time "
                           "applies)")
    p.add_argument("--peak", type=options.number(0, 1e6, open_low=True),
                   help="peak factor on the target (a sale day: 10); default: the scenario's fleet.peak_factor, "
                        "else 1")
    p.add_argument("--headroom", type=options.number(0, 1, open_high=True),
                   help="spare share of each replica's goodput, in [0, 1); default: the scenario's "
                        "fleet.headroom, else 0")
    p.add_argument("--gpus", type=options.names(MAX_GPUS, "catalog GPU names"), default=[],
                   help="comma-separated catalog GPUs (default: the scenario's GPU)")
    p.add_argument("--tp", type=options.whole_list(1, MAX_TP, MAX_TP_SIZES), default=None,
                   help="tensor-parallel sizes, e.g. 1,2,4,8 (default: those the scenario allows, as the answer "
                        "compares: fleet.tensor_parallel, else 1,2,4,8 and gpu.count)")
    p.add_argument("--modes", type=options.choice_list(ALL_FLEET_MODES), default=None,
                   help=f"serving modes, from {', '.join(ALL_FLEET_MODES)} (default: those the scenario allows, "
                        "fleet.modes, else all but split, and split too with a pools section; colocated for "
                        "percentile promises, as the answer compares); split: prefill and decode pools each on its "
                        "own GPU type and layout")
    p.add_argument("--prefill-gpus", type=options.names(MAX_GPUS, "catalog GPU names"), default=None,
                   help="split pools: catalog GPUs the prefill pool may use (default: the pools section's prefill "
                        "GPU, else those of --gpus)")
    p.add_argument("--decode-gpus", type=options.names(MAX_GPUS, "catalog GPU names"), default=None,
                   help="split pools: catalog GPUs the decode pool may use (default: the pools section's decode "
                        "GPU, else those of --gpus)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    return p


#: Most GPU types, tensor-parallel sizes and layouts (GPU types x sizes) one run sizes.
MAX_GPUS, MAX_TP_SIZES, MAX_LAYOUTS = 64, 16, 256
MAX_TP = 1024


def _plan(mapping: Mapping[str, Any]) -> FleetPlan:
    """The scenario's ``fleet`` section (peak factor, headroom), validated; the defaults when it has none."""
    problems: list[str] = []
    plan = FleetPlan(**check_section("fleet", mapping.get("fleet"), FLEET_FIELDS, problems=problems))
    if problems:
        raise ScenarioError(*problems)
    return plan


def run_fleet(args: argparse.Namespace) -> str:
    """Run ``capacity fleet``; returns the text to print. ScenarioError on bad input."""
    mapping = read_scenario_mapping(args.scenario)
    if not isinstance(mapping, Mapping):
        raise ScenarioError(f"{clean_line(args.scenario, 120)} must hold a scenario mapping")
    plan = _plan(mapping)
    # By default the layouts the scenario allows, as the one answer compares them (sizing.layouts_allowed): the first
    # option on the scenario's own GPU is then the answer of capacity evaluate.
    from capacity.planning.sizing import layouts_allowed

    gpu = mapping.get("gpu")
    count = gpu.get("count", 1) if isinstance(gpu, Mapping) else 1
    count = count if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_TP else 1
    slo_section = mapping.get("slo")
    modes, tps = layouts_allowed(plan.modes, plan.tensor_parallel, count,
                                 mapping.get("workloads") is not None or (
                                     isinstance(slo_section, Mapping) and slo_section.get("percentile") is not None),
                                 isinstance(mapping.get("pools"), Mapping))
    sizes = args.tp if args.tp is not None else list(tps)  # bounded and deduplicated by their option types
    mode_names = args.modes if args.modes is not None else list(modes)
    gpus = args.gpus
    prefill_gpus, decode_gpus = getattr(args, "prefill_gpus", None), getattr(args, "decode_gpus", None)
    types = max(len(gpus), 1) + len(prefill_gpus or ()) + len(decode_gpus or ())
    if types * len(sizes) > MAX_LAYOUTS:
        raise ScenarioError(f"--gpus (with --prefill-gpus and --decode-gpus) x --tp gives {types * len(sizes):,} "
                            f"layouts; the limit is {MAX_LAYOUTS} (and {MAX_GPUS} GPU types)")
    if (prefill_gpus or decode_gpus) and "split" not in mode_names:
        raise ScenarioError("--prefill-gpus and --decode-gpus choose split pools' GPUs: add split to --modes")
    target, per_day, users = args.target_rps, args.tokens_per_day, getattr(args, "users", None)
    peak = args.peak if args.peak is not None else plan.peak_factor
    headroom = args.headroom if args.headroom is not None else plan.headroom
    from capacity.planning.fleet import fleet_options  # numpy and pandas load only once the input is read and checked

    try:
        table = fleet_options(mapping, target=target, tokens_per_day=per_day,
                              peak_factor=peak, headroom=headroom, gpus=gpus or None,
                              tensor_parallel=sizes, modes=mode_names, users=users, prefill_gpus=prefill_gpus,
                              decode_gpus=decode_gpus)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    sized = table["mode"].astype(str) != ""
    if not sized.any():  # not one layout holds the scenario: that is an invalid input, not an empty answer
        reasons = list(dict.fromkeys(p for text in table["problem"].astype(str) for p in text.split("; ") if p))
        raise ScenarioError(*(reasons or ["no GPU layout holds this scenario"]))
    if args.format == "csv":
        from capacity.fileio.csv_safe import frame_to_csv

        return frame_to_csv(table)
    if args.format == "json":
        rows = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in table.to_dict("records")]
        return json.dumps(rows, indent=2, default=str) + "\n"
    return engine_line(mapping) + render(table) + error_line(mapping, table)


def error_line(mapping: Mapping, table) -> str:
    """The first option's GPU count as a range at the measured TPOT error of its class (engine x GPU family,
    ``capacity.inputs.accuracy``); "" for the essays' convention or without a measured figure."""
    from capacity.inputs.accuracy import expected_error
    from capacity.inputs.engines import engine_choice

    serving = mapping.get("serving") if isinstance(mapping.get("serving"), Mapping) else {}
    named = serving.get("engine")
    engine = engine_choice(None if named is None else str(named).lower())[0]
    rows = [r for r in table.to_dict("records") if isinstance(r.get("mode"), str) and r["mode"]]
    if not rows or engine is None:
        return ""
    first = min(rows, key=lambda r: r["rank"] if isinstance(r["rank"], float) and math.isfinite(r["rank"]) else 1e9)
    error = expected_error(engine, str(first["gpu"]))
    if error is None or not (isinstance(first["gpus"], float) and math.isfinite(first["gpus"])):
        return ""
    low, high = error.gpu_range(first["gpus"])
    return (f"note: rank 1 needs {first['gpus']:,.0f} GPUs, {low:,}-{high:,} at the measured TPOT error of "
            f"{error.label} ({error.mape_percent:.0f}% over {error.rows:,} rows"
            f"{'' if error.own_class else '; no rows of this class'})\n")


def engine_line(mapping: Mapping) -> str:
    """The engine choice the answer states (``engines.engine_choice``): the vLLM assumption where the scenario
    names no engine, the essays' conventions for ``ideal``; "" for a named engine. One line with its newline."""
    from capacity.inputs.engines import engine_choice

    serving = mapping.get("serving") if isinstance(mapping.get("serving"), Mapping) else {}
    named = serving.get("engine")
    note = engine_choice(None if named is None else str(named).lower())[1]
    return f"note: {note}\n" if note else ""


def render(table) -> str:
    from capacity.planning.fleet import layout_text

    """The options as aligned text: cheapest that keeps the promises first (split pools: prefill GPU / decode GPU)."""
    lines = [f"{'rank':>4}  {'GPU':<17} {'layout':<16}  {'serving':<13} {'GPUs':>6} {'$/hour':>10} {'$/M in':>8} "
             f"{'$/M out':>8} {'TPOT':>9} {'TTFT':>9}  note"]
    for row in table.to_dict("records"):
        def num(v: float, fmt: str) -> str:
            return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else "-"

        note = clean_line(str(row["problem"]), 200) if row["problem"] else None
        note = note or ("pareto" if row["pareto"] else "") or ("" if row["meets_slo"] else "misses")
        mode = row["mode"] if isinstance(row["mode"], str) else ""
        gpu, layout = layout_text(row)
        gpu, layout = clean_line(gpu, 40), clean_line(layout, 40)
        lines.append(f"{num(row['rank'], '.0f'):>4}  {gpu:<17} {layout:<16}  {mode:<13} "
                     f"{num(row['gpus'], ',.0f'):>6} {num(row['cost_per_hour'], ',.2f'):>10} "
                     f"{num(row['cost_per_million_input_tokens'], '.3f'):>8} "
                     f"{num(row['cost_per_million_output_tokens'], '.3f'):>8} "
                     f"{num(row['tpot_at_design_s'] * 1e3, ',.1f'):>7}ms "
                     f"{num(row['ttft_at_design_s'] * 1e3, ',.0f'):>7}ms  {note}")
    return "\n".join(lines) + "\n"


__all__ = ["add_fleet_command", "render", "run_fleet"]
