"""``capacity autoscale SCENARIO.yaml --peak-rps 40 [--burst 43200:600:3] [--provision "3 min"] ...``.

A day of traffic (``--profile`` 24 hourly rates, or ``--peak-rps`` with ``--peak-factor``; stated ``--burst``
START:DURATION:FACTOR, a Markov-modulated ``--mmpp`` FACTOR:MEAN_BURST:MEAN_CALM, or a ``--trace``) run through
each autoscaling policy (``--policies``, ``--utilizations``) with the platform's delays, every request simulated
(``capacity.planning.autoscaling``): per policy the GPU-hours and $/month against the share of requests keeping
each promise, beside provisioning for the peak; the cheapest policy that keeps the promises at their percentile and
its reserved/on-demand split (``--price-ratio``: on-demand over reserved price). ``--format json`` adds the chosen
policy's day in bins of ``--bin`` (replicas, load, p99 TTFT).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from capacity.cli import options
from capacity.errors import ScenarioError

#: Policy kinds, as ``capacity.simulator.autoscale.POLICY_KINDS`` (kept here so that parsing the options imports no
#: numpy; ``tests/cli/test_options.py`` checks they agree).
POLICY_KINDS = ("throughput", "queue", "ttft")
#: Most profile steps, and the longest time an option takes [s] (about four months).
MAX_STEPS, MAX_TIME_S = 100_000, 1e7
#: ``--burst START:DURATION:FACTOR`` and ``--mmpp FACTOR:MEAN_BURST:MEAN_CALM``, each part checked.
BURST = options.triple(options.duration(0, MAX_TIME_S), options.duration(1e-3, MAX_TIME_S),
                       options.number(0, 1e6, open_low=True), shape="START:DURATION:FACTOR")
MMPP = options.triple(options.number(0, 1e6, open_low=True), options.duration(1e-3, MAX_TIME_S),
                      options.duration(1e-3, MAX_TIME_S), shape="FACTOR:MEAN_BURST:MEAN_CALM")


def add_autoscale_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``autoscale`` subcommand to the ``capacity`` parser."""
    p = subparsers.add_parser("autoscale", help="a day of traffic with an autoscaler: cost per policy against the "
                                                "promises kept, and the reserved/on-demand split")
    p.add_argument("scenario", type=options.path, help="scenario YAML file")
    p.add_argument("--profile", type=options.number_list(0, 1e9, most=MAX_STEPS),
                   help="24 (or any number of) comma-separated rates in requests/s, one per --step")
    p.add_argument("--peak-rps", type=options.number(0, 1e9, open_low=True, unit="requests/s"),
                   help="the peak hour's rate in requests/s (a smooth day, see planning/daily.py)")
    p.add_argument("--peak-factor", type=options.number(1, 1e6), default=10.0,
                   help="peak over trough for --peak-rps (default 10)")
    p.add_argument("--peak-hour", type=options.number(0, 24, open_high=True), default=12.0,
                   help="hour of the peak for --peak-rps (default 12)")
    p.add_argument("--step", type=options.duration(1, MAX_TIME_S), default="1 h",
                   help="length of one profile step (default 1 h)")
    p.add_argument("--burst", action="append", default=[], type=BURST,
                   help="START:DURATION:FACTOR, times in s or with units (e.g. '12 h:10 min:3'); repeatable")
    p.add_argument("--mmpp", type=MMPP, help="FACTOR:MEAN_BURST:MEAN_CALM, a Markov-modulated burst process")
    p.add_argument("--trace", type=options.path,
                   help="a CSV/JSONL trace with arrival_s, prompt_tokens, output_tokens (replaces the profile's "
                        "arrivals)")
    p.add_argument("--arrival", choices=["poisson", "fixed"], default="poisson",
                   help="arrival process (fixed: evenly spaced)")
    p.add_argument("--seed", type=options.whole(0, 2**63 - 1), default=0)
    p.add_argument("--provision", type=options.duration(0, MAX_TIME_S), default="0 s",
                   help="node provisioning time (not stated: 0 s, optimistic)")
    p.add_argument("--load-bandwidth", type=options.quantity_text("bandwidth", "2 GB/s"),
                   help="weight load bandwidth, e.g. '2 GB/s' (not stated: weights load in 0 s)")
    p.add_argument("--warmup", type=options.duration(0, MAX_TIME_S), default="0 s",
                   help="warm-up after loading: CUDA graphs, compilation (default 0 s)")
    p.add_argument("--scale-down", type=options.duration(0, MAX_TIME_S), default="300 s",
                   help="scale-down stabilisation window (default 300 s: Kubernetes HPA)")
    p.add_argument("--interval", type=options.duration(1, MAX_TIME_S), default="15 s",
                   help="evaluation interval (default 15 s: Kubernetes HPA)")
    p.add_argument("--tolerance", type=options.number(0, 1, open_high=True), default=0.1,
                   help="no change within this ratio (default 0.1: HPA)")
    p.add_argument("--min-replicas", type=options.whole(1, 100_000), default=1)
    p.add_argument("--max-replicas", type=options.whole(1, 100_000), default=1000)
    p.add_argument("--policies", type=options.choice_list(POLICY_KINDS), default="throughput,queue,ttft",
                   help="policy kinds to compare")
    p.add_argument("--utilizations", type=options.number_list(0, 1.5, most=16, open_low=True), default="1,0.8,0.6",
                   help="target utilisations (load over goodput) to try")
    p.add_argument("--price-ratio", type=options.number(0, 1000, open_low=True), default=1.0,
                   help="on-demand over reserved price (default 1: no discount)")
    p.add_argument("--every-window", action="store_true",
                   help="keep the promises' percentile in every 15-minute window too, not only over the day")
    p.add_argument("--bin", type=options.duration(1, MAX_TIME_S), default="15 min",
                   help="json: the day's timeline in bins of this length")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("-o", "--output", type=options.path, help="write to this file instead of standard output")
    return p


def _time(text: str, flag: str) -> float:
    from capacity.inputs.units import parse_quantity

    try:
        return float(text) if _is_number(text) else parse_quantity(text, "time", flag)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"{flag}: {exc}") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parts(text: str, flag: str, n: int) -> list[str]:
    parts = text.split(":")
    if len(parts) != n:
        raise ScenarioError(f"{flag} must be {n} values separated by ':', got {text!r}")
    return parts


def day_of(args: argparse.Namespace) -> Any:
    """The ``DaySpec`` of the command line."""
    from capacity.planning.autoscaling import DaySpec
    from capacity.planning.daily import diurnal_rates
    from capacity.simulator.traffic import Burst, Mmpp

    step = _time(args.step, "--step")
    try:
        if args.profile:
            rates = tuple(args.profile)  # finite rates >= 0, read by options.number_list
        elif args.peak_rps is not None:
            rates = tuple(float(v) for v in diurnal_rates(args.peak_rps, args.peak_factor, args.peak_hour))
        elif args.trace:
            rates = (0.0,)
        else:
            raise ScenarioError("give --profile (hourly rates), --peak-rps (with --peak-factor) or --trace")
        bursts = []
        for text in args.burst:
            start, duration, factor = _parts(text, "--burst", 3)
            bursts.append(Burst(_time(start, "--burst"), _time(duration, "--burst"), float(factor)))
        mmpp = None
        if args.mmpp:
            factor, burst, calm = _parts(args.mmpp, "--mmpp", 3)
            mmpp = Mmpp(float(factor), _time(burst, "--mmpp"), _time(calm, "--mmpp"))
        return DaySpec(rates, step, tuple(bursts), mmpp, args.arrival, args.seed)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None


def plan_of(args: argparse.Namespace) -> Any:
    """The ``AutoscalePlan`` of the command line."""
    from pathlib import Path

    from capacity import load_scenario
    from capacity.inputs.units import parse_quantity
    from capacity.planning.autoscaling import plan_autoscaling, policy_grid
    from capacity.simulator.autoscale import Delays

    scenario = load_scenario(args.scenario)
    day = day_of(args)
    try:
        delays = Delays(provision_s=_time(args.provision, "--provision"),
                        load_bandwidth=parse_quantity(args.load_bandwidth, "bandwidth", "--load-bandwidth")
                        if args.load_bandwidth else None,
                        warmup_s=_time(args.warmup, "--warmup"), scale_down_s=_time(args.scale_down, "--scale-down"))
        kinds, utilizations = tuple(args.policies), tuple(args.utilizations)  # read by their option types
        policies = policy_grid(kinds, utilizations, interval_s=_time(args.interval, "--interval"),
                               tolerance=args.tolerance, min_replicas=args.min_replicas,
                               max_replicas=args.max_replicas)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    table = None
    if args.trace:
        from capacity.simulator.workloads import read_trace

        table = read_trace(args.trace, scenario.serving.max_model_len, Path(args.scenario).parent)
    return plan_autoscaling(scenario, day, delays, policies, args.price_ratio, table=table,
                            every_window=args.every_window)


COLUMNS = (("policy", "policy", "{}"), ("gpu_hours_per_day", "GPU-h/day", "{:,.1f}"),
           ("cost_per_month", "$/month", "{:,.0f}"), ("share_ttft", "TTFT kept", "{:.2%}"),
           ("share_tpot", "TPOT kept", "{:.2%}"), ("p99_ttft_s", "p99 TTFT s", "{:,.3g}"),
           ("max_ttft_s", "max TTFT s", "{:,.3g}"), ("worst_window_share", "worst 15 min", "{:.1%}"),
           ("min_replicas", "min", "{}"), ("max_replicas", "max", "{}"),
           ("keeps_promises", "keeps", "{}"))


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt.format(value)


def table_text(plan: Any) -> str:
    """The plan as text: a line per policy, the peak fleet, the answer and its split, the assumptions."""
    rows = plan.rows()
    cells = [[h for _, h, _ in COLUMNS]] + [[_cell(r, k, f) + (" *" if k == "policy" and r["chosen"] else "")
                                             for k, _, f in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) if i == 0 else c[i].rjust(widths[i]) for i in range(len(c)))
             for c in cells]
    s = plan.summary()
    out = [f"replica: TP{s['tensor_parallel']} {s['mode']}, {s['gpus_per_replica']} GPU(s), goodput "
           f"{s['replica_goodput_rps']:.3g} requests/s at the promises' {s['goodput_basis']}, ceiling "
           f"{s['replica_ceiling_rps']:.3g} requests/s; {s['requests']:,} requests simulated",
           f"scale-up {s['scale_up_s']:.0f} s = provision {s['provision_s']:.0f} s + weights {s['weight_load_s']:.0f} s"
           f" + warm-up {s['warmup_s']:.0f} s; scale-down window {s['scale_down_s']:.0f} s", "", *lines, ""]
    if s["chosen_policy"] is None:
        out.append("no policy keeps the promises at their percentile; provisioning for the peak "
                   + ("does" if s["peak"]["keeps_promises"] else "does not either"))
    else:
        out.append(f"answer: {s['chosen_policy']} (marked *), the cheapest policy that keeps the promises")
        extra = s["against_cheapest"]
        if extra and extra["cheapest_policy"] != s["chosen_policy"]:
            cost = extra["extra_cost_per_month"]
            out.append(f"  against the cheapest policy ({extra['cheapest_policy']}, which "
                       f"{'keeps' if extra['cheapest_keeps'] else 'does not keep'} them): "
                       f"+{extra['extra_gpu_hours_per_day']:,.1f} GPU-h/day"
                       + (f", +${cost:,.0f}/month" if cost is not None else ""))
        split = s["reserved_split"]
        out.append(f"  reserved: {split['reserved_replicas']} replicas ({split['reserved_gpus']} GPUs, the base the "
                   f"day never drops below), on demand: {split['on_demand_gpu_hours_per_day']:,.1f} GPU-h/day")
        if "cost_per_month" in split:
            out.append(f"  with on-demand / reserved price = {split['price_ratio']:g}: ${split['cost_per_month']:,.0f}"
                       f"/month (reserved ${split['reserved_cost_per_month']:,.0f} + on demand "
                       f"${split['on_demand_cost_per_month']:,.0f}); all on demand "
                       f"${split['all_on_demand_cost_per_month']:,.0f}; the peak fleet reserved "
                       f"${split['peak_reserved_cost_per_month']:,.0f}")
    if s["peak_is_cheaper"]:
        out.append(f"provisioning for the peak ({s['peak']['policy']}) keeps the promises for fewer GPU-hours than "
                   f"any policy that keeps them: this day's bursts are too long or too steep for the scale-up delay")
    out += ["", "assumptions:", *(f"  {a}" for a in s["assumptions"] + s["notes"])]
    return "\n".join(out) + "\n"


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return value


def run_autoscale(args: argparse.Namespace) -> str:
    """What ``capacity autoscale`` prints; ScenarioError for anything the user can fix."""
    plan = plan_of(args)
    if args.format == "table":
        return table_text(plan)
    data: dict[str, Any] = {"summary": plan.summary(), "rows": plan.rows()}
    if plan.chosen is not None:
        s = plan.replica.scenario.slo
        chosen = plan.outcomes[plan.chosen]
        data["timeline"] = chosen.day.timeline(_time(args.bin, "--bin"), s.tpot_s, s.ttft_s)
    return json.dumps(_clean(data), indent=2, default=str) + "\n"


__all__ = ["add_autoscale_command", "day_of", "plan_of", "run_autoscale", "table_text"]
