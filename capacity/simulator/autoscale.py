"""An autoscaler over a day of traffic: replicas requested, loaded, warmed, routed to, drained and removed.

Two passes, because the engine simulator runs a replica's requests to the end and cannot be paused:

1. **The control loop** (``control``): one step per second over a fluid model of the fleet. Ready replicas serve
   up to ``n μ`` requests/s (μ: one replica's throughput ceiling at its largest batch, ``ceiling_rps``), the rest
   queue (a shared FIFO backlog ``Q``: ``Q ← max(0, Q + a_k − n μ)``, ``a_k`` the arrivals of second k); an arrival
   waits ``Q / (n μ)``. Every ``interval_s`` the policy reads what a metrics pipeline reads over the last interval
   (arrival rate, backlog, the worst TTFT of a cohort ``wait + mean TTFT at the load per replica``) and sets the desired
   replicas with the Kubernetes Horizontal Pod Autoscaler's rule
   (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details)::

       desired = ceil(current x metric / target)   per metric, kept at ``current`` within the tolerance,
       the largest over the metrics, clamped to [min, max]; scale-down to the largest desired of the last
       ``scale_down_s`` (the stabilisation window); scale-up at once

   The HPA's default scale-up limit applies: per evaluation at most ``max(2 current, current + 4)``.
   Policies (metrics): ``throughput`` (load per replica over ``u x goodput``: ``ceil(λ / (u λ_r))``), ``queue``
   (that, or the arrivals plus the backlog cleared over ``D``: ``ceil((λ + Q / D) / (u λ_r))``, D the scale-up
   delay or the interval, the longer) and ``ttft`` (that, or the worst TTFT over its target, the HPA ratio, read
   only while no replica is starting: TTFT stays high until the new replicas serve, and reading it meanwhile
   would double the fleet at every evaluation).
   A replica asked for at t is routable at ``t + provision + weight_bytes / load_bandwidth + warm-up`` and paid
   from t; a replica removed stops receiving requests at once and is paid until its last request
   leaves. Removal takes replicas still starting first, then the newest.

2. **The requests** (``route`` then the engine simulator): every request of the day goes, at its arrival, to a
   routable replica: the one with the least estimated outstanding work (each request counts ``1/μ`` s of its
   replica; ties in turn), what a least-loaded gateway does. Each replica is then the existing engine simulator
   (compiled event loop) over its own requests, so TTFT and TPOT are per request, queueing included.

The scaler acts on the fluid model's metrics, not on the engine simulator's (the one approximation: it sees a
shared queue and the mean model's TTFT); the promises are measured on the simulated requests.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numba
import numpy as np

#: Kubernetes HPA defaults (kube-controller-manager flags, https://kubernetes.io/docs/reference/command-line-tools-
#: reference/kube-controller-manager/): ``--horizontal-pod-autoscaler-sync-period`` 15 s, ``--horizontal-pod-
#: autoscaler-tolerance`` 0.1, ``--horizontal-pod-autoscaler-downscale-stabilization`` 5 min.
HPA_INTERVAL_S = 15.0
HPA_TOLERANCE = 0.1
HPA_SCALE_DOWN_S = 300.0
#: HPA's default scale-up behaviour (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/
#: #default-behavior): per 15 s period at most double the replicas or add 4, whichever is more.
HPA_SCALE_UP_PODS = 4

POLICY_KINDS = ("throughput", "queue", "ttft")


@dataclass(frozen=True, slots=True)
class Delays:
    """How long a new replica takes, and how long the scaler waits before it scales down [s, B, B/s].

    ``scale_up_s = provision_s + weight_bytes / load_bandwidth + warmup_s``. No default is a measurement: node
    provisioning, load bandwidth and warm-up (CUDA graph capture, first compilations) are the user's to state; left
    out they are 0 (an optimistic, stated assumption). ``scale_down_s`` defaults to the HPA's 5-minute window.
    """

    provision_s: float = 0.0
    weight_bytes: float = 0.0
    load_bandwidth: float | None = None  # [B/s]; None: weights load in no time
    warmup_s: float = 0.0
    scale_down_s: float = HPA_SCALE_DOWN_S

    def __post_init__(self) -> None:
        values = (self.provision_s, self.weight_bytes, self.warmup_s, self.scale_down_s)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError("scale-up and scale-down delays must be finite and >= 0")
        if self.load_bandwidth is not None and not self.load_bandwidth > 0:
            raise ValueError(f"the weight load bandwidth must be > 0 B/s, got {self.load_bandwidth}")

    @property
    def weight_load_s(self) -> float:
        """Time to load the replica's weights: ``weight_bytes / load_bandwidth`` [s] (0 without a bandwidth)."""
        return self.weight_bytes / self.load_bandwidth if self.load_bandwidth else 0.0

    @property
    def scale_up_s(self) -> float:
        """From request to routable: provisioning + weight loading + warm-up [s]."""
        return self.provision_s + self.weight_load_s + self.warmup_s


@dataclass(frozen=True, slots=True)
class Policy:
    """One autoscaling policy (module docstring): its metrics, targets and bounds.

    ``target_utilization`` [-]: load per replica over the replica's goodput at the promises' percentile that the
    scaler aims for (1: size on the goodput exactly). ``drain_s`` [s]: the ``queue`` policy clears the backlog over
    this time (None: the scale-up delay or the interval, the longer: what replicas asked for now can clear).
    ``ttft_target_s`` [s]: the ``ttft`` policy's target (None: the promise).
    """

    kind: str = "throughput"
    target_utilization: float = 1.0
    interval_s: float = HPA_INTERVAL_S
    tolerance: float = HPA_TOLERANCE
    min_replicas: int = 1
    max_replicas: int = 1000
    drain_s: float | None = None
    ttft_target_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise ValueError(f"policy kind must be one of {', '.join(POLICY_KINDS)}, got {self.kind!r}")
        if not (0 < self.target_utilization <= 1.5 and self.interval_s >= 1 and 0 <= self.tolerance < 1
                and 1 <= self.min_replicas <= self.max_replicas):
            raise ValueError("a policy needs target utilisation in (0, 1.5], interval >= 1 s, tolerance in [0, 1) "
                             "and 1 <= min replicas <= max replicas")

    @property
    def name(self) -> str:
        return f"{self.kind} @ {self.target_utilization:.0%}"


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    """What the scaler knows of one replica: goodput at the promises' percentile and throughput ceiling
    [requests/s], GPUs, and mean TTFT [s] against its load (``rates_rps``, ``ttft_s``, for the TTFT metric)."""

    goodput_rps: float
    ceiling_rps: float
    gpus: int
    rates_rps: np.ndarray
    ttft_s: np.ndarray
    ttft_promise_s: float | None = None


@dataclass(slots=True)
class Schedule:
    """The replicas of a day: when each was asked for, became routable and was removed [s] (``inf``: kept to the
    end), and the control loop's fluid fleet per second (``ready``, ``alive``: asked for and not removed,
    ``backlog``: queued requests, ``ttft_s``: the fluid TTFT of that second's arrivals)."""

    requested_s: np.ndarray
    ready_s: np.ndarray
    removed_s: np.ndarray
    ready: np.ndarray
    alive: np.ndarray
    backlog: np.ndarray
    ttft_s: np.ndarray
    decisions: list[tuple[float, int, int]] = field(default_factory=list)  # (time, before, after)

    @property
    def instances(self) -> int:
        return len(self.requested_s)


def initial_replicas(rate_rps: float, replica: ReplicaModel, policy: Policy) -> int:
    """The fleet at the start: what the throughput rule asks for at the first interval's rate, ready."""
    need = math.ceil(rate_rps / (policy.target_utilization * replica.goodput_rps) - 1e-9) if rate_rps > 0 else 0
    return int(min(max(need, policy.min_replicas), policy.max_replicas))


def _proposal(current: int, ratio: float, tolerance: float) -> int:
    """The HPA rule for one metric: ``current`` within the tolerance, else ``ceil(current x ratio)``."""
    if abs(ratio - 1.0) <= tolerance:
        return current
    return int(math.ceil(current * ratio - 1e-9))


def control(arrivals_per_s: np.ndarray, policy: Policy, delays: Delays, replica: ReplicaModel,
            static: int | None = None) -> Schedule:
    """Run the control loop over the day (module docstring): one step per second of ``arrivals_per_s``.

    ``static``: a fixed fleet of that many replicas all day (provisioning for the peak), no scaling.
    """
    a = np.asarray(arrivals_per_s, dtype=float)
    length = len(a)
    interval = int(round(policy.interval_s))
    mu, up = replica.ceiling_rps, delays.scale_up_s
    first = a[:interval].sum() / min(interval, max(length, 1))
    n0 = static if static is not None else initial_replicas(first, replica, policy)
    requested, ready_at, removed = [0.0] * n0, [0.0] * n0, [math.inf] * n0
    ready = np.zeros(length)
    alive = np.zeros(length)
    backlog = np.zeros(length)
    history: deque[tuple[float, int]] = deque()
    decisions: list[tuple[float, int, int]] = []
    q = 0.0
    n_ready = n0
    pending: list[int] = []  # instances asked for, not yet routable, in order of readiness
    live: list[int] = list(range(n0))  # not removed, in order of request
    for k in range(length):
        t = float(k)
        while pending and ready_at[pending[0]] <= t:
            pending.pop(0)
            n_ready += 1
        if static is None and k > 0 and k % interval == 0:
            window = slice(k - interval, k)
            lam = a[window].sum() / interval
            current = len(live)
            proposals = [_proposal(current, lam / (current * policy.target_utilization * replica.goodput_rps),
                                   policy.tolerance)]
            if policy.kind == "queue":
                drain = policy.drain_s or max(up, float(interval))
                rate = (lam + q / drain) / (policy.target_utilization * replica.goodput_rps)
                proposals.append(int(math.ceil(rate - 1e-9)))
            if policy.kind == "ttft" and not pending:  # it waits for the replicas already starting
                target = policy.ttft_target_s or replica.ttft_promise_s
                if target:
                    worst = float(fluid_ttft(a[window], ready[window], backlog[window], replica).max())
                    proposals.append(_proposal(current, worst / target, policy.tolerance))
            desired = min(max(proposals), max(2 * current, current + HPA_SCALE_UP_PODS))  # HPA's scale-up limit
            desired = min(max(desired, policy.min_replicas), policy.max_replicas)
            history.append((t, desired))
            while history and history[0][0] < t - delays.scale_down_s:
                history.popleft()
            if desired < current:  # scale down no further than the largest desired of the window
                desired = min(current, max(d for _, d in history))
            if desired > current:
                for _ in range(desired - current):
                    requested.append(t)
                    ready_at.append(t + up)
                    removed.append(math.inf)
                    live.append(len(requested) - 1)
                    if up <= 0:
                        n_ready += 1
                    else:
                        pending.append(len(requested) - 1)
                decisions.append((t, current, desired))
            elif desired < current:
                for _ in range(current - desired):
                    i = pending.pop() if pending else live[-1]
                    if i not in pending and ready_at[i] <= t:
                        n_ready -= 1
                    live.remove(i)
                    removed[i] = t
                decisions.append((t, current, desired))
        ready[k], alive[k] = n_ready, len(live)
        backlog[k] = q
        q = max(0.0, q + a[k] - n_ready * mu)
    return Schedule(np.array(requested), np.array(ready_at), np.array(removed), ready, alive, backlog,
                    fluid_ttft(a, ready, backlog, replica), decisions)


def fluid_ttft(arrivals_per_s: np.ndarray, ready: np.ndarray, backlog: np.ndarray, replica: ReplicaModel
               ) -> np.ndarray:
    """The fluid model's TTFT of each second's arrivals [s]: the wait for the backlog at the fleet's ceiling plus
    the mean TTFT at the load per replica, ``Q / (n μ) + ttft(min(a / n, μ))`` (inf with no replica ready)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(ready > 0, backlog / (ready * replica.ceiling_rps), np.inf)
        load = np.where(ready > 0, np.minimum(arrivals_per_s / ready, replica.ceiling_rps), replica.ceiling_rps)
    return wait + np.interp(load, replica.rates_rps, replica.ttft_s)


@numba.njit(cache=True)
def _route(arrival, ready_s, removed_s, service_s):  # pragma: no cover - compiled
    n, m = len(arrival), len(ready_s)
    out = np.empty(n, np.int64)
    busy = np.zeros(m)
    active = np.empty(m, np.int64)
    n_active = 0
    order_in = np.argsort(ready_s, kind="mergesort")
    next_in = 0
    turn = 0
    next_out = np.inf  # the earliest removal among the active
    for j in range(n):
        t = arrival[j]
        changed = False
        while next_in < m and ready_s[order_in[next_in]] <= t:
            active[n_active] = order_in[next_in]
            n_active += 1
            next_in += 1
            changed = True
        if changed:
            next_out = np.inf
            for h in range(n_active):
                next_out = min(next_out, removed_s[active[h]])
        if t >= next_out:  # drop the removed, keeping the order
            k = 0
            while k < n_active:
                if removed_s[active[k]] <= t:
                    for h in range(k, n_active - 1):
                        active[h] = active[h + 1]
                    n_active -= 1
                else:
                    k += 1
            next_out = np.inf
            for h in range(n_active):
                next_out = min(next_out, removed_s[active[h]])
        if n_active == 0:
            out[j] = -1
            continue
        best, best_busy = -1, np.inf
        for h in range(n_active):
            i = active[(turn + h) % n_active]
            b = busy[i]
            if b <= t:
                best = i
                break
            if b < best_busy:
                best, best_busy = i, b
        turn = (turn + 1) % n_active
        out[j] = best
        busy[best] = max(busy[best], t) + service_s
    return out


def route(arrival_s: np.ndarray, schedule: Schedule, ceiling_rps: float) -> np.ndarray:
    """The replica each request goes to: among those routable at its arrival, the least estimated outstanding work
    (module docstring); -1 where none is routable (never with at least one replica)."""
    return _route(np.asarray(arrival_s, float), schedule.ready_s.astype(float), schedule.removed_s.astype(float),
                  1.0 / ceiling_rps)


@dataclass(slots=True)
class DayResult:
    """A simulated day: the schedule, every request's times [s] and replica, and what the replicas cost.

    A replica is paid from its request (0 for those there at the start) until it is removed and its last request
    has left, or to the end of the day (``length_s``) when it is kept: ``paid_s`` [s] per replica.
    """

    schedule: Schedule
    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    finish_s: np.ndarray
    replica: np.ndarray
    gpus_per_replica: int
    length_s: float
    event_loop: str = ""

    @property
    def paid_until_s(self) -> np.ndarray:
        """When each replica stops being paid [s]: its removal or its last request's finish, the later; the end of
        the day for replicas kept."""
        sched = self.schedule
        last = np.full(sched.instances, -np.inf)
        done = np.where(np.isnan(self.finish_s), self.arrival_s, self.finish_s)
        ok = self.replica >= 0
        np.maximum.at(last, self.replica[ok], done[ok])
        return np.where(np.isfinite(sched.removed_s), np.maximum(sched.removed_s, last), self.length_s)

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the day: Σ (paid until − requested) x GPUs per replica / 3600 [GPU h]."""
        paid = self.paid_until_s - np.maximum(self.schedule.requested_s, 0.0)
        return float(np.maximum(paid, 0.0).sum()) * self.gpus_per_replica / 3600.0

    def paid_replicas(self) -> np.ndarray:
        """Replicas paid in each second of the day [-] (asked for and not yet released)."""
        n = int(math.ceil(self.length_s))
        start = np.clip(np.floor(self.schedule.requested_s).astype(np.int64), 0, n)
        end = np.clip(np.ceil(self.paid_until_s).astype(np.int64), 0, n)
        delta = np.zeros(n + 1)
        np.add.at(delta, start, 1.0)
        np.add.at(delta, end, -1.0)
        return np.cumsum(delta)[:n]

    def kept(self, tpot_s: float | None, ttft_s: float | None) -> dict[str, np.ndarray]:
        """Per request, whether it kept each promise (a rejected or unfinished request keeps none; a one-token
        answer has no TPOT and keeps that promise)."""
        done = ~np.isnan(self.finish_s) & (self.replica >= 0)
        out = {}
        if ttft_s is not None:
            out["ttft"] = done & (self.ttft_s <= ttft_s)
        if tpot_s is not None:
            out["tpot"] = done & (np.isnan(self.tpot_s) | (self.tpot_s <= tpot_s))
        out["all"] = np.logical_and.reduce([done, *out.values()])
        return out

    def timeline(self, bin_s: float, tpot_s: float | None = None, ttft_s: float | None = None,
                 percentile: float = 99.0) -> dict[str, np.ndarray]:
        """The day in bins of ``bin_s`` [s]: start [s], arrival rate [requests/s], mean routable and paid replicas,
        the ``percentile`` TTFT of the bin's arrivals [s] and the share keeping every promise [-]."""
        n_bins = int(math.ceil(self.length_s / bin_s))
        b = np.clip((self.arrival_s // bin_s).astype(np.int64), 0, n_bins - 1)
        counts = np.bincount(b, minlength=n_bins)
        ready = self.schedule.ready
        paid = self.paid_replicas()
        per_s = np.clip(np.arange(len(ready)) // int(bin_s), 0, n_bins - 1)
        width = np.maximum(np.bincount(per_s, minlength=n_bins), 1)
        kept = self.kept(tpot_s, ttft_s)["all"]
        order = np.argsort(b, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)])
        ttft_sorted = np.where(np.isnan(self.ttft_s), np.inf, self.ttft_s)[order]
        p_ttft = np.full(n_bins, np.nan)
        for i in np.flatnonzero(counts):
            p_ttft[i] = np.percentile(ttft_sorted[starts[i]:starts[i + 1]], percentile)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.bincount(b, weights=kept, minlength=n_bins) / counts
        return {"start_s": np.arange(n_bins) * bin_s, "rate_rps": counts / bin_s,
                "ready_replicas": np.bincount(per_s, weights=ready, minlength=n_bins) / width,
                "paid_replicas": np.bincount(per_s, weights=paid, minlength=n_bins) / width,
                f"p{percentile:g}_ttft_s": p_ttft, "share_kept": share}


def simulate_day(scenario, config, table, schedule: Schedule, replica: ReplicaModel, length_s: float,
                 analytic=None, event_loop: str = "auto") -> DayResult:
    """Every request of ``table`` routed (``route``) to the replicas of ``schedule``, each replica the engine
    simulator over its own requests (``config``: one replica's simulation settings; ``analytic``:
    ``scenario.evaluate()`` where the caller has it)."""
    from capacity.runtime import budget
    from capacity.simulator import _simulate_one
    from capacity.simulator.cost_models import cost_model_for
    from capacity.simulator.scheduler import AUTO_MIN_REQUESTS

    if event_loop == "auto" and len(table) >= AUTO_MIN_REQUESTS:
        # the day is one run: load the compiled loop once so that "auto" runs it for every replica, however few
        # requests each one serves
        from capacity.simulator import compiled  # noqa: F401
    where = route(table.arrival_s, schedule, replica.ceiling_rps)
    n = len(table)
    ttft, tpot, finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    analytic = analytic if analytic is not None else scenario.evaluate()
    cost = cost_model_for(scenario, config)
    order = np.argsort(where, kind="stable")
    bounds = np.searchsorted(where[order], np.arange(-1, schedule.instances + 1))
    loop = ""
    for i in range(schedule.instances):
        index = order[bounds[i + 1]:bounds[i + 2]]
        if index.size == 0:
            continue
        budget.check()
        times, loop = _simulate_one(scenario, config, table.take(index), analytic, event_loop, cost, times_only=True)
        ttft[index], tpot[index], finish[index] = times["ttft_s"], times["tpot_s"], times["finish_s"]
    return DayResult(schedule, table.arrival_s, ttft, tpot, finish, where, replica.gpus, length_s, loop)


__all__ = ["DayResult", "Delays", "HPA_INTERVAL_S", "HPA_SCALE_DOWN_S", "HPA_SCALE_UP_PODS", "HPA_TOLERANCE",
           "POLICY_KINDS", "Policy", "ReplicaModel", "Schedule", "control", "fluid_ttft", "initial_replicas", "route",
           "simulate_day"]
