"""The fleet answer a customer asks for: how many GPUs for this load, at what cost, and what binds.

``fleet_answer(results)`` renders the one answer (``sizing.size``: the layout chosen, replicas = ceil(load /
goodput), the cost from one price) in one sentence (``answer.answer``), with the numbers behind it:

    "To serve 10 requests/s of 1,200-token prompts and 250-token answers within TPOT <= 50 ms and
     TTFT <= 1 s, you need 2 x H100 SXM (2 replicas of 1 GPU) at about $6.98/hour ($5,095/month);
     the TTFT promise sets each replica's limit of 6.91 requests/s."

Without an arrival rate it says what one replica serves. Cost per month = cost per hour x 730 h (the
average month, 8,760 h / 12). Cost per million output tokens at the load: ``slo.cost_per_million_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capacity.answers.sentence import HOURS_PER_MONTH, answer, binds, cost_per_month
from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.model.scenario import Results
from capacity.planning.fleet import FleetSize
from capacity.planning.sizing import Sizing, size


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
    sizing: Sizing | None = None


def display_name(kind: str, name: str) -> str:
    """The catalog's full name of a GPU or model key ('h100-sxm' -> 'NVIDIA H100 SXM5 80GB'), else ``name``."""
    try:
        entry = catalog.gpu(name) if kind == "gpu" else catalog.model(name)
    except ScenarioError:
        return name
    return str(entry.get("name") or name)


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


def sizing_for(results: Results, target_rps: float | None = None, peak_factor: float | None = None,
               headroom: float | None = None) -> Sizing:
    """The one answer (``sizing.size``) for ``results``' scenario, with the load and fleet plan given here in place
    of the scenario's (None: the scenario's own)."""
    s = results.scenario
    if target_rps is None and peak_factor is None and headroom is None:
        return size(s, results)
    plan = replace(s.fleet, **{k: v for k, v in (("peak_factor", peak_factor), ("headroom", headroom))
                               if v is not None})
    workload = s.workload if target_rps is None else replace(s.workload, arrival_rate=target_rps, concurrency=None)
    return size(replace(s, workload=workload, fleet=plan), results)


def fleet_answer(results: Results, target_rps: float | None = None, peak_factor: float | None = None,
                 headroom: float | None = None) -> FleetAnswer:
    """The one-sentence answer for ``target_rps`` (default: the scenario's arrival rate) [requests/s], rendered from
    the one answer (``sizing_for``); ``peak_factor`` and ``headroom`` default to the scenario's ``fleet`` section."""
    z = sizing_for(results, target_rps, peak_factor, headroom)
    fleet = None
    if z.load_rps and z.replicas is not None:
        fleet = FleetSize(replicas=z.replicas, gpus=int(z.gpus or 0), cost_per_hour=z.cost_per_hour,
                          design_load_rps=float(z.design_load_rps or 0.0),
                          load_per_replica_rps=float(z.load_per_replica_rps or 0.0))
    limit = f"{binds(z)} sets each replica's limit of {z.replica_goodput_rps:,.2f} requests/s"
    return FleetAnswer(answer(z), z.load_rps, fleet, z.cost_per_hour, z.cost_per_month, z.cost_per_million_tokens,
                       limit, z)


__all__ = ["FleetAnswer", "HOURS_PER_MONTH", "cost_per_month", "display_name", "fleet_answer", "limit_phrase",
           "sizing_for"]
