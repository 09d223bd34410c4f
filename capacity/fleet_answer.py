"""The fleet answer a customer asks for: how many GPUs for this load, at what cost, and what binds.

``fleet_answer(results)`` sizes the fleet for the scenario's arrival rate (``fleet.fleet_for_load``: replicas =
ceil(load / goodput)) and says it in one sentence, with the numbers behind it:

    "To serve 10 requests/s of 1,200-token prompts and 250-token answers within TPOT <= 50 ms and
     TTFT <= 1 s, you need 2 x H100 SXM (2 replicas of 1 GPU) at about $6.98/hour ($5,095/month);
     the TTFT promise sets each replica's limit of 6.91 requests/s."

Without an arrival rate it says what one replica serves. Cost per month = cost per hour x 730 h (the
average month, 8,760 h / 12). Cost per million output tokens at the load: ``slo.cost_per_million_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import catalog
from .answer import HOURS_PER_MONTH, cost_per_month
from .errors import ScenarioError
from .fleet import FleetSize, fleet_for_load
from .scenario import Results
from .slo import cost_per_million_tokens


@dataclass(frozen=True, slots=True)
class FleetAnswer:
    """The sentence and its numbers. ``fleet`` is None without an arrival rate or when no load is served;
    costs are None without a price. ``load_rps`` is the target load (the scenario's arrival rate)."""

    sentence: str
    load_rps: float | None
    fleet: FleetSize | None
    cost_per_hour: float | None
    cost_per_month: float | None
    cost_per_million_output_tokens: float | None
    limit: str


def display_name(kind: str, name: str) -> str:
    """The catalog's full name of a GPU or model key ('h100-sxm' -> 'NVIDIA H100 SXM5 80GB'), else ``name``."""
    try:
        entry = catalog.gpu(name) if kind == "gpu" else catalog.model(name)
    except ScenarioError:
        return name
    return str(entry.get("name") or name)


def _promises(results: Results) -> str:
    slo = results.scenario.slo
    parts = [f"{name} <= {value * 1e3:,.0f} ms" if value < 1 else f"{name} <= {value:,.3g} s"
             for name, value in (("TPOT", slo.tpot_s), ("TTFT", slo.ttft_s)) if value is not None]
    return " within " + " and ".join(parts) if parts else " (no latency promise)"


def limit_phrase(results: Results) -> str:
    """What sets one replica's goodput, in words: a promise, GPU capacity with its batch cap, or nothing fits."""
    r = results
    if r["batch_max"] <= 0:
        return "no request fits in the KV memory"
    goodput = f"{r['goodput_rps']:,.2f} requests/s"
    cap = "KV memory" if r["batch_limit"] == "kv_memory" else "serving.max_num_seqs"
    return {"tpot": f"the TPOT promise sets each replica's limit of {goodput}",
            "ttft": f"the TTFT promise sets each replica's limit of {goodput}",
            }.get(str(r["goodput_limit"]),
                  f"GPU capacity sets each replica's limit of {goodput} ({cap} caps the batch at "
                  f"{r['batch_max']:,.0f})")


def _layout(results: Results, replicas: int) -> str:
    g = results.scenario.gpu
    per = g.gpus_per_replica
    gpus = replicas * per
    unit = "replica" if replicas == 1 else "replicas"
    return f"{gpus:,} x {display_name('gpu', g.name)} ({replicas:,} {unit} of {per} GPU{'s' if per > 1 else ''})"


def _money(value: float) -> str:
    return f"${value:,.2f}" if value < 100 else f"${value:,.0f}"


def fleet_answer(results: Results, target_rps: float | None = None, peak_factor: float = 1.0,
                 headroom: float = 0.0) -> FleetAnswer:
    """The one-sentence answer for ``target_rps`` (default: the scenario's arrival rate) [requests/s]."""
    s, r = results.scenario, results
    load = target_rps if target_rps is not None else s.workload.arrival_rate
    shape = (f"{s.workload.prompt_tokens:,}-token prompts and {s.workload.output_tokens:,}-token answers"
             f"{_promises(results)}")
    where = f"{display_name('model', s.model.name)} on {s.gpu.gpus_per_replica} x {display_name('gpu', s.gpu.name)}"
    limit = limit_phrase(results)
    price = s.gpu.price_per_hour
    if r["batch_max"] <= 0:
        return FleetAnswer(f"{where} cannot serve {shape}: {limit}; use a larger GPU, more GPUs per replica or "
                      "smaller weights or KV cache.", load, None, None, None, None, limit)
    if r["goodput_rps"] <= 0:
        return FleetAnswer(f"{where} serves no load of {shape}: no arrival rate keeps the promises "
                      f"({'; '.join(results.notes()) or limit}).", load, None, None, None, None, limit)
    if not load:
        cost = f" at {_money(price * s.gpu.gpus_per_replica)}/hour per replica" if price is not None else ""
        per_m = r["cost_per_million_tokens"]
        tokens = (f", {_money(per_m)} per million output tokens when it runs full"
                  if price is not None and math.isfinite(per_m) else "")
        return FleetAnswer(f"One replica of {_layout(results, 1).split(' (')[0]} serves up to {r['goodput_rps']:,.2f} "
                      f"requests/s of {shape}{cost}{tokens}; {limit}. Give an arrival rate to size the fleet.",
                      None, None, price * s.gpu.gpus_per_replica if price is not None else None,
                      cost_per_month(price * s.gpu.gpus_per_replica) if price is not None else None,
                      per_m if price is not None and math.isfinite(per_m) else None, limit)
    fleet = fleet_for_load(results, load, peak_factor, headroom)
    design = "" if peak_factor == 1 and headroom == 0 else (
        f" (designed for {fleet.design_load_rps:,.3g} requests/s at peak x{peak_factor:g}"
        f"{f', {headroom:.0%} headroom' if headroom else ''})")
    if fleet.cost_per_hour is not None:
        month = cost_per_month(fleet.cost_per_hour)
        per_m = float(cost_per_million_tokens(price, fleet.gpus, load, s.workload.output_tokens))
        money = f" at about {_money(fleet.cost_per_hour)}/hour ({_money(month)}/month)"
    else:
        month = per_m = None
        money = " (no GPU price given, so no cost)"
    sentence = (f"To serve {load:,.3g} requests/s of {shape}, you need {_layout(results, fleet.replicas)}{design}"
                f"{money}; {limit}.")
    return FleetAnswer(sentence, load, fleet, fleet.cost_per_hour, month, per_m, limit)


__all__ = ["FleetAnswer", "HOURS_PER_MONTH", "fleet_answer", "cost_per_month", "display_name", "limit_phrase"]
