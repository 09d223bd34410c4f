"""Calibration: fit bandwidth_efficiency, flops_efficiency, step_overhead and request_latency to measured points.

Every time the roofline predicts is max-affine in the four factors. With ``u = 1 / e_bw``,
``v = 1 / e_fl``, ``o`` the step overhead [s] and ``L`` the request latency [s] (``serving.request_latency``:
the time outside the engine's passes on every TTFT), a measured time is predicted as

    t = sum_k max(m_k u, c_k v) + f + d o + n L        [s]

where ``m_k`` [s] is piece k's memory time at the GPU's peak bandwidth, ``c_k`` [s] its compute time at
peak FLOP/s, ``f`` [s] the tensor-parallel all-reduce time, ``d`` [-] the number of step overheads paid and
``n`` [-] the request latencies (1 in a TTFT, 0 elsewhere). The latency is fitted only where asked
(``ALL_FACTORS``; the CLI's default where the points hold a TTFT): a TTFT's latency otherwise lowers the
fitted FLOP/s efficiency to pay for a delay that is not arithmetic.
The pieces are the library's own decode step and prefill (``analysis.StepModel``), probed at peak figures,
so a calibrated profile predicts exactly what ``Scenario.evaluate`` predicts with those factors.

How each measured metric is predicted (B the decode batch, P prompt and A output tokens, t_p = t_prefill(P)):

    static batch B            step/TPOT = t_step(B);  TTFT = t_prefill(B P);  latency = t_prefill(B P) + A t_step(B)
                              output tokens/s = B A / latency
    concurrency C (closed)    TPOT/ITL, TTFT, output tokens/s = the library's ``closed_loop_tpot_s``,
                              ``closed_loop_ttft_s``, ``closed_loop_tokens_per_s`` (``analysis.closed_loop``: the
                              response time law with the others' prompts in the decode steps, the prefill queue, the
                              wait for a slot where C exceeds what runs at once; every TTFT carries the request
                              latency L, ``serving.request_latency``); TTFT (C = 1) = t_p + L exactly
    offline / rate INF        concurrency C = infinity, i.e. B = B_max (the ceiling: a wave in step ends together)
    request rate λ (open)     TPOT, TTFT = the library's ``tpot_at_load_s``, ``ttft_at_load_s`` (TPOT = t_step(B) /
                              (1 - λ t_p) with B = λ A TPOT; TTFT = prefill plus the queue for it)
                              output tokens/s = A min(λ, ceiling); above the ceiling as concurrency = infinity

Throughputs are multiplied by the data-parallel replicas. The values at a load (open or closed loop) depend on the
factors through the operating batch and the queue; each is linearised at the current estimate as
(library value / piece) x piece, with the piece the decode step at the load's batch (open-loop TPOT),
``t_step(B) + (B - 1) c_p / A`` with B = min(C, B_run) and c_p a prompt's share of a batched prefill pass
(closed-loop TPOT, throughput; B_run the running batch, ``batch_running``) or the prefill (TTFT, its request
latency apart), and the fit is
repeated until it is self-consistent, where the prediction is the library's own value: one composition of a
closed loop, the library's, for ``capacity evaluate``, the fit and the validation harnesses alike. Where points
hold TTFTs at users in flight, whose queue moves with the factors in ways no one piece holds, Gauss-Newton steps
on the library's predictions themselves (``_polish``, a finite-difference Jacobian) finish the fit.

The fit minimises the squared log errors ``sum_i ln(t_i / y_i)^2`` of the times (a rate is fitted as its
reciprocal, time per output token, so a 2x over- and a 2x under-prediction cost the same) with efficiencies
in [0.01, 1] and the overhead in [0, 1 s]. Weighted least squares is piecewise quadratic in (u, v, o): on
each interval of the ratio u / v every max picks one side. ``_solve`` solves each interval exactly (bounded
linear least squares) and keeps the best, so the relative-error fit it starts from is global; Gauss-Newton
steps on the log loss follow, each solved the same way. A factor the points do not determine (all points
memory-bound: no information on FLOP/s; one batch size only: bandwidth and overhead inseparable) is reported
as not identifiable and held at its starting value, never invented. numpy only.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from capacity.errors import ScenarioError, clean_line
from capacity.fileio.files import read_text_limited
from capacity.inputs import engines
from capacity.model.analysis import StepModel, step_model
from capacity.model.scenario import Scenario

#: The three step factors, in the order of the parameter vector (u = 1/e_bw, v = 1/e_fl, o).
FACTORS = ("bandwidth_efficiency", "flops_efficiency", "step_overhead")

#: The request latency (``serving.request_latency``), the fourth parameter L: a delay on every TTFT.
LATENCY = "request_latency"

#: Every factor a fit can take, in the order of the parameter vector (u, v, o, L).
ALL_FACTORS = (*FACTORS, LATENCY)

#: Measured metrics and their base unit. ITL is fitted as TPOT (both are the mean gap between tokens).
METRICS = {"step_time_s": "s", "tpot_s": "s", "ttft_s": "s", "latency_s": "s", "output_tokens_per_s": "tokens/s"}

#: Search box: efficiencies in [1%, 100%] of peak, overhead in [0, 1 s], request latency in [0, 10 s].
EFFICIENCY_MIN, OVERHEAD_MAX_S, LATENCY_MAX_S = 0.01, 1.0, 10.0


@dataclass(frozen=True, slots=True)
class Factors:
    """Achieved fractions of peak bandwidth and FLOP/s [-], the fixed time per forward pass [s] and the request
    latency [s] (None: each scenario's own ``serving.request_latency``, what a fit that does not take it keeps)."""

    bandwidth_efficiency: float
    flops_efficiency: float
    step_overhead_s: float
    request_latency_s: float | None = None

    @classmethod
    def of(cls, scenario: Scenario) -> Factors:
        g = scenario.gpu
        return cls(g.bandwidth_efficiency, g.flops_efficiency, scenario.serving.step_overhead_s)

    def theta(self) -> np.ndarray:
        """(u, v, o, L) = (1 / e_bw, 1 / e_fl, o, L); L 0 where the factors leave each scenario its own."""
        return np.array([1.0 / self.bandwidth_efficiency, 1.0 / self.flops_efficiency, self.step_overhead_s,
                         self.request_latency_s or 0.0])

    @classmethod
    def from_theta(cls, theta: Sequence[float], latency: bool = False) -> Factors:
        """The factors of (u, v, o[, L]); the latency only where ``latency`` (a fit that takes it)."""
        return cls(1.0 / float(theta[0]), 1.0 / float(theta[1]), float(theta[2]),
                   float(theta[3]) if latency else None)

    def apply(self, scenario: Scenario) -> Scenario:
        """The scenario with these factors on its GPU's peak figures and its serving overhead (and request latency,
        where set)."""
        gpu = replace(scenario.gpu, bandwidth_efficiency=self.bandwidth_efficiency,
                      flops_efficiency=self.flops_efficiency)
        serving = replace(scenario.serving, step_overhead_s=self.step_overhead_s)
        if self.request_latency_s is not None:
            serving = replace(serving, request_latency_s=self.request_latency_s)
        return replace(scenario, gpu=gpu, serving=serving)


@dataclass(frozen=True, slots=True)
class Terms:
    """A predicted time ``sum_k max(memory_k u, compute_k v) + fixed + overhead o + latency L`` [s].

    ``fixed`` holds the scenario's own request latency ``own_latency`` [s] for each of the ``latency`` latencies
    paid; factors that set a latency replace it (``latency_fixed``)."""

    memory: np.ndarray      # [s] at peak bandwidth
    compute: np.ndarray     # [s] at peak FLOP/s
    fixed: float = 0.0      # [s] all-reduce time and the own request latencies, independent of the factors
    overhead: float = 0.0   # [-] step overheads paid
    latency: float = 0.0    # [-] request latencies paid (1 in a TTFT)
    own_latency: float = 0.0  # [s] the scenario's request latency, in ``fixed`` once per latency paid

    def __add__(self, other: Terms) -> Terms:
        return Terms(np.concatenate([self.memory, other.memory]), np.concatenate([self.compute, other.compute]),
                     self.fixed + other.fixed, self.overhead + other.overhead, self.latency + other.latency,
                     max(self.own_latency, other.own_latency))

    def scaled(self, k: float) -> Terms:
        return Terms(self.memory * k, self.compute * k, self.fixed * k, self.overhead * k, self.latency * k,
                     self.own_latency)

    def latency_fixed(self) -> float:
        """``fixed`` without the own request latencies [s]: what a fitted latency is added to."""
        return self.fixed - self.latency * self.own_latency

    def time(self, factors: Factors) -> float:
        u, v, o, latency = factors.theta()
        base = self.fixed if factors.request_latency_s is None else self.latency_fixed() + self.latency * latency
        return float(np.sum(np.maximum(self.memory * u, self.compute * v)) + base + self.overhead * o)


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured number and the setup that produced it.

    Load: ``batch_size`` (static batch) wins; else a finite ``request_rate`` (open loop, requests/s); else
    ``concurrency`` (closed loop; None or inf means offline, all requests at once). ``value`` is in base
    units of ``METRICS[metric]``; a throughput is the total of ``replicas`` data-parallel engines.
    """

    scenario: Scenario
    metric: str
    value: float
    batch_size: int | None = None
    concurrency: float | None = None
    request_rate: float | None = None
    replicas: int = 1
    label: str = ""

    @property
    def is_rate(self) -> bool:
        return self.metric == "output_tokens_per_s"

    @property
    def open_loop(self) -> bool:
        return self.batch_size is None and self.request_rate is not None and math.isfinite(self.request_rate)

    @property
    def queued_ttft(self) -> bool:
        """A TTFT at a finite concurrency above 1: the closed loop's queue (``analysis.closed_loop``)."""
        return (self.metric == "ttft_s" and self.batch_size is None and not self.open_loop
                and self.concurrency is not None and 1 < self.concurrency < math.inf)

    @property
    def closed_loop(self) -> bool:
        """A TPOT or throughput of users in flight (a finite concurrency, no static batch, no rate), or a queued TTFT:
        the library's closed loop predicts it (``analysis.closed_loop``; one user's TTFT is its prefill and request
        latency exactly, no load to linearise)."""
        return self.queued_ttft or (
            self.metric in ("tpot_s", "output_tokens_per_s") and self.batch_size is None and not self.open_loop
            and self.concurrency is not None and 1 <= self.concurrency < math.inf)

    @property
    def linearised(self) -> bool:
        """Whether its prediction depends on the factors through a load (re-linearised at each fit iteration)."""
        return self.open_loop or self.closed_loop

    @property
    def measured_time(self) -> float:
        """The value as a time [s]: a rate becomes the time per output token of one engine."""
        return self.replicas / self.value if self.is_rate else self.value


@dataclass(frozen=True, slots=True)
class _Probe:
    """A scenario's StepModel at peak figures in four variants: (memory only, compute only, neither, 1 s overhead)."""

    model: StepModel
    batch_max: float
    prompt_tokens: float
    output_tokens: float
    fits: float = math.inf     # sequences of this shape the KV pool holds (max_num_seqs aside)
    prefill_budget: float = 0.0  # tokens per batched prefill pass (engine profiles); 0: one pass per prompt
    batch_running: float = math.inf  # what a closed loop of spread phases runs (``batch_running``)
    cached_tokens: float = 0.0  # the cached prefix each prompt's tokens attend to (prompt - prefill tokens)

    def _terms(self, times: np.ndarray) -> Terms:
        base = float(times[2])
        return Terms(np.array([times[0] - base]), np.array([times[1] - base]), base, float(times[3] - base))

    def decode(self, batch: float) -> Terms:
        """One decode step over ``batch`` sequences at the average context (prompt + answer / 2)."""
        return self._terms(self.model.step_s(batch))

    def prefill(self, tokens: float) -> Terms:
        """One prefill pass over ``tokens`` prompt tokens (prompts of ``prompt_tokens`` each)."""
        return self._terms(self.model.prefill_s(tokens, self.prompt_tokens, self.cached_tokens))

    def prefill_share(self, tokens: float) -> Terms:
        """The GPU time a prompt of ``tokens`` costs the other requests: its share of a batched pass of
        ``prefill_budget`` tokens (engines.batched_prefill_s), or its own pass."""
        if self.prefill_budget <= 0:
            return self.prefill(tokens)
        return self._terms(engines.batched_prefill_s(
            lambda pass_tokens: self.model.prefill_s(pass_tokens, tokens, self.cached_tokens), tokens,
            self.prefill_budget))


_PROBES: dict[int, tuple[Scenario, _Probe]] = {}


def _probe(scenario: Scenario) -> _Probe:
    cached = _PROBES.get(id(scenario))
    if cached is not None and cached[0] is scenario:
        return cached[1]
    x = {k: np.asarray(v, float) for k, v in scenario.inputs().items()}
    inf = np.inf
    x["bandwidth"] = np.array([scenario.gpu.bandwidth, inf, inf, inf])
    x["flops"] = np.array([inf, scenario.gpu.flops, inf, inf])
    x["attention_flops"] = np.array([inf, scenario.gpu.attention_flops or scenario.gpu.flops, inf, inf])
    x["step_overhead_s"] = np.array([0.0, 0.0, 0.0, 1.0])
    w = scenario.workload
    model, _ = step_model(x, np.asarray(w.prompt_tokens + w.output_tokens / 2.0))
    results = scenario.evaluate()  # memory results (batch_running, prefill tokens) do not depend on the factors
    probe = _Probe(model, float(results["batch_max"]), float(results["prefill_tokens"]), float(w.output_tokens),
                   float(results["max_requests_shared_prefix"]),
                   float(x["max_batched_tokens"]) if float(x["batched_prefill"]) > 0 else 0.0,
                   float(results["batch_running"]),
                   max(float(w.prompt_tokens) - float(results["prefill_tokens"]), 0.0))
    _PROBES[id(scenario)] = (scenario, probe)
    if len(_PROBES) > 4096:
        _PROBES.clear()
    return probe


_AT_LOAD: dict[tuple, tuple[Scenario, dict[str, float | str]]] = {}


def _at_load(obs: Observation, factors: Factors) -> dict[str, float | str]:
    """Library results with ``factors`` at the observation's arrival rate, or its users in flight (a closed loop)
    (shared by the observations of one scenario and load: the TPOT and TTFT of one benchmark run cost one
    evaluation)."""
    closed = obs.closed_loop
    key = (id(obs.scenario), obs.concurrency if closed else obs.request_rate, closed, factors)
    cached = _AT_LOAD.get(key)
    if cached is not None and cached[0] is obs.scenario:
        return cached[1]
    s = factors.apply(obs.scenario)
    load = {"concurrency": obs.concurrency, "arrival_rate": None} if closed else {"arrival_rate": obs.request_rate}
    s = replace(s, workload=replace(s.workload, **load))
    values = s.evaluate().values
    if len(_AT_LOAD) > 1024:
        _AT_LOAD.clear()
    _AT_LOAD[key] = (obs.scenario, values)
    return values


_TERMS: dict[tuple, tuple[Observation, Terms]] = {}


def terms_for(obs: Observation, factors: Factors) -> Terms:
    """The observation's predicted time [s] as Terms; loads (a rate, users in flight) are linearised at ``factors``.

    Computed once per observation (and, for a load, per ``factors``): a fit's median or a harness asks again.
    """
    key = (id(obs), factors if obs.linearised else None)
    cached = _TERMS.get(key)
    if cached is not None and cached[0] is obs:
        return cached[1]
    terms = _terms_for(obs, factors)
    if len(_TERMS) > 4 * MAX_CSV_ROWS:
        _TERMS.clear()
    _TERMS[key] = (obs, terms)
    return terms


def _terms_for(obs: Observation, factors: Factors) -> Terms:
    p = _probe(obs.scenario)
    a = p.output_tokens
    m = obs.metric
    if m not in METRICS:
        raise ScenarioError(f"metric {m!r} is not known; use one of {', '.join(METRICS)}")
    if obs.batch_size is not None:
        # A stated static batch that the KV pool cannot hold runs as the batch that fits (``batch_fits`` flags it).
        b = float(obs.batch_size) if p.fits < 1 else min(float(obs.batch_size), p.fits)
        prefill, step = p.prefill(b * p.prompt_tokens), p.decode(b)
        if m in ("step_time_s", "tpot_s"):
            return step
        if m == "ttft_s":
            return prefill
        latency = prefill + step.scaled(a)
        return latency if m == "latency_s" else latency.scaled(1.0 / (b * a))
    prefill = p.prefill(p.prompt_tokens)
    if obs.open_loop:
        r = _at_load(obs, factors)
        lam, ceiling = float(obs.request_rate), float(r["ceiling_rps"])
        if lam < ceiling:
            if m == "output_tokens_per_s":
                return Terms(np.zeros(0), np.zeros(0), fixed=1.0 / (lam * a))
            if m == "latency_s":
                raise ScenarioError(f"{obs.label or 'observation'}: latency is predicted for a static batch only")
            key = "ttft_at_load_s" if m == "ttft_s" else "tpot_at_load_s"
            value = float(r[key])
            if not math.isfinite(value):
                raise ScenarioError(f"{obs.label or 'observation'}: the library predicts no finite {key}")
            # The library's value as a multiple of the piece that dominates it: the decode step at the load's
            # batch (Little's law, B = λ A TPOT) for TPOT, the prefill for TTFT (its request latency apart); exact
            # at ``factors``.
            if m == "ttft_s":
                return _queued_ttft(obs, prefill, value, factors)
            piece = p.decode(lam * a * float(r["tpot_at_load_s"]))
            return piece.scaled(value / piece.time(factors))
        if m == "ttft_s":
            raise ScenarioError(f"{obs.label or 'observation'}: the rate {lam:g}/s exceeds the ceiling "
                                f"{ceiling:.3g}/s, so the queue (and TTFT) grows without bound")
        concurrency = math.inf  # overloaded: the engine runs at its largest batch
    else:
        concurrency = obs.concurrency if obs.concurrency is not None else math.inf
    # Users in flight with their phases spread run up to ``batch_running``; an offline wave (all at once, in
    # step) holds whole contexts at its end, so B_max.
    b = min(concurrency, p.batch_max if math.isinf(concurrency) else max(p.batch_running, p.batch_max))
    if b < 1:
        raise ScenarioError(f"{obs.label or 'observation'}: no request fits in the KV pool")
    step = p.decode(b)
    share = p.prefill_share(p.prompt_tokens)  # what the others' prompts cost this request's steps
    tpot = step + share.scaled((b - 1.0) / a)
    if obs.closed_loop:
        # Users in flight: the library's closed loop (``analysis.closed_loop``) predicts the value; the terms are the
        # piece that dominates it (the TPOT of B users, the prefill) scaled to it, exact at ``factors``.
        key = {"tpot_s": "closed_loop_tpot_s", "ttft_s": "closed_loop_ttft_s",
               "output_tokens_per_s": "closed_loop_tokens_per_s"}[m]
        value = float(_at_load(obs, factors)[key])
        if not math.isfinite(value) or value <= 0:
            raise ScenarioError(f"{obs.label or 'observation'}: the library predicts no finite {key} at "
                                f"{concurrency:g} users in flight")
        if m == "ttft_s":
            return _queued_ttft(obs, prefill, value, factors, step)
        piece = tpot if m == "tpot_s" else share.scaled(1.0 / a) + step.scaled(1.0 / b)
        return piece.scaled((value if m == "tpot_s" else 1.0 / value) / piece.time(factors))
    if m in ("step_time_s", "tpot_s"):
        return tpot
    if m == "ttft_s":
        if concurrency != 1:
            raise ScenarioError(f"{obs.label or 'observation'}: TTFT is predicted at a finite concurrency, a static "
                                f"batch or a request rate, not offline (all requests at once: the wait depends on "
                                f"how many there are)")
        # one user: the prefill and the request's time outside the engine's passes (``closed_loop`` at C = 1)
        return prefill + _latency_terms(obs)
    if m == "latency_s":
        return prefill + step.scaled(a)
    return share.scaled(1.0 / a) + step.scaled(1.0 / b)


def _latency_terms(obs: Observation) -> Terms:
    """One request latency: the scenario's own ``serving.request_latency``, or the factors' where they set one."""
    own = float(obs.scenario.serving.request_latency_s)
    return Terms(np.zeros(0), np.zeros(0), fixed=own, latency=1.0, own_latency=own)


def _queued_ttft(obs: Observation, prefill: Terms, value: float, factors: Factors,
                 step: Terms | None = None) -> Terms:
    """A TTFT the library predicts with a queue (``value`` [s] at ``factors``, its request latency included): the
    engine's part as a multiple of the prefill, plus the request latency (``_latency_terms``). With ``step`` (a
    closed loop whose requests reach the engine at any phase of a decode step, a request latency in effect:
    ``analysis.closed_loop_engine_ttft_s``), the prefill itself plus the wait as a multiple of that decode step,
    the piece the queue of random arrivals waits on (the fit then sees the bandwidth's share in the wait)."""
    latency = _latency_terms(obs)
    own = latency.time(factors)
    if step is None or own <= 0:
        return prefill.scaled((value - own) / prefill.time(factors)) + latency
    wait = max(value - own - prefill.time(factors), 0.0)
    return prefill + step.scaled(wait / step.time(factors)) + latency


def _predictions(observations: Sequence[Observation], factors: Factors, measured_times: np.ndarray) -> np.ndarray:
    """``predict`` of every observation, in one vectorised pass over their terms."""
    times = _Problem.build([terms_for(o, factors) for o in observations], measured_times,
                           factors.request_latency_s is not None).times(factors.theta())
    rate = np.array([o.is_rate for o in observations])
    replicas = np.array([o.replicas for o in observations], dtype=float)
    return np.where(rate, replicas / times, times)


def batch_fits(obs: Observation) -> bool:
    """Whether the observation's stated static batch fits in the KV pool (True without a stated batch)."""
    return obs.batch_size is None or obs.batch_size <= _probe(obs.scenario).fits


def predict(obs: Observation, factors: Factors) -> float:
    """Predicted value of the observation's metric with ``factors``, in its base unit (s or tokens/s)."""
    t = terms_for(obs, factors).time(factors)
    return obs.replicas / t if obs.is_rate else t


# --- the fit ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted factors and how well they explain the points.

    ``factors`` are used for predictions; a factor in ``held`` was not identifiable (or not fitted) and keeps
    its starting value, with the reason in ``notes``. ``stderr`` is the standard error of each identified
    factor (None when the points leave no degrees of freedom or the factor sits on its bound).
    """

    factors: Factors
    fitted: tuple[str, ...]
    held: dict[str, str]
    notes: dict[str, str]
    stderr: dict[str, float | None]
    predicted: np.ndarray
    measured: np.ndarray
    converged: bool = True
    iterations: int = 1

    @property
    def errors(self) -> np.ndarray:
        """Relative errors (predicted - measured) / measured [-]."""
        return self.predicted / self.measured - 1.0

    @property
    def mape(self) -> float:
        """Mean absolute percentage error [%]."""
        return float(np.mean(np.abs(self.errors)) * 100.0)

    @property
    def rmse_percent(self) -> float:
        """Root mean square of the percentage errors [%]."""
        return float(np.sqrt(np.mean(self.errors ** 2)) * 100.0)

    def identified(self, name: str) -> bool:
        return name in self.fitted and name not in self.held


@dataclass(frozen=True, slots=True)
class _Problem:
    """Flattened terms of n observations (term arrays with their owner; per-observation columns) and the
    weighted linear least-squares target: minimise ``sum_i (weight_i (t_i(theta) - goal_i))^2``.

    ``latency`` is each observation's request latencies paid where the fit takes the latency (then ``fixed`` is
    without the scenarios' own, ``Terms.latency_fixed``), else 0 (``fixed`` holds the own latencies)."""

    memory: np.ndarray
    compute: np.ndarray
    owner: np.ndarray
    fixed: np.ndarray
    overhead: np.ndarray
    latency: np.ndarray
    measured: np.ndarray   # measured times y [s]
    weight: np.ndarray
    goal: np.ndarray

    @property
    def n(self) -> int:
        return len(self.measured)

    @classmethod
    def build(cls, terms: Sequence[Terms], measured: np.ndarray, latency: bool = False) -> _Problem:
        """The relative-error problem: weight 1 / y, goal y; ``latency``: the request latency is a parameter."""
        owner = np.concatenate([np.full(len(t.memory), i) for i, t in enumerate(terms)]).astype(int)
        fixed = np.array([t.latency_fixed() if latency else t.fixed for t in terms])
        paid = np.array([t.latency if latency else 0.0 for t in terms])
        return cls(np.concatenate([t.memory for t in terms]), np.concatenate([t.compute for t in terms]), owner,
                   fixed, np.array([t.overhead for t in terms]), paid, measured, 1.0 / measured, measured)

    def design(self, memory_side: np.ndarray) -> np.ndarray:
        """Columns (d t / d u, d t / d v, d t / d o, d t / d L) when each term binds on the given side."""
        a = np.bincount(self.owner, weights=self.memory * memory_side, minlength=self.n)
        b = np.bincount(self.owner, weights=self.compute * ~memory_side, minlength=self.n)
        return np.column_stack([a, b, self.overhead, self.latency])

    def sides(self, theta: np.ndarray) -> np.ndarray:
        return self.memory * theta[0] >= self.compute * theta[1]

    def times(self, theta: np.ndarray) -> np.ndarray:
        binding = np.maximum(self.memory * theta[0], self.compute * theta[1])
        return (np.bincount(self.owner, weights=binding, minlength=self.n) + self.fixed + self.overhead * theta[2]
                + self.latency * theta[3])

    def log_loss(self, theta: np.ndarray) -> float:
        """``sum_i ln(t_i / y_i)^2``: a 2x over- and a 2x under-prediction cost the same."""
        return float(np.sum(np.log(self.times(theta) / self.measured) ** 2))

    def gauss_newton(self, theta: np.ndarray) -> _Problem:
        """The log loss linearised in t at ``theta``: ``ln(t'/y) ~ ln(t/y) + (t' - t)/t``, i.e. weight 1/t and
        goal ``t (1 - ln(t / y))``; its minimum is a Gauss-Newton step (the max terms stay exact)."""
        t = self.times(theta)
        return replace(self, weight=1.0 / t, goal=t * (1.0 - np.log(t / self.measured)))


#: Box of the parameters (u, v, o, L): efficiencies in [EFFICIENCY_MIN, 1], overhead in [0, OVERHEAD_MAX_S],
#: request latency in [0, LATENCY_MAX_S].
_LOWER = np.array([1.0, 1.0, 0.0, 0.0])
_UPPER = np.array([1.0 / EFFICIENCY_MIN, 1.0 / EFFICIENCY_MIN, OVERHEAD_MAX_S, LATENCY_MAX_S])


def _box_qp(gram: np.ndarray, h: np.ndarray, c: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """min ``theta' G theta - 2 h' theta + c`` subject to ``lo <= theta <= hi``, for a stack of problems at once.

    ``gram`` (L, p, p), ``h`` (L, p), ``c`` (L,), ``lo``/``hi`` (L, p) or (p,), with p <= 4 parameters (a
    parameter with ``lo == hi`` is fixed). This is ``min ||x theta - t||^2`` given only its normal equations
    (``G = x'x``, ``h = x't``, ``c = t't``), so its cost does not depend on the rows of x. Each parameter is tried
    free, at its lower or at its upper bound (fewest bounds first); the first feasible state whose gradient
    points out of the box at every bound is a KKT point of the convex problem: the minimum. A free block is
    solved with the pseudo-inverse (the minimum-norm solution where a parameter has no effect, as ``lstsq``).
    Returns (theta (L, p), cost (L,), ok (L,)): ok is False where no state is feasible.
    """
    n, p = h.shape
    lo, hi = np.broadcast_to(lo, (n, p)).astype(float), np.broadcast_to(hi, (n, p)).astype(float)
    fixed = lo == hi
    tol = 1e-9 * (1.0 + np.abs(hi))
    best_theta, best_cost = np.zeros((n, p)), np.full(n, np.inf)
    done = np.zeros(n, dtype=bool)
    for state in sorted(itertools.product((0, -1, 1), repeat=p), key=lambda st: sum(map(abs, st))):
        st = np.array(state)
        use = ~done & np.all(~fixed | (st != 0), axis=1) & np.all(~fixed | (st >= 0), axis=1)  # fixed: "upper"
        if not np.any(use):
            continue
        free = st == 0
        theta = np.where(st < 0, lo, hi)[use]
        g, hh = gram[use], h[use]
        if np.any(free):
            rhs = hh[:, free] - np.einsum("lij,lj->li", g[:, free][:, :, ~free], theta[:, ~free])
            theta[:, free] = np.einsum("lij,lj->li", np.linalg.pinv(g[:, free][:, :, free]), rhs)
        cost = np.einsum("li,lij,lj->l", theta, g, theta) - 2.0 * np.einsum("li,li->l", hh, theta) + c[use]
        cost = np.maximum(cost, 0.0)
        feasible = np.all((theta >= lo[use] - tol[use]) & (theta <= hi[use] + tol[use]), axis=1)
        grad = 2.0 * (np.einsum("lij,lj->li", g, theta) - hh)
        movable = ~fixed[use]
        scale = 1e-9 * (1.0 + np.max(np.abs(grad) * movable, axis=1, initial=0.0))[:, None]
        kkt = np.all(~movable | (st >= 0) | (grad >= -scale), axis=1) & np.all(
            ~movable | (st <= 0) | (grad <= scale), axis=1) & np.all(
            ~movable | ~free | (np.abs(grad) <= scale * 1e3), axis=1)
        rows = np.flatnonzero(use)
        better = feasible & (cost < best_cost[rows] - 1e-15 * (1 + cost))
        prev_cost = best_cost[rows].copy()
        best_theta[rows[better]] = np.clip(theta[better], lo[rows[better]], hi[rows[better]])
        best_cost[rows[better]] = cost[better]
        stop = feasible & kkt
        take = stop & (cost <= prev_cost)  # the KKT point itself unless an earlier state was (rounding) better
        best_theta[rows[take]], best_cost[rows[take]] = theta[take], cost[take]
        done[rows[stop]] = True
    return best_theta, best_cost, np.isfinite(best_cost)


#: 95% critical values of F(1, dof), for dof = 1..10, 15, 20, 30, 60 and beyond (any statistics table).
_F95 = {1: 161.4, 2: 18.51, 3: 10.13, 4: 7.71, 5: 6.61, 6: 5.99, 7: 5.59, 8: 5.32, 9: 5.12, 10: 4.96, 15: 4.54,
        20: 4.35, 30: 4.17, 60: 4.00}


def _f_critical(dof: int) -> float:
    """95% critical value of F(1, dof), the next smaller tabulated dof (conservative); 3.84 beyond 60."""
    if dof <= 0:
        return math.inf
    keys = [k for k in _F95 if k <= dof]
    return 3.84 if dof > 60 else _F95[max(keys)]


def _sweep(prob: _Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Normal equations of the weighted design on every interval of the ratio u / v, in time linear in the terms.

    Interval i lies between consecutive critical ratios ``edges[i] < u / v < edges[i + 1]`` (the terms' compute
    to memory ratios c_k / m_k). Moving from one interval to the next flips only the terms whose ratio is the
    edge between them from the compute to the memory side, which changes one row of the design each; so the
    Gram matrix ``G = x'x`` and ``h = x't`` of every interval are the first interval's plus cumulative sums of
    per-flip rank-two updates. Returns (edges, G (L, 4, 4), h (L, 4), ratio per term, c = t't).
    """
    w = prob.weight
    target = (prob.goal - prob.fixed) * w
    both = (prob.memory > 0) & (prob.compute > 0)
    ratio = np.divide(prob.compute, prob.memory, where=prob.memory > 0, out=np.full_like(prob.memory, np.inf))
    unique = np.unique(ratio[both])
    edges = np.concatenate([[0.0], unique, [np.inf]])
    intervals = len(edges) - 1
    side0 = (prob.memory > 0) & (prob.compute == 0)
    rows0 = prob.design(side0) * w[:, None]
    gram0, h0 = rows0.T @ rows0, rows0.T @ target
    k = np.flatnonzero(both)
    at = np.searchsorted(unique, ratio[k]) + 1  # the interval from which term k binds on the memory side
    order = np.lexsort((at, prob.owner[k]))
    k, at = k[order], at[order]
    owner = prob.owner[k]
    # each owner's running row: its first-interval row plus its own earlier flips (a cumulative sum per owner)
    da, db = np.cumsum(prob.memory[k]), np.cumsum(-prob.compute[k])
    first = np.r_[True, owner[1:] != owner[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))
    da, db = da - (da - prob.memory[k])[base], db - (db + prob.compute[k])[base]
    after = np.column_stack([rows0[owner, 0] + w[owner] * da, rows0[owner, 1] + w[owner] * db, rows0[owner, 2],
                             rows0[owner, 3]])
    zero = np.zeros(len(k))
    before = after - np.column_stack([w[owner] * prob.memory[k], -w[owner] * prob.compute[k], zero, zero])
    d_gram = np.einsum("ei,ej->eij", after, after) - np.einsum("ei,ej->eij", before, before)
    d_h = (after - before) * target[owner][:, None]
    width = rows0.shape[1]
    gram = np.zeros((intervals, width, width))
    h = np.zeros((intervals, width))
    np.add.at(gram, at, d_gram)
    np.add.at(h, at, d_h)
    gram = gram0 + np.cumsum(gram, axis=0)
    h = h0 + np.cumsum(h, axis=0)
    return edges, gram, h, ratio, float(target @ target)


def _side(prob: _Problem, edges: np.ndarray, ratio: np.ndarray, i: int) -> np.ndarray:
    """Binding sides of the terms on interval i (True: memory)."""
    a, b = edges[i], edges[i + 1]
    rep = b / 2 if a == 0 else (a * 2 if not np.isfinite(b) else math.sqrt(a * b))
    return (prob.memory > 0) & ((prob.compute == 0) | (rep > ratio))


def _exact_cost(prob: _Problem, side: np.ndarray, theta: np.ndarray) -> float:
    """``||x theta - t||^2`` from the rows themselves (O(n); free of the rounding of the normal equations)."""
    r = prob.design(side) @ theta * prob.weight - (prob.goal - prob.fixed) * prob.weight
    return float(r @ r)


def _solve(prob: _Problem, free: np.ndarray, theta0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum of the weighted squared error over the free parameters; returns (theta, binding sides).

    Between consecutive critical ratios r_k of u / v every term binds on a fixed side and the model is linear,
    so the minimum lies either inside one such interval (a box-constrained linear least-squares problem whose
    solution has its ratio inside the interval) or on a boundary ray u = r_k v (the same with one parameter
    fewer). Every interval and ray is solved exactly from its normal equations (``_sweep``, ``_box_qp``: all at
    once, time and memory linear in the points). When both efficiencies are free, the end intervals, where
    every term binds on one side (one efficiency without effect), are preferred unless the best fit beats them
    significantly (nested F-test at 95%; with no degrees of freedom left, unless they cannot fit the points
    exactly): one point that an absurdly low efficiency would make compute-bound does not identify that
    efficiency. The costs that decide between candidates are recomputed from the rows.
    """
    edges, gram, h, ratio, c = _sweep(prob)
    intervals = len(edges) - 1
    last = intervals - 1
    lo = np.where(free, _LOWER, theta0)
    hi = np.where(free, _UPPER, theta0)
    cc = np.full(intervals, c)
    candidates: list[tuple[float, np.ndarray, int]] = []  # (cost, theta, interval)
    theta, cost, ok = _box_qp(gram, h, cc, lo, hi)
    r = theta[:, 0] / theta[:, 1]
    inside = ok & (edges[:-1] * (1 - 1e-12) <= r) & (r <= edges[1:] * (1 + 1e-12))
    candidates += [(float(cost[i]), theta[i], int(i)) for i in np.flatnonzero(inside)]
    if intervals > 1 and (free[0] or free[1]):
        ray = edges[1:-1]  # ray i: u = ray[i] v, between intervals i and i + 1 (interval i's design holds there)
        g, hv = gram[:-1], h[:-1]
        m = len(ray)
        shift = np.tile(theta0, (m, 1))
        if free[0] and free[1]:
            cols = [np.stack([ray, np.ones(m), np.zeros(m), np.zeros(m)], axis=1)]
            low = [np.maximum(_LOWER[1], _LOWER[0] / ray)]
            high = [np.minimum(_UPPER[1], _UPPER[0] / ray)]
            shift[:, :2] = 0.0
            valid = low[0] <= high[0]
        else:
            j = 0 if free[0] else 1
            shift[:, j] = ray * theta0[1] if j == 0 else theta0[0] / ray
            cols, low, high = [], [], []
            valid = (shift[:, j] >= _LOWER[j] - 1e-12) & (shift[:, j] <= _UPPER[j] * (1 + 1e-12))
        for j in (2, 3):  # the overhead and the request latency, where free
            if free[j]:
                cols.append(np.tile(np.eye(4)[j], (m, 1)))
                low.append(np.full(m, _LOWER[j]))
                high.append(np.full(m, _UPPER[j]))
                shift[:, j] = 0.0
        if cols:
            t_map = np.stack(cols, axis=2)  # (m, 4, q): theta = T phi + shift
            g_phi = np.einsum("lia,lij,ljb->lab", t_map, g, t_map)
            gs = np.einsum("lij,lj->li", g, shift)
            h_phi = np.einsum("lia,li->la", t_map, hv - gs)
            c_phi = c - 2.0 * np.einsum("li,li->l", hv, shift) + np.einsum("li,li->l", shift, gs)
            phi, cost_r, ok_r = _box_qp(g_phi, h_phi, c_phi, np.stack(low, axis=1), np.stack(high, axis=1))
            theta_r = np.einsum("lia,la->li", t_map, phi) + shift
        else:
            theta_r, ok_r = shift, np.ones(m, dtype=bool)
            cost_r = np.maximum(np.einsum("li,lij,lj->l", shift, g, shift) - 2 * np.einsum("li,li->l", hv, shift)
                                + c, 0.0)
        for i in np.flatnonzero(valid & ok_r):
            candidates += [(float(cost_r[i]), theta_r[i], int(i)), (float(cost_r[i]), theta_r[i], int(i) + 1)]
    if not candidates:
        raise ScenarioError("calibration found no factors within the bounds (efficiency 1%..100%, overhead 0..1 s, "
                            "request latency 0..10 s)")
    best = min(candidates, key=lambda cand: cand[0])
    if free[0] and free[1]:
        ends = [cand for cand in candidates if cand[2] in (0, last)]
        exact = {id(cand): _exact_cost(prob, _side(prob, edges, ratio, cand[2]), cand[1]) for cand in [best, *ends]}
        best_cost = exact[id(best)]
        dof = prob.n - int(free.sum())
        tiny = 1e-12 * prob.n  # relative residuals of 1e-6: an exact fit

        def significantly_worse(cost: float) -> bool:
            if dof <= 0:
                return cost > tiny
            return (cost - best_cost) > _f_critical(dof) * max(best_cost, tiny) / dof

        simple = [cand for cand in ends if cand is best or not significantly_worse(exact[id(cand)])]
        if simple:  # of equally good simple readings, the one nearest the starting factors
            chosen = min(simple, key=lambda cand: float(np.sum(np.log(cand[1][:2] / theta0[:2]) ** 2)))
            return chosen[1], _side(prob, edges, ratio, chosen[2])
    return best[1], _side(prob, edges, ratio, best[2])


def _identify(prob: _Problem, theta: np.ndarray, side: np.ndarray, free: np.ndarray,
              theta0: np.ndarray) -> dict[int, tuple[str, float, list[int]]]:
    """Free parameters the points do not determine at ``theta``: index -> (reason, value to hold, partners).

    An efficiency without effect (every term binds on the other side) is held at its start value unless the
    points rule that out, then at the nearest value they allow. Of a group of parameters that change every
    prediction in the same proportion, the least physical one (overhead, then FLOP/s) is held at its start.
    """
    x = prob.design(side) * prob.weight[:, None]
    out: dict[int, tuple[str, float, list[int]]] = {}
    norms = np.linalg.norm(x, axis=0)
    scale = max(norms[free].max(initial=0.0), 1e-300)
    for j in np.flatnonzero(free):
        if norms[j] > 1e-12 * scale:
            continue
        if j == 2:
            out[j] = ("not identifiable: no point pays a step overhead", theta0[j], [])
            continue
        if j == 3:
            out[j] = ("not identifiable: no point is a TTFT, so none pays a request latency", theta0[j], [])
            continue
        other, what = (0, "memory-bound, so FLOP/s") if j == 1 else (1, "compute-bound, so bandwidth")
        mine, theirs = (prob.compute, prob.memory) if j == 1 else (prob.memory, prob.compute)
        use = (mine > 0) & (theirs > 0)
        limit = float(np.min(theta[other] * theirs[use] / mine[use])) if np.any(use) else np.inf  # largest 1/e
        value = min(theta0[j], max(limit, 1.0))
        out[j] = (f"not identifiable: every point is {what} never sets a time; the points only say "
                  f"{ALL_FACTORS[j]} >= {1.0 / limit if np.isfinite(limit) else 0.0:.3g}", value, [])
    rest = [j for j in np.flatnonzero(free) if j not in out]
    if len(rest) >= 2:
        # vt must be square (k x k, k <= 4 factors); U is never needed, and full_matrices=True would build it as
        # an n x n array (429 GiB for a 4 MB CSV), so ask for the full form only with fewer points than factors.
        _, s, vt = np.linalg.svd(x[:, rest] / norms[rest], full_matrices=len(x) < len(rest))
        s = np.concatenate([s, np.zeros(len(rest) - len(s))])  # fewer points than parameters: rank deficient
        if s[-1] <= 1e-6 * s[0]:
            group = [rest[i] for i in np.flatnonzero(np.abs(vt[-1]) > 0.1)]
            j = next(k for k in (3, 2, 1, 0) if k in group)
            names = " and ".join(ALL_FACTORS[k] for k in group)
            out[j] = (f"not identifiable: {names} change the predictions in the same proportion at these points "
                      f"(vary the batch size, prompt or output length to separate them)", theta0[j],
                      [k for k in group if k != j])
    return out


def _stderr(prob: _Problem, theta: np.ndarray, free: np.ndarray) -> dict[str, float | None]:
    """Standard errors of the free factors not on a bound, from the Jacobian of the log residuals (delta method
    for e = 1/u); None where the points leave no degrees of freedom."""
    at_bound = np.array([abs(theta[0] - 1) < 1e-9, abs(theta[1] - 1) < 1e-9, theta[2] < 1e-12, theta[3] < 1e-12])
    interior = free & ~at_bound
    out: dict[str, float | None] = {name: None for name in ALL_FACTORS}
    k = int(interior.sum())
    dof = prob.n - k
    if k == 0 or dof <= 0:
        return out
    t = prob.times(theta)
    x = prob.design(prob.sides(theta))[:, interior] / t[:, None]
    resid = np.log(t / prob.measured)
    try:
        cov = float(resid @ resid) / dof * np.linalg.inv(x.T @ x)
    except np.linalg.LinAlgError:
        return out
    for i, j in enumerate(np.flatnonzero(interior)):
        se = math.sqrt(max(cov[i, i], 0.0))
        out[ALL_FACTORS[j]] = se / theta[j] ** 2 if j < 2 else se
    return out


def _fit_once(prob: _Problem, free0: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, dict, dict]:
    """Solve, then hold what the points cannot determine and refit the rest: (theta, held, notes)."""
    free, theta0 = free0.copy(), start.copy()
    held: dict[str, str] = {}
    notes: dict[str, str] = {}
    theta, side = _solve(prob, free, theta0)
    for _ in range(3):
        missing = _identify(prob, theta, side, free, theta0)
        if not missing:
            break
        for j, (reason, value, partners) in missing.items():
            free[j], theta0[j] = False, value
            held[ALL_FACTORS[j]] = reason
            for k in partners:
                notes[ALL_FACTORS[k]] = f"conditional: fitted with {ALL_FACTORS[j]} held at its start value"
        theta, side = _solve(prob, free, theta0)
    return theta, held, notes


#: Residual degrees of freedom a fit keeps [points]: at most ``n - 1`` factors are freed from n points, in
#: physical order (bandwidth, then FLOP/s, then overhead), the rest held at the start (the engine profile's
#: values). A fit with no spare point passes through every point, noise included, and is not taken as a
#: measurement (issue 28: three points gave a FLOP/s efficiency of 0.024, or a 1.9 ms overhead with both
#: efficiencies at 1.0, and calibration from three rows made held-out rows worse in three of five setups).
MIN_SPARE_POINTS = 1

#: Efficiencies below this are not taken from a fit [-]: no engine runs a GPU at under 5% of its peak on the
#: passes it was measured on (the lowest plateau fitted on the published points is MI300X FLOP/s at 0.18,
#: engines.FITTED_EFFICIENCY); such a value says the model misses the points structurally.
PLAUSIBLE_EFFICIENCY_MIN = 0.05


#: Gauss-Newton steps with a finite-difference Jacobian that ``_polish`` takes at most.
POLISH_ITERATIONS = 20


def _polish(observations: Sequence[Observation], measured: np.ndarray, theta: np.ndarray, free: np.ndarray,
            latency: bool) -> np.ndarray:
    """Gauss-Newton on the log loss of the library's own predictions, the Jacobian by forward differences, from
    ``theta`` over the ``free`` parameters within the box; each step halved until the loss falls.

    A queued TTFT (users in flight, ``Observation.queued_ttft``) depends on the factors through the closed loop's
    throughput, decode step and prefill queue in ways no one piece holds (``_queued_ttft`` linearises it on the
    prefill and the decode step), so the linearised iteration can settle where its approximate gradient, not the
    loss's, vanishes; these steps, on the predictions themselves (``predict``, the library's values), finish the
    fit. Each costs one evaluation per point and free parameter."""
    idx = np.flatnonzero(free)
    if not len(idx):
        return theta

    rate = np.array([o.is_rate for o in observations])
    replicas = np.array([o.replicas for o in observations], dtype=float)

    def residuals(t: np.ndarray) -> np.ndarray:  # ln(predicted time / measured time), a rate as time per token
        try:
            predicted = _predictions(observations, Factors.from_theta(t, latency), measured)
        except ScenarioError:  # no finite prediction there (a queue without bound): not a step to take
            return np.full(len(measured), np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.where(rate, replicas / predicted, predicted) / measured)

    def clip(t: np.ndarray) -> np.ndarray:
        return np.clip(t, _LOWER, _UPPER)

    r = residuals(theta)
    loss = float(r @ r)
    for _ in range(POLISH_ITERATIONS):
        jac = np.empty((len(r), len(idx)))
        for k, j in enumerate(idx):
            h = 1e-6 * max(abs(theta[j]), 1e-3)
            h = -h if theta[j] + h > _UPPER[j] else h
            shifted = theta.copy()
            shifted[j] += h
            jac[:, k] = (residuals(shifted) - r) / h
        if not np.all(np.isfinite(jac)):
            break
        delta = np.linalg.lstsq(jac, -r, rcond=None)[0]
        step, improved = 1.0, False
        while step > 1e-4:
            candidate = theta.copy()
            candidate[idx] += step * delta
            candidate = clip(candidate)
            r_c = residuals(candidate)
            loss_c = float(r_c @ r_c)
            if np.all(np.isfinite(r_c)) and loss_c < loss:
                improved = True
                break
            step /= 2
        if not improved:
            break
        done = loss - loss_c <= 1e-12 * max(loss, 1e-300)
        theta, r, loss = candidate, r_c, loss_c
        if done:
            break
    return theta


def fit_factors(observations: Sequence[Observation], start: Factors | None = None,
                fit: Sequence[str] = FACTORS, max_iterations: int = 100) -> Fit:
    """``fit_unguarded``, refusing what the points cannot pin: of the factors the points identify, at most
    ``n - MIN_SPARE_POINTS`` are freed (bandwidth, FLOP/s, overhead, request latency, in that order); a fitted
    efficiency under ``PLAUSIBLE_EFFICIENCY_MIN`` is held at its start value and the rest refitted. Each refusal is a
    ``Fit.held`` reason, so the report says so."""
    wanted = [f for f in ALL_FACTORS if f in fit]
    n = len(observations)
    result = fit_unguarded(observations, start, fit, max_iterations)  # checks the names and the points
    first_held = {f: why for f, why in result.held.items() if f in wanted}
    identified = [f for f in wanted if f not in result.held]
    allowed = identified[: max(n - MIN_SPARE_POINTS, 0)]
    refused: dict[str, str] = {f: (f"under-determined: {n} point{'s' if n != 1 else ''} cannot pin "
                                   f"{len(identified)} factors with {MIN_SPARE_POINTS} to spare; held at its start "
                                   f"value") for f in identified if f not in allowed}
    attrs = {"bandwidth_efficiency": "bandwidth_efficiency", "flops_efficiency": "flops_efficiency"}
    for _ in range(2):
        if refused:
            result = fit_unguarded(observations, start, allowed, max_iterations)
        low = [f for f, attr in attrs.items() if f in allowed and f not in result.held
               and getattr(result.factors, attr) < PLAUSIBLE_EFFICIENCY_MIN]
        if not low:
            break
        for f in low:
            refused[f] = (f"implausible: the fit asked for {getattr(result.factors, attrs[f]):.3f} of peak (under "
                          f"{PLAUSIBLE_EFFICIENCY_MIN}); held at its start value (a structural miss, not an "
                          f"efficiency)")
        allowed = [f for f in allowed if f not in low]
    if not refused:
        return result
    kept = {k: v for k, v in result.held.items() if not v.startswith("not fitted")}
    held = {**{k: v for k, v in result.held.items() if k not in wanted}, **first_held, **kept, **refused}
    return replace(result, fitted=tuple(wanted), held=held, notes={**first_held, **result.notes, **refused})


def fit_unguarded(observations: Sequence[Observation], start: Factors | None = None,
                  fit: Sequence[str] = FACTORS, max_iterations: int = 100) -> Fit:
    """Factors minimising the squared log errors ``sum_i ln(t_i / y_i)^2`` of the observations' times.

    The relative-error problem is solved globally first (``_solve``); Gauss-Newton steps on the log loss
    (each again solved exactly, halved if the loss would rise) follow, re-linearising open-loop points at
    each estimate, until the factors stop changing (``Fit.converged``). ``fit`` names the factors to fit
    (a subset of ``ALL_FACTORS``); the others keep their ``start`` value, as do those the points cannot
    determine (``Fit.held``, with the reason). Where the latency is fitted its start is ``start``'s, else the first
    observation's scenario's ``serving.request_latency``.
    """
    if not observations:
        raise ScenarioError("calibration needs at least one measured point")
    unknown = [f for f in fit if f not in ALL_FACTORS]
    if unknown:
        raise ScenarioError(f"cannot fit {', '.join(unknown)}; choose from {', '.join(ALL_FACTORS)}")
    start = start or Factors.of(observations[0].scenario)
    with_latency = LATENCY in fit
    if with_latency and start.request_latency_s is None:
        start = replace(start, request_latency_s=float(observations[0].scenario.serving.request_latency_s))
    measured = np.array([o.measured_time for o in observations])
    if np.any(~np.isfinite(measured)) or np.any(measured <= 0):
        raise ScenarioError("every measured value must be a positive finite number")
    free0 = np.array([f in fit for f in ALL_FACTORS])
    open_loop = any(o.linearised for o in observations)
    prob = _Problem.build([terms_for(o, start) for o in observations], measured, with_latency)
    theta, held, notes = _fit_once(prob, free0, start.theta())
    converged, iteration = not np.any(free0), 0
    for iteration in range(1, max_iterations + 1):  # noqa: B007 (the count is reported)
        if converged:
            break
        if open_loop:
            at = Factors.from_theta(theta, with_latency)
            prob = _Problem.build([terms_for(o, at) for o in observations], measured, with_latency)
        candidate, held_c, notes_c = _fit_once(prob.gauss_newton(theta), free0, start.theta())
        loss, step = prob.log_loss(theta), 1.0
        while prob.log_loss(theta + step * (candidate - theta)) > loss * (1 + 1e-12) and step > 1e-3:
            step /= 2
        new = theta + step * (candidate - theta)
        held, notes = held_c, notes_c
        converged = bool(np.allclose(new, theta, rtol=1e-9, atol=1e-12))
        theta = new
    if any(o.queued_ttft for o in observations):
        free = np.array([f in fit and f not in held for f in ALL_FACTORS])
        theta = _polish(observations, measured, theta, free, with_latency)
        prob = _Problem.build([terms_for(o, Factors.from_theta(theta, with_latency)) for o in observations],
                              measured, with_latency)
    edges = {0: (1.0, "at its bound 1.0 (peak): some points are faster than the model allows at any bandwidth "
                      "efficiency (a structural miss: a batch too small, bytes over-counted)"),
             1: (1.0, "at its bound 1.0 (peak): some points are faster than the model allows at any FLOP/s "
                      "efficiency"),
             2: (0.0, "at its bound 0: the points ask for a negative overhead"),
             3: (0.0, "at its bound 0: the points ask for a negative request latency")}
    for j, (edge, text) in edges.items():
        if free0[j] and ALL_FACTORS[j] not in held and abs(theta[j] - edge) < 1e-9:
            notes[ALL_FACTORS[j]] = text
    notes.update(held)
    for name in ALL_FACTORS:
        if name not in fit and (name != LATENCY or start.request_latency_s is not None):
            held.setdefault(name, "not fitted (held at its start value)")
    exact, found = start.theta(), Factors.from_theta(theta, with_latency)
    names = ("bandwidth_efficiency", "flops_efficiency", "step_overhead_s", "request_latency_s")
    factors = Factors(**{n: getattr(start if theta[j] == exact[j] else found, n)  # held: the start value itself
                         for j, n in enumerate(names)})
    return Fit(factors=factors, fitted=tuple(f for f in ALL_FACTORS if f in fit), held=held, notes=notes,
               stderr=_stderr(prob, theta, np.array([f in fit and f not in held for f in ALL_FACTORS])),
               predicted=_predictions(observations, factors, measured),
               measured=np.array([o.value for o in observations]), converged=converged, iterations=iteration)


# --- benchmark CSV ----------------------------------------------------------------------------------------------

#: Accepted CSV columns (case-insensitive) -> (canonical name, factor to base units). vLLM's benchmark_serving
#: result keys (``mean_tpot_ms``, ``output_throughput``, ``max_concurrency``, ``request_rate``) and
#: benchmark_latency / benchmark_throughput arguments (``input_len``, ``output_len``, ``batch_size``) are accepted.
COLUMNS: dict[str, tuple[str, float]] = {
    **{k: ("batch_size", 1.0) for k in ("batch_size", "batch", "bs")},
    **{k: ("concurrency", 1.0) for k in ("concurrency", "max_concurrency", "num_concurrent")},
    **{k: ("request_rate", 1.0) for k in ("request_rate", "qps", "rate")},
    **{k: ("prompt_tokens", 1.0) for k in ("prompt_tokens", "input_tokens", "input_len", "random_input_len", "isl")},
    **{k: ("output_tokens", 1.0) for k in ("output_tokens", "output_len", "random_output_len", "osl")},
    "tensor_parallel": ("tensor_parallel", 1.0), "tp": ("tensor_parallel", 1.0),
    "step_time_ms": ("step_time_s", 1e-3), "step_time_s": ("step_time_s", 1.0),
    **{k: ("tpot_s", 1e-3) for k in ("mean_tpot_ms", "tpot_ms", "mean_itl_ms", "itl_ms")},
    **{k: ("ttft_s", 1e-3) for k in ("mean_ttft_ms", "ttft_ms")},
    **{k: ("latency_s", 1.0) for k in ("latency_s", "avg_latency", "mean_latency_s")},
    "latency_ms": ("latency_s", 1e-3),
    **{k: ("output_tokens_per_s", 1.0) for k in ("output_throughput", "output_tokens_per_s", "output_tps")},
}
_LOAD = ("batch_size", "concurrency", "request_rate")
#: When a row has several columns for one metric, the first in this order is used (means before medians).
_PREFERENCE = ["step_time_ms", "step_time_s", "mean_tpot_ms", "tpot_ms", "mean_itl_ms", "itl_ms", "mean_ttft_ms",
               "ttft_ms", "latency_s", "avg_latency", "mean_latency_s", "latency_ms", "output_throughput",
               "output_tokens_per_s", "output_tps"]
MAX_CSV_BYTES = 5_000_000
#: Most measured rows (CSV rows, benchmark runs) one calibration takes, checked while reading, before any fit:
#: the fit is linear in the points (``_sweep``), about 0.4 ms a point on one core, so 10,000 rows fit in a few
#: seconds; a benchmark sweep has tens.
MAX_CSV_ROWS = 10_000
#: Most distinct setups (prompt and output length, tensor parallelism) among the rows: each is one scenario the
#: library evaluates (a few ms).
MAX_SHAPES = 500
#: Most distinct open-loop loads (setup and request rate): each is re-evaluated at every step of the fit.
MAX_OPEN_LOOP_LOADS = 50
#: Most distinct closed-loop loads (setup and users in flight): each is the library's closed loop, re-evaluated at
#: every step of the fit (100 loads of TPOT and TTFT under vLLM's profile fit in about 27 s on one core).
MAX_CLOSED_LOOP_LOADS = 200


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    """One measured setup: its line number (CSV) or position in its file, setup values and measured values
    (base units)."""

    line: int
    setup: dict[str, float]
    measured: dict[str, float]
    label: str = ""  # where the row came from when not a CSV line (a benchmark file, a metrics scrape)
    notes: tuple[str, ...] = ()  # what the reader noticed and did not fit (failed requests, a scrape's snapshot)


#: Columns that count (tokens, sequences, GPUs): whole numbers; and the loads that may be "inf" (offline).
_WHOLE_COLUMNS = frozenset({"batch_size", "prompt_tokens", "output_tokens", "tensor_parallel"})
_MAY_BE_INFINITE = frozenset({"request_rate", "concurrency"})


def _cell_number(cell: str, canonical: str) -> float | None:
    """A CSV cell as a positive number of at most 1e15 in ASCII decimal (whole for ``_WHOLE_COLUMNS``; "inf" for
    ``_MAY_BE_INFINITE``); None when it is not one."""
    from capacity.inputs.numbers import NUMBER, WHOLE_MAX

    if canonical in _MAY_BE_INFINITE and cell.lower() in ("inf", "+inf", "infinity"):
        return math.inf
    if len(cell) > 40 or not NUMBER.fullmatch(cell):
        return None
    value = float(cell)
    if not 0 < value <= WHOLE_MAX or (canonical in _WHOLE_COLUMNS and value != math.floor(value)):
        return None
    return value


def _not_a_number(cell: str) -> bool:
    from capacity.inputs.numbers import NUMBER

    return len(cell) > 40 or not NUMBER.fullmatch(cell)


def read_benchmark_csv(path: str | Path) -> tuple[list[BenchmarkRow], list[str]]:
    """Read a benchmark CSV; returns (rows, ignored column names). Errors name the file, line and column."""
    path = Path(path)
    return rows_from_csv_text(read_text_limited(path, MAX_CSV_BYTES, "benchmark CSV", encoding="utf-8-sig"), path)


def rows_from_csv_text(text: str, path: str | Path) -> tuple[list[BenchmarkRow], list[str]]:
    """``read_benchmark_csv`` of text already read (``path`` names it in errors)."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        raise ScenarioError(f"{path} is empty; it needs a header line")
    names = [h.strip().lower() for h in header]
    ignored = [h for h in names if h and h not in COLUMNS]
    if not any(COLUMNS.get(n, ("",))[0] in METRICS for n in names):
        raise ScenarioError(f"{path} has no measured column; use one of: "
                            f"{', '.join(k for k, v in COLUMNS.items() if v[0] in METRICS)}")
    rows, problems = [], []
    for line, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(rows) >= MAX_CSV_ROWS:
            raise ScenarioError(f"{path} has over {MAX_CSV_ROWS} data rows; calibration takes at most "
                                f"{MAX_CSV_ROWS} measured points (keep a representative subset)")
        setup: dict[str, float] = {}
        measured: dict[str, float] = {}
        rank: dict[str, int] = {}
        for name, cell in zip(names, cells, strict=False):  # a short row leaves the last cells empty
            cell = cell.strip()
            if name not in COLUMNS or cell == "":
                continue
            canonical, unit = COLUMNS[name]
            value = _cell_number(cell, canonical)
            if value is None:  # ASCII digits only: float() reads "١٢" as 12 and "1e999" as infinity
                shown = clean_line(repr(cell), 60)
                allowed = ("a whole number in [1, 1e+15]" if canonical in _WHOLE_COLUMNS
                           else "a positive number of at most 1e+15")
                infinite = " or inf" if canonical in _MAY_BE_INFINITE else ""
                problems.append(f"{path} line {line}, column {name}: {shown} "
                                f"{'is not a number' if _not_a_number(cell) else 'must be'}: give {allowed}{infinite}")
                continue
            order = _PREFERENCE.index(name) if name in _PREFERENCE else 0
            if canonical in rank and rank[canonical] <= order:
                continue  # a preferred column for this quantity was already read
            rank[canonical] = order
            (measured if canonical in METRICS else setup)[canonical] = value * unit
        for key in ("prompt_tokens", "output_tokens"):
            if key not in setup:
                problems.append(f"{path} line {line}: no {key} column value "
                                f"({', '.join(k for k, v in COLUMNS.items() if v[0] == key)})")
        if not measured and not any(p.startswith(f"{path} line {line},") for p in problems):
            problems.append(f"{path} line {line}: no measured value in this row")
        rows.append(BenchmarkRow(line, setup, measured))
    if problems:
        raise ScenarioError(*problems)
    if not rows:
        raise ScenarioError(f"{path} has a header but no data rows")
    return rows, ignored


def observations_from_rows(scenario_mapping: Mapping[str, Any], rows: Sequence[BenchmarkRow],
                           origin: str = "csv") -> list[Observation]:
    """One Observation per measured value of each row, the row's shape and TP applied to the scenario."""
    shapes = {(r.setup["prompt_tokens"], r.setup["output_tokens"], r.setup.get("tensor_parallel")) for r in rows}
    if len(shapes) > MAX_SHAPES:
        raise ScenarioError(f"{origin} has {len(shapes):,} distinct setups (prompt, output, tensor parallel); "
                            f"calibration takes at most {MAX_SHAPES:,}")
    loads = {(r.setup["prompt_tokens"], r.setup["output_tokens"], r.setup.get("tensor_parallel"),
               r.setup["request_rate"]) for r in rows
             if "batch_size" not in r.setup and math.isfinite(r.setup.get("request_rate", math.inf))}
    if len(loads) > MAX_OPEN_LOOP_LOADS:
        raise ScenarioError(f"{origin} has {len(loads):,} distinct open-loop loads (setup and request rate); "
                            f"calibration takes at most {MAX_OPEN_LOOP_LOADS:,}")
    looped = {(r.setup["prompt_tokens"], r.setup["output_tokens"], r.setup.get("tensor_parallel"),
                r.setup["concurrency"]) for r in rows
              if "batch_size" not in r.setup and not math.isfinite(r.setup.get("request_rate", math.inf))
              and math.isfinite(r.setup.get("concurrency", math.inf))}
    if len(looped) > MAX_CLOSED_LOOP_LOADS:
        raise ScenarioError(f"{origin} has {len(looped):,} distinct closed-loop loads (setup and concurrency); "
                            f"calibration takes at most {MAX_CLOSED_LOOP_LOADS:,}")
    out = []
    built: dict[tuple, Scenario] = {}  # one scenario per setup: rows of one shape share it (and its probe)
    for row in rows:
        key = (row.setup["prompt_tokens"], row.setup["output_tokens"], row.setup.get("tensor_parallel"))
        if key in built:
            _append_observations(out, built[key], row)
            continue
        data = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in scenario_mapping.items()}
        workload = dict(data.get("workload") or {})
        workload.update(prompt_tokens=int(row.setup["prompt_tokens"]), output_tokens=int(row.setup["output_tokens"]))
        workload.pop("arrival_rate", None)
        data["workload"] = workload
        if "tensor_parallel" in row.setup:
            gpu = data.get("gpu")
            data["gpu"] = {**({"name": gpu} if isinstance(gpu, str) else dict(gpu or {})),
                           "count": int(row.setup["tensor_parallel"])}
        try:
            scenario = Scenario.from_dict(data)
        except ScenarioError as exc:
            raise ScenarioError(*(f"{origin} line {row.line}: {p}" for p in exc.problems)) from None
        built[key] = scenario
        _append_observations(out, scenario, row)
    return out


def _append_observations(out: list[Observation], scenario: Scenario, row: BenchmarkRow) -> None:
    for metric, value in row.measured.items():
        bs = row.setup.get("batch_size")
        out.append(Observation(scenario, metric, value, batch_size=int(bs) if bs else None,
                               concurrency=row.setup.get("concurrency"), request_rate=row.setup.get("request_rate"),
                               label=f"{row.label} {metric}" if row.label else f"line {row.line} {metric}"))


# --- report and command line ------------------------------------------------------------------------------------

def describe(fit: Fit) -> dict[str, Any]:
    """A JSON-safe summary of a fit: factors (None when not identified), errors, notes."""
    f = fit.factors
    values = {"bandwidth_efficiency": f.bandwidth_efficiency, "flops_efficiency": f.flops_efficiency,
              "step_overhead": f.step_overhead_s}
    if LATENCY in fit.fitted:
        values[LATENCY] = f.request_latency_s
    return {
        "factors": {k: (v if fit.identified(k) else None) for k, v in values.items()},
        "used": values, "stderr": fit.stderr, "held": fit.held, "notes": fit.notes,
        "points": int(len(fit.measured)), "mape_percent": fit.mape, "rmse_percent": fit.rmse_percent,
        "converged": fit.converged,
    }


def _unit_value(metric: str, value: float) -> str:
    return f"{value:,.1f} tok/s" if metric == "output_tokens_per_s" else f"{value * 1e3:,.2f} ms"


def format_report(observations: Sequence[Observation], before: Fit, after: Fit) -> str:
    """Plain-text report: the fitted factors, then each point with the default and calibrated predictions."""
    lines = ["factor                 fitted        +/- (1 s.e.)   note"]
    d = describe(after)
    for name in d["factors"]:
        value = d["factors"][name]
        in_ms = name in ("step_overhead", LATENCY)
        shown = "not identified" if value is None else (f"{value * 1e3:.3f} ms" if in_ms else f"{value:.4f}")
        se = after.stderr.get(name)
        se_text = "" if se is None else (f"{se * 1e3:.3f} ms" if in_ms else f"{se:.4f}")
        lines.append(f"{name:<22} {shown:<13} {se_text:<14} {after.notes.get(name, '')}")
    lines.append("")
    lines.append(f"{'point':<28} {'measured':>16} {'default':>16} {'err %':>7} {'calibrated':>16} {'err %':>7}")
    for o, b, a in zip(observations, before.predicted, after.predicted, strict=True):
        lines.append(f"{o.label:<28} {_unit_value(o.metric, o.value):>16} {_unit_value(o.metric, b):>16} "
                     f"{(b / o.value - 1) * 100:>+7.1f} {_unit_value(o.metric, a):>16} "
                     f"{(a / o.value - 1) * 100:>+7.1f}")
    lines.append("")
    lines.append(f"MAPE {before.mape:.1f}% with the default factors -> {after.mape:.1f}% calibrated "
                 f"(RMSE of the relative errors {before.rmse_percent:.1f}% -> {after.rmse_percent:.1f}%, "
                 f"{len(observations)} points)")
    if not after.converged:
        lines.append("warning: the open-loop points did not converge to a self-consistent fit")
    return "\n".join(lines) + "\n"


def read_measurements(paths: str | Path | Sequence[str | Path],
                      since: str | Path | None = None) -> tuple[list[BenchmarkRow], list[str]]:
    """Rows from benchmark files of any accepted kind (told apart by their content, ``calibrate_inputs.sniff``):
    a benchmark CSV, ``vllm bench serve`` result JSON, a Prometheus scrape of vLLM's /metrics (minus the
    earlier scrape ``since``). Returns (rows, notes); at most ``MAX_CSV_ROWS`` rows in all, checked per file."""
    from capacity.fileio.safe_load import read_text
    from capacity.planning import calibrate_inputs as inputs

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    before = inputs.read_scrape(since) if since else None
    rows: list[BenchmarkRow] = []
    notes: list[str] = []
    for path in paths:
        text = read_text(path, max(MAX_CSV_BYTES, inputs.MAX_BENCH_JSON_BYTES, inputs.MAX_SCRAPE_BYTES),
                         "benchmark file", encoding="utf-8-sig")
        kind = inputs.sniff(text)
        shown = clean_line(str(path), 120)
        limit = {"csv": MAX_CSV_BYTES, "json": inputs.MAX_BENCH_JSON_BYTES, "prometheus": inputs.MAX_SCRAPE_BYTES}
        size = len(text.encode("utf-8", errors="replace"))
        if size > limit[kind]:
            raise ScenarioError(f"{shown} is {size:,} bytes; a benchmark {kind} file is limited to "
                                f"{limit[kind]:,} bytes")
        if kind == "csv":
            found, _ = rows_from_csv_text(text, path)
        else:
            found = (inputs.rows_from_vllm_bench(text, str(path)) if kind == "json"
                     else inputs.rows_from_scrape(inputs.parse_scrape(text, str(path)), str(path), before))
            notes += [n for r in found for n in r.notes]
        if len(rows) + len(found) > MAX_CSV_ROWS:
            raise ScenarioError(f"the benchmark files hold over {MAX_CSV_ROWS:,} rows; calibration takes at most "
                                f"{MAX_CSV_ROWS:,} measured points (keep a representative subset)")
        rows += found
    if since and not any(r.label.endswith("(metrics)") for r in rows):
        raise ScenarioError(f"--since {clean_line(str(since), 120)} is an earlier metrics scrape, but no benchmark "
                            f"file is a metrics scrape")
    return rows, notes


def default_fit(observations: Sequence[Observation]) -> tuple[str, ...]:
    """The factors a calibration fits unless told: the three step factors, and the request latency where some
    point is a TTFT at one user, a request rate or users in flight (static-batch TTFTs, offline benchmarks,
    pay none)."""
    pays = any(o.metric == "ttft_s" and o.batch_size is None for o in observations)
    return ALL_FACTORS if pays else FACTORS


def calibrate(scenario_mapping: Mapping[str, Any], paths: str | Path | Sequence[str | Path],
              fit: Sequence[str] | None = None,
              since: str | Path | None = None) -> tuple[list[Observation], Fit, Fit]:
    """Read benchmark files (``read_measurements``), fit ``fit`` factors (None: ``default_fit``); returns
    (observations, default fit, calibrated fit)."""
    rows, _ = read_measurements(paths, since)
    origin = str(paths) if isinstance(paths, (str, Path)) else ", ".join(map(str, paths))
    return calibrate_rows(scenario_mapping, rows, origin, fit)


def calibrate_rows(scenario_mapping: Mapping[str, Any], rows: Sequence[BenchmarkRow], origin: str,
                   fit: Sequence[str] | None = None) -> tuple[list[Observation], Fit, Fit]:
    """``calibrate`` of rows already read; ``fit`` None: ``default_fit`` of the points."""
    observations = observations_from_rows(scenario_mapping, rows, origin=origin)
    start = Factors.of(observations[0].scenario)
    before = fit_factors(observations, start, fit=())
    return observations, before, fit_factors(observations, start, fit=default_fit(observations) if fit is None
                                             else fit)
