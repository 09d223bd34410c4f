"""``capacity curve SCENARIO.yaml --kind concurrency|knee|classes|daily|guidance [--format table|csv|json]``.

* ``concurrency``: conversations that fit against context per request (``workload_curves.concurrency_curve``).
* ``knee``: throughput against latency over loads, with p50/p99 TTFT and TPOT per class, and the knee
  (``workload_curves.load_curve``, ``knee``).
* ``classes``: per-class sizing: goodput at each class's percentile and on the mean (``percentiles.sizing``).
* ``daily``: GPUs per hour for ``--profile`` (24 comma-separated hourly rates) or ``--peak-rps`` with
  ``--peak-factor``, and the cost against provisioning for the peak (``daily.plan_scenario_day``).
* ``guidance``: the recommended queue limit and the "what to inspect first" table at ``--rate``
  (``guidance.inspect_first``).

Every column carries its unit in its name (``_s`` seconds, ``_rps`` requests/s); JSON and CSV are in base units.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import pandas as pd

from capacity.cli import options
from capacity.errors import ScenarioError

KINDS = ("concurrency", "knee", "classes", "daily", "guidance")
#: Largest load an option takes [requests/s], peak factor [-] and TTFT promise [s]: beyond any real service.
MAX_RATE, MAX_PEAK_FACTOR, MAX_TTFT_S = 1e9, 1e6, 3600.0


def add_curve_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``curve`` subcommand to the ``capacity`` parser."""
    p = subparsers.add_parser("curve", help="curves and per-class sizing of a workload mix (concurrency, knee, "
                                            "classes, daily, guidance)")
    p.add_argument("scenario", type=options.path,
                   help="scenario YAML file (a workloads: list of classes, or one workload shape)")
    p.add_argument("--kind", choices=KINDS, required=True, help="which table to print")
    p.add_argument("--points", type=options.whole(2, 1000), default=32, help="loads on the knee curve (2 to 1000, "
                                                                              "default 32)")
    p.add_argument("--profile", type=options.number_list(0, MAX_RATE, 24),
                   help="daily: 24 comma-separated hourly rates in requests/s")
    p.add_argument("--peak-rps", type=options.number(0, MAX_RATE, open_low=True, unit="requests/s"),
                   help="daily: the peak hour's rate in requests/s")
    p.add_argument("--peak-factor", type=options.number(1, MAX_PEAK_FACTOR), default=10.0,
                   help=f"daily: peak over trough, in [1, {MAX_PEAK_FACTOR:g}] (default 10)")
    p.add_argument("--peak-hour", type=options.number(0, 24, open_high=True), default=12.0,
                   help="daily: hour of the peak, in [0, 24) (default 12, noon)")
    p.add_argument("--headroom", type=options.number(0, 1, open_high=True), default=0.0,
                   help="daily: spare share of each replica, in [0, 1)")
    p.add_argument("--mean-based", action="store_true", help="daily: size on the mean-based goodput")
    p.add_argument("--rate", type=options.number(0, MAX_RATE, open_low=True, unit="requests/s"),
                   help="guidance: the load in requests/s (default: workload.arrival_rate)")
    p.add_argument("--ttft", type=options.quantity("time", 0, MAX_TTFT_S),
                   help="guidance: the TTFT the queue limit protects, e.g. '2 s' (default: slo.ttft)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    return p


def _profile(args: argparse.Namespace) -> list[float]:
    from capacity.planning.daily import diurnal_rates

    if args.profile:
        return list(args.profile)  # 24 finite rates >= 0, read by options.number_list
    if args.peak_rps is None:
        raise ScenarioError("--kind daily needs --profile (24 hourly rates) or --peak-rps (with --peak-factor)")
    try:
        return list(diurnal_rates(args.peak_rps, args.peak_factor, args.peak_hour))
    except ValueError as exc:
        raise ScenarioError(f"--peak-rps/--peak-factor: {exc}") from None


def tables(args: argparse.Namespace) -> dict[str, Any]:
    """The table(s) ``capacity curve`` prints: ``{"rows": DataFrame, ...}`` plus a summary where the kind has one."""
    from capacity.model.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    if args.kind == "concurrency":
        from capacity.model.mix_curves import concurrency_curve

        return {"rows": concurrency_curve(scenario)}
    if args.kind == "knee":
        from capacity.model.mix_curves import knee, load_curve

        curve = load_curve(scenario, [0.02 + 0.96 * i / (args.points - 1) for i in range(args.points)])
        return {"rows": curve, "summary": {"knee": knee(curve).to_dict()}}
    if args.kind == "classes":
        from capacity.model.percentiles import sizing

        return {"rows": sizing(scenario)}
    if args.kind == "daily":
        from capacity.planning.daily import plan_scenario_day

        try:
            plan = plan_scenario_day(scenario, _profile(args), args.headroom, args.mean_based)
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
        return {"rows": plan.hours, "summary": plan.summary()}
    from capacity.answers.guidance import inspect_first, queue_limits, ttft_target_s
    from capacity.model.mix import mix_model

    ttft = args.ttft  # seconds, in (0, MAX_TTFT_S], read by options.quantity
    mix = mix_model(scenario)
    summary: dict[str, Any] = {}
    try:
        summary = queue_limits(mix, ttft_target_s(mix, ttft))
    except ValueError:
        summary = {"note": "no TTFT promise: give --ttft or slo.ttft to size a queue limit"}
    return {"rows": inspect_first(scenario, args.rate, ttft), "summary": summary}


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite numbers as None, nested mappings cleaned too."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run_curve(args: argparse.Namespace) -> str:
    """What ``capacity curve`` prints; ScenarioError for anything the user can fix."""
    out = tables(args)
    rows: pd.DataFrame = out["rows"]
    if args.format == "csv":
        return rows.to_csv(index=False, float_format="%.6g")
    if args.format == "json":
        data = {"kind": args.kind, "rows": [{k: _clean(v) for k, v in r.items()} for r in rows.to_dict("records")]}
        if "summary" in out:
            data["summary"] = {k: _clean(v) for k, v in out["summary"].items()}
        return json.dumps(data, indent=2, default=str) + "\n"
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_colwidth", 120):
        text = rows.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"
    if "summary" in out:
        text += "\n" + "\n".join(f"{k}: {_format(v)}" for k, v in out["summary"].items()) + "\n"
    return text


def _format(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_format(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


__all__ = ["KINDS", "add_curve_command", "run_curve", "tables"]
