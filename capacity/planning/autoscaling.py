"""A day of real traffic with an autoscaler: what each policy costs per month and which promises it keeps.

For a day of arrivals (``DaySpec``: hourly rates with bursts, ``simulator.traffic``) and the scale-up and scale-down
delays of the user's platform (``simulator.autoscale.Delays``), each policy (``simulator.autoscale.Policy``) is run
over the day: its control loop decides when replicas come and go, then every request is simulated on the replica it
is routed to (``simulator.autoscale``). The replica is the one answer's layout (``sizing.size`` at the day's peak
rate: its goodput at the promises' percentile, its ceiling, its GPUs). Per policy:

    GPU-hours per day  = Σ replicas' paid time x GPUs per replica / 3600               [GPU h]
    cost per month     = GPU-hours per day x price x 730 / L                           [$]   (L: the day's hours)
    share keeping each promise = requests within the promise / requests                 [-]
    worst window = the lowest share keeping every promise over the 15-minute windows of the day  [-]

beside provisioning for the peak (the fleet ``ceil(peak λ / λ_r)`` all day, simulated the same way). A policy keeps
the promises when the share of requests keeping each is at least the promise's percentile (``slo.percentile``;
without one, the day's mean TTFT and TPOT are within the promises); with ``every_window``, also in the worst
15-minute window of the day. The answer is the cheapest policy that keeps
them.

Reserved and on-demand. Reserved (committed) capacity is the base the day never drops below: ``R = min_t paid(t)``
replicas, paid all month at the reserved price; the rest is on demand:

    reserved per month  = R g (price / ratio) 730
    on demand per month = (GPU-hours per day − R g L) price 730 / L

with ``ratio`` the on-demand over reserved price (a stated input; 1 when not stated: no discount) and ``price`` the
one price of the answer, taken as on-demand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from capacity.errors import ScenarioError
from capacity.model.scenario import Scenario
from capacity.planning.sizing import HOURS_PER_MONTH, Sizing, latency_curve, mode_rates, replicas_for, size
from capacity.simulator.autoscale import DayResult, Delays, Policy, ReplicaModel, control, simulate_day
from capacity.simulator.traffic import HOUR_S, Burst, Mmpp, arrivals, day_table, per_second, rate_segments

#: The window whose worst share of requests keeping every promise is reported beside the day's [s].
WORST_WINDOW_S = 900.0

#: Most requests a simulated day may hold (memory about 100 B per request per run; time about 1.4 us of CPU per
#: request and policy, benchmarks/bench_autoscale.py).
MAX_DAY_REQUESTS = 100_000_000

#: Target utilisations tried for each policy kind when none are stated (load per replica over its goodput).
DEFAULT_UTILIZATIONS = (1.0, 0.8, 0.6)


@dataclass(frozen=True)
class DaySpec:
    """A day of traffic: rates per step [requests/s] of ``step_s`` [s], stated bursts, an MMPP, the arrival kind
    (``poisson`` or ``fixed``) and the seed."""

    rates_rps: tuple[float, ...]
    step_s: float = HOUR_S
    bursts: tuple[Burst, ...] = ()
    mmpp: Mmpp | None = None
    arrival: str = "poisson"
    seed: int = 0

    @property
    def length_s(self) -> float:
        return len(self.rates_rps) * self.step_s

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """``rate_segments`` of the day, the MMPP's bursts drawn from the seed's own stream."""
        bursts = list(self.bursts)
        if self.mmpp is not None:
            bursts += self.mmpp.periods(self.length_s, np.random.default_rng([self.seed, 2]))
        return rate_segments(self.rates_rps, self.step_s, bursts)


@dataclass(frozen=True)
class DayReplica:
    """The replica the day scales: the answer at the peak (``sizing``), its scenario and the scaler's model."""

    sizing: Sizing
    scenario: Scenario
    model: ReplicaModel
    notes: tuple[str, ...] = ()


def day_replica(scenario: Scenario, peak_rps: float) -> DayReplica:
    """The one answer's layout at the day's peak rate (``sizing.size`` with the load set to the peak, no peak factor
    or headroom): one replica's goodput at the promises' percentile, its ceiling and mean TTFT against its load.
    Separate prefill and decode pools are not scaled here: the answer is then taken among the other modes."""
    raw = dict(scenario.raw or {})
    notes: list[str] = []
    if raw:
        raw["workload"] = {**dict(raw.get("workload") or {}), "arrival_rate": float(peak_rps)}
        raw["fleet"] = {**dict(raw.get("fleet") or {}), "peak_factor": 1, "headroom": 0}
        sizing = size(Scenario.from_dict(raw))
        if sizing.mode in ("disaggregated", "split"):
            raw["fleet"]["modes"] = ["colocated", "chunked"]
            sizing = size(Scenario.from_dict(raw))
            notes.append("the answer at the peak is separate prefill and decode pools, which the autoscaler does not "
                         "scale; the day scales the best colocated or chunked layout")
    else:
        sizing = size(replace(scenario, workload=replace(scenario.workload, arrival_rate=float(peak_rps))))
    chosen = sizing.replica.scenario
    ceiling, _ = mode_rates(sizing.replica, sizing.mode)
    goodput = float(sizing.replica_goodput_rps)
    if not (goodput > 0 and ceiling > 0):
        raise ScenarioError("one replica serves no load within the promises: no fleet serves the day")
    rates = np.linspace(0.0, 0.999 * ceiling, 128)
    ttft = np.asarray(latency_curve(chosen, sizing.mode, rates)["ttft_s"], dtype=float)
    ttft = np.where(np.isfinite(ttft), ttft, np.nanmax(np.where(np.isfinite(ttft), ttft, 0.0)))
    model = ReplicaModel(goodput, float(ceiling), int(sizing.gpus_per_replica), rates, ttft, scenario.slo.ttft_s)
    return DayReplica(sizing, chosen, model, tuple(notes))


def policy_grid(kinds: tuple[str, ...] = ("throughput", "queue", "ttft"),
                utilizations: tuple[float, ...] = DEFAULT_UTILIZATIONS, **common: Any) -> list[Policy]:
    """One policy per kind and target utilisation (``common``: the other ``Policy`` fields)."""
    return [Policy(kind=k, target_utilization=u, **common) for k in kinds for u in utilizations]


@dataclass
class PolicyOutcome:
    """One policy's day: its result and figures (GPU-hours, cost, shares keeping each promise)."""

    name: str
    policy: Policy | None  # None: provisioning for the peak
    day: DayResult
    figures: dict[str, Any]


@dataclass
class AutoscalePlan:
    """Every policy's day, the peak-provisioned fleet's, the cheapest that keeps the promises and its split."""

    replica: DayReplica
    delays: Delays
    outcomes: list[PolicyOutcome]
    peak: PolicyOutcome
    chosen: int | None
    split: dict[str, Any] | None
    assumptions: list[str] = field(default_factory=list)
    requests: int = 0

    def rows(self) -> list[dict[str, Any]]:
        """One row per policy, then the peak-provisioned fleet, each with ``chosen``."""
        out = [{**o.figures, "chosen": i == self.chosen} for i, o in enumerate(self.outcomes)]
        return [*out, {**self.peak.figures, "chosen": False}]

    def summary(self) -> dict[str, Any]:
        chosen = self.outcomes[self.chosen] if self.chosen is not None else None
        extra = None
        if chosen is not None:
            cheapest = min(self.outcomes, key=lambda o: o.figures["gpu_hours_per_day"])
            extra = {"cheapest_policy": cheapest.name, "cheapest_keeps": cheapest.figures["keeps_promises"],
                     "extra_gpu_hours_per_day": chosen.figures["gpu_hours_per_day"]
                     - cheapest.figures["gpu_hours_per_day"],
                     "extra_cost_per_month": _sub(chosen.figures["cost_per_month"],
                                                  cheapest.figures["cost_per_month"])}
        s = self.replica.sizing
        peak_cheaper = bool(self.peak.figures["keeps_promises"] and (
            chosen is None or self.peak.figures["gpu_hours_per_day"] < chosen.figures["gpu_hours_per_day"]))
        return {"requests": self.requests, "peak_is_cheaper": peak_cheaper, "mode": s.mode,
                "tensor_parallel": s.tensor_parallel,
                "gpus_per_replica": s.gpus_per_replica, "replica_goodput_rps": self.replica.model.goodput_rps,
                "replica_ceiling_rps": self.replica.model.ceiling_rps, "goodput_basis": s.goodput_basis,
                "price_per_gpu_hour": s.price_per_gpu_hour, "price_source": s.price_source,
                "scale_up_s": self.delays.scale_up_s, "provision_s": self.delays.provision_s,
                "weight_load_s": self.delays.weight_load_s, "warmup_s": self.delays.warmup_s,
                "scale_down_s": self.delays.scale_down_s,
                "chosen_policy": chosen.name if chosen else None, "against_cheapest": extra,
                "peak": self.peak.figures, "reserved_split": self.split,
                "assumptions": self.assumptions, "notes": list(self.replica.notes)}


def _sub(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _figures(name: str, day: DayResult, scenario: Scenario, price: float | None, every_window: bool = False
             ) -> dict[str, Any]:
    slo = scenario.slo
    kept = day.kept(slo.tpot_s, slo.ttft_s)
    n = max(len(day.arrival_s), 1)
    hours = day.length_s / 3600.0
    gpu_hours = day.gpu_hours
    done = ~np.isnan(day.finish_s)
    ttft = day.ttft_s[done]
    tpot = day.tpot_s[done & ~np.isnan(day.tpot_s)]
    pct = slo.percentile
    shares = {f"share_{k}": float(v.sum() / n) for k, v in kept.items()}
    if pct is not None:
        keeps = all(v >= pct / 100.0 - 1e-12 for k, v in shares.items() if k != "share_all")
    else:
        keeps = bool(done.all()) and (slo.ttft_s is None or float(ttft.mean()) <= slo.ttft_s) and \
            (slo.tpot_s is None or tpot.size == 0 or float(tpot.mean()) <= slo.tpot_s)
    paid = day.paid_replicas()
    month = HOURS_PER_MONTH / hours
    bins = day.timeline(WORST_WINDOW_S, slo.tpot_s, slo.ttft_s)["share_kept"]
    worst = float(np.nanmin(bins)) if np.isfinite(bins).any() else None
    if every_window and worst is not None:
        keeps = keeps and worst >= (pct if pct is not None else 50.0) / 100.0 - 1e-12
    return {"policy": name, "gpu_hours_per_day": gpu_hours,
            "cost_per_day": gpu_hours * price if price is not None else None,
            "cost_per_month": gpu_hours * price * month if price is not None else None,
            **shares, "keeps_promises": keeps,
            "worst_window_share": worst,
            "mean_ttft_s": float(ttft.mean()) if ttft.size else None,
            "p99_ttft_s": float(np.percentile(ttft, 99)) if ttft.size else None,
            "max_ttft_s": float(ttft.max()) if ttft.size else None,
            "p99_tpot_s": float(np.percentile(tpot, 99)) if tpot.size else None,
            "min_replicas": int(paid.min()) if paid.size else 0, "max_replicas": int(paid.max()) if paid.size else 0,
            "mean_replicas": float(paid.mean()) if paid.size else 0.0, "replicas_started": day.schedule.instances}


def reserved_split(day: DayResult, price: float | None, ratio: float) -> dict[str, Any]:
    """Reserved = the base the day never drops below, on demand = the rest (module docstring) [replicas, GPUs, $]."""
    g = day.gpus_per_replica
    hours = day.length_s / 3600.0
    reserved = int(day.paid_replicas().min())
    on_demand_gpu_hours = max(day.gpu_hours - reserved * g * hours, 0.0)
    month = HOURS_PER_MONTH / hours
    out: dict[str, Any] = {"reserved_replicas": reserved, "reserved_gpus": reserved * g,
                           "on_demand_gpu_hours_per_day": on_demand_gpu_hours, "price_ratio": ratio}
    if price is not None:
        out["reserved_cost_per_month"] = reserved * g * price / ratio * HOURS_PER_MONTH
        out["on_demand_cost_per_month"] = on_demand_gpu_hours * price * month
        out["cost_per_month"] = out["reserved_cost_per_month"] + out["on_demand_cost_per_month"]
        out["all_on_demand_cost_per_month"] = day.gpu_hours * price * month
    return out


def plan_autoscaling(scenario: Scenario, day: DaySpec, delays: Delays, policies: list[Policy],
                     price_ratio: float = 1.0, event_loop: str = "auto", table: Any = None,
                     every_window: bool = False) -> AutoscalePlan:
    """Each policy over the day, and the peak-provisioned fleet (module docstring).

    ``every_window``: a policy keeps the promises only if, besides the day's shares, the share of requests keeping
    every promise in its worst 15-minute window reaches the percentile (without one, half): a day's p99 can hide
    a burst in which most requests wait.

    ``delays.weight_bytes`` 0 takes the chosen layout's model weights. ``table``: the requests (a trace) instead of
    drawing them from ``day``; their arrival times set the day's length.
    """
    from capacity.simulator.config import config_from_scenario

    if not price_ratio >= 1 or not math.isfinite(price_ratio):
        raise ScenarioError(f"the on-demand over reserved price ratio must be >= 1, got {price_ratio}")
    if not policies:
        raise ScenarioError("no autoscaling policy to compare")
    edges, rates = day.segments()
    length = day.length_s
    peak_rps = float(rates.max())
    if table is not None:
        length = max(length, float(math.ceil(table.arrival_s.max() + 1))) if len(table) else length
        counts = per_second(table.arrival_s, length)
        minutes = np.add.reduceat(counts, np.arange(0, len(counts), 60)) / 60.0  # a trace's peak, per minute
        peak_rps = max(peak_rps, float(minutes.max()))
    else:
        expected = float((rates * np.diff(edges)).sum())
        if expected > MAX_DAY_REQUESTS:
            raise ScenarioError(f"the day holds about {expected:,.0f} requests; the limit is {MAX_DAY_REQUESTS:,} "
                                f"(ten million take about a minute per policy): lower the rates or the day's length")
    rep = day_replica(scenario, peak_rps)
    chosen_scenario = rep.scenario
    analytic = chosen_scenario.evaluate()
    if delays.weight_bytes == 0:
        delays = replace(delays, weight_bytes=float(chosen_scenario.inputs()["weight_bytes"]))
    overrides: dict[str, Any] = {"requests": 1, "rate": 1.0, "arrival": "poisson", "replicas": 1,
                                 "prefill_replicas": 0, "retries": 0, "seed": day.seed}
    if rep.sizing.mode == "chunked":
        overrides["chunked_prefill"] = True
    config = config_from_scenario(chosen_scenario, event_loop, **overrides)
    if table is None:
        times = arrivals(edges, rates, np.random.default_rng([day.seed, 1]), day.arrival)
        table = day_table(config, times)
    counts = per_second(table.arrival_s, length)
    price = rep.sizing.price_per_gpu_hour
    assumptions = _assumptions(delays, price_ratio, price)
    outcomes = []
    for policy in policies:
        schedule = control(counts, policy, delays, rep.model)
        result = simulate_day(chosen_scenario, config, table, schedule, rep.model, length, analytic, event_loop)
        outcomes.append(PolicyOutcome(policy.name, policy, result, _figures(policy.name, result, scenario, price,
                                                                                 every_window)))
    n_peak = int(replicas_for(peak_rps, rep.model.goodput_rps))
    static = control(counts, policies[0], delays, rep.model, static=max(n_peak, 1))
    peak_day = simulate_day(chosen_scenario, config, table, static, rep.model, length, analytic, event_loop)
    peak = PolicyOutcome(f"peak ({n_peak} replicas all day)", None, peak_day,
                         _figures(f"peak ({n_peak} replicas all day)", peak_day, scenario, price, every_window))
    keeping = [i for i, o in enumerate(outcomes) if o.figures["keeps_promises"]]
    chosen = min(keeping, key=lambda i: (outcomes[i].figures["gpu_hours_per_day"], i)) if keeping else None
    split = reserved_split(outcomes[chosen].day, price, price_ratio) if chosen is not None else None
    if split is not None and price is not None:
        split["peak_reserved_cost_per_month"] = n_peak * rep.model.gpus * price / price_ratio * HOURS_PER_MONTH
    return AutoscalePlan(rep, delays, outcomes, peak, chosen, split, assumptions, len(table))


def _assumptions(delays: Delays, ratio: float, price: float | None) -> list[str]:
    """The stated assumptions a user must see beside the answer."""
    out = []
    if delays.provision_s == 0:
        out.append("node provisioning not stated: 0 s assumed (optimistic: a cloud node takes minutes)")
    if delays.load_bandwidth is None:
        out.append("weight load bandwidth not stated: weights assumed loaded in 0 s")
    if delays.warmup_s == 0:
        out.append("warm-up (CUDA graph capture, compilation) not stated: 0 s assumed")
    if ratio == 1.0:
        out.append("on-demand over reserved price ratio not stated: 1 (no discount for reserving)")
    if price is None:
        out.append("no price per GPU-hour: policies are compared on GPU-hours")
    out.append("the price per GPU-hour is taken as the on-demand price; a month is 730 h of days like this one")
    return out


__all__ = ["AutoscalePlan", "DEFAULT_UTILIZATIONS", "DayReplica", "DaySpec", "MAX_DAY_REQUESTS", "PolicyOutcome",
           "WORST_WINDOW_S",
           "day_replica", "plan_autoscaling", "policy_grid", "reserved_split"]
