"""Traffic over time: a day of arrivals from an hourly profile, with bursts, or a trace with timestamps.

A day is a piecewise-constant arrival rate λ(t) [requests/s]: one rate per profile step (an hour by default,
``step_s``), each multiplied by the bursts that cover it. Arrivals are a Poisson process of that rate (or evenly
spaced, ``fixed``, for a steady load with no noise). For a piecewise-constant rate the process is exact segment by
segment: a segment of length Δ at rate λ holds ``N ~ Poisson(λ Δ)`` arrivals, each uniform on the segment (the
order statistics of a Poisson process; Ross, *Introduction to Probability Models*, 12th ed., §5.3.5), so a day of
ten million arrivals is drawn in a few vectorised calls.

Bursts:

* stated (``Burst(start_s, duration_s, factor)``): λ(t) x factor on ``[start, start + duration)``;
* Markov-modulated (``Mmpp(factor, mean_burst_s, mean_calm_s)``): a two-state Markov-modulated Poisson process
  (Fischer and Meier-Hellstern, "The Markov-modulated Poisson process (MMPP) cookbook", Performance Evaluation
  18(2), 1993): calm and burst periods alternate with exponential lengths of the stated means; during a burst the
  rate is λ(t) x factor. The day starts calm.

Lengths (prompt, answer, shared prefix) come from the scenario's ``simulation:`` block or workload, drawn as
``workloads.generate`` draws them; only the arrival times are the day's. A trace (``workloads.read_trace``) gives
its own times and lengths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from capacity.simulator.config import SimulationConfig
from capacity.simulator.workloads import RequestTable, generate

#: Seconds in one hour: the default length of one profile step [s].
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Burst:
    """A stated burst: the rate x ``factor`` [-] from ``start_s`` for ``duration_s`` [s]."""

    start_s: float
    duration_s: float
    factor: float

    def __post_init__(self) -> None:
        if not (self.start_s >= 0 and self.duration_s > 0 and self.factor > 0 and math.isfinite(self.factor)):
            raise ValueError(f"a burst needs start >= 0 s, duration > 0 s and factor > 0, got {self.start_s}, "
                             f"{self.duration_s}, {self.factor}")


@dataclass(frozen=True, slots=True)
class Mmpp:
    """A two-state Markov-modulated burst process: calm periods of mean ``mean_calm_s`` [s] and bursts of mean
    ``mean_burst_s`` [s], both exponential, the rate x ``factor`` [-] during a burst."""

    factor: float
    mean_burst_s: float
    mean_calm_s: float

    def __post_init__(self) -> None:
        if not (self.factor > 0 and self.mean_burst_s > 0 and self.mean_calm_s > 0):
            raise ValueError("an MMPP needs factor > 0 and mean burst and calm periods > 0 s")

    def periods(self, length_s: float, rng: np.random.Generator) -> list[Burst]:
        """The burst periods of one draw over ``[0, length_s)``, the process starting calm."""
        bursts, t = [], 0.0
        while True:
            t += rng.exponential(self.mean_calm_s)
            if t >= length_s:
                return bursts
            d = rng.exponential(self.mean_burst_s)
            bursts.append(Burst(t, min(d, length_s - t), self.factor))
            t += d


def rate_segments(step_rps: ArrayLike, step_s: float = HOUR_S, bursts: tuple[Burst, ...] | list[Burst] = ()
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The day's rate as segments: ``(edges [s], rates [requests/s])``, ``len(edges) = len(rates) + 1``.

    λ(t) = ``step_rps[floor(t / step_s)]`` x the product of the factors of the bursts covering t.
    """
    r = np.asarray(step_rps, dtype=float).reshape(-1)
    if r.size == 0 or not np.all(np.isfinite(r)) or np.any(r < 0) or not step_s > 0:
        raise ValueError("a profile needs one or more rates >= 0 requests/s and a step > 0 s")
    length = r.size * step_s
    cuts = [np.arange(r.size + 1) * step_s]
    for b in bursts:
        cuts.append(np.clip([b.start_s, b.start_s + b.duration_s], 0.0, length))
    edges = np.unique(np.concatenate(cuts))
    mid = (edges[:-1] + edges[1:]) / 2.0
    rates = r[np.minimum((mid // step_s).astype(int), r.size - 1)]
    for b in bursts:
        rates = np.where((mid >= b.start_s) & (mid < b.start_s + b.duration_s), rates * b.factor, rates)
    return edges, rates


def arrivals(edges: np.ndarray, rates: np.ndarray, rng: np.random.Generator, kind: str = "poisson") -> np.ndarray:
    """Sorted arrival times [s] of a process of piecewise-constant rate (module docstring).

    ``poisson``: ``N ~ Poisson(λ Δ)`` per segment, uniform within it. ``fixed``: evenly spaced, ``round(λ Δ)`` per
    segment at ``start + (i + 1/2) Δ / N``, a steady load with no noise.
    """
    span = np.diff(edges)
    expected = rates * span
    if kind == "fixed":
        counts = np.rint(expected).astype(np.int64)
        seg = np.repeat(np.arange(len(span)), counts)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        i = np.arange(int(counts.sum())) - np.repeat(first, counts)
        return edges[:-1][seg] + (i + 0.5) * span[seg] / counts[seg]
    if kind != "poisson":
        raise ValueError(f"arrival kind must be poisson or fixed, got {kind!r}")
    counts = rng.poisson(expected)
    seg = np.repeat(np.arange(len(span)), counts)
    times = edges[:-1][seg] + rng.random(seg.size) * span[seg]
    return np.sort(times)


def day_table(config: SimulationConfig, times_s: np.ndarray) -> RequestTable:
    """Requests arriving at ``times_s`` [s] (sorted) with the lengths and prefixes of ``config`` (drawn as
    ``workloads.generate`` draws them for as many requests, deterministic for ``config.seed``)."""
    if config.turns > 1:
        raise ValueError("a day of traffic is drawn for independent requests; multi-turn sessions (turns) are not "
                         "supported")
    one = replace(config, requests=int(times_s.size), arrival="fixed", rate=1.0)
    table = generate(one)
    return replace(table, arrival_s=np.asarray(times_s, dtype=float))


def per_second(times_s: np.ndarray, length_s: float) -> np.ndarray:
    """Arrivals in each second ``[k, k + 1)`` of ``[0, length_s)`` [requests]."""
    n = int(math.ceil(length_s))
    k = np.clip(np.floor(times_s).astype(np.int64), 0, max(n - 1, 0))
    return np.bincount(k, minlength=n).astype(float)


__all__ = ["Burst", "HOUR_S", "Mmpp", "arrivals", "day_table", "per_second", "rate_segments"]
