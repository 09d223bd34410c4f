"""Analytic percentiles of TPOT and TTFT at a load, and the goodput that keeps a percentile promise.

The mean model (``slo``) says what an average request sees. The essays ask for p50 and p99 (essay 001,
"The metrics you must keep apart"), and a promise is kept per request. Two distributions, both built on
the mean model's operating point at total load λ (``mix.MixModel``: decode step ``s``, mean prefill ``t_p``):

TPOT. A request decodes ``A - 1`` steps; every prefill pass that runs meanwhile pauses it. Its TPOT exceeds
q exactly when the prefill work arriving during its life — from the start of its own prefill pass to its
last token, ``W(q) = t_p,own + (A - 1) q`` — plus its decode steps exceed ``(A - 1) q``. Arrivals are
Poisson; the work is a compound Poisson sum of the prefills ``t_p,i`` of all shapes, approximated by a
Poisson count ``N`` of prompts of equal size ``β = Σ w t² / Σ w t`` with mean ``f λ W``, ``f = (Σ w t)² / Σ w t²``
(same mean and variance; exact for one shape). ``t_p,i`` here is the GPU time a prompt costs the decoding
sequences (``analysis.prefill_stage``: under an engine profile its share of a batched prefill pass), as in the
mean model's TPOT, so ``f β`` is the mean model's ``prefill_gpu_s``.
The decode step grows with the batch, and the batch with the arrivals: on average over the window half of
the sequences decoding arrived before it (the mean
model's ``B̄ = λ A TPOT``, halved) and half during it (``N A q / (2 W f)``). With the step's pieces
``t_step(B) = max_i(a_i + m_i B)``::

    TPOT > q  <=>  N > n(q) = min_i (q - a_i - m_i B̄ / 2) / (β / (A - 1) + m_i A q / (2 W f))
    P(TPOT <= q) = P(N <= n(q)) = Q(floor(n(q)) + 1, f λ W(q))

with Q the regularised upper incomplete gamma function (the Poisson CDF). Long answers average the
interruptions out; short answers and long prompts spread them. The median is close to the mean model's
``s / (1 - λ t_p)``.

TTFT. ``TTFT = t_p,own + (1 + 2ρ) R``, ρ = λ c: the wait R for the interval in progress, plus the
arithmetic of prompts that arrive meanwhile and share the pass (the mean model's ``(1/2 + ρ) L*`` with
``E[R] = L*/2``). An arrival finds the engine prefilling with probability ``π = λ t_p`` (Poisson arrivals
see time averages); then it waits an exponential time (a chain of passes), else the rest of a decode
step, uniform on [0, s]::

    P(R <= r) = (1 - π) min(r / s, 1) + π (1 - exp(-r / θ)),   θ = (E[R] - (1 - π) s / 2) / π

so that the mean is the mean model's. Agreement with the simulator (same engine: continuous batching,
prefills that pause decoding, KV reserved, roofline costs, Poisson arrivals) is measured in
docs/workloads.md and tests/model/test_percentiles.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import gammaincc

from capacity.model.mix import MixModel, mix_model

#: Quantiles reported by default.
QUANTILES = (0.5, 0.9, 0.99)


def tpot_cdf(mix: MixModel, j: int, rate_rps: float, tpot_s: np.ndarray) -> np.ndarray:
    """``P(TPOT <= q)`` for requests of class j at total load λ, at each q of ``tpot_s`` [-] (see module doc).

    One-token answers have no TPOT and are left out, as the simulator leaves them out.
    """
    return _tpot_cdf(mix, j, rate_rps, tpot_s, _tpot_state(mix, rate_rps))


def _tpot_state(mix: MixModel, rate_rps: float) -> tuple[float, tuple]:
    """What the TPOT distribution at load λ needs once: sequences that arrived before a request's window and are
    still decoding, ``B̄ / 2`` [requests], and the step's pieces around the batch (``MixModel.pieces_at``)."""
    return float(mix.in_flight(rate_rps)) / 2.0, mix.pieces_at(rate_rps)


def _tpot_cdf(mix: MixModel, j: int, rate_rps: float, tpot_s: np.ndarray, state: tuple[float, tuple]) -> np.ndarray:
    q = np.asarray(tpot_s, float)[:, None]
    rows = mix.class_rows(j)
    rows = rows[mix.output[rows] > 1]
    if not len(rows):
        return np.full(q.shape[0], np.nan)
    factor, beta = mix.work_stream(gpu=True)  # the work that pauses decoding: each prompt's GPU time
    steps = mix.output[rows] - 1.0
    window = mix.shape_prefill_s[rows] + steps * q
    before, pieces = state
    prompts = np.full(np.broadcast_shapes(q.shape, steps.shape), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for a, m in pieces:
            own = float(m) * mix.output_tokens * q / (2.0 * window * factor)  # step growth per prompt arrived
            prompts = np.minimum(prompts, (q - float(a) - float(m) * before) / (beta / steps + own))
    # a negative count: the decode step alone is longer than q, so no request is that fast
    cdf = np.where(prompts >= 0, gammaincc(np.floor(np.maximum(prompts, 0.0)) + 1.0, rate_rps * window * factor), 0.0)
    return cdf @ _within(mix, rows)


def _within(mix: MixModel, rows: np.ndarray) -> np.ndarray:
    """Shares of the shapes ``rows`` within their class (summing to 1) [-]."""
    return mix.weight[rows] / mix.weight[rows].sum()


def residual_wait(mix: MixModel, rate_rps: float) -> tuple[float, float, float, float]:
    """The wait model behind the TTFT quantiles at total load λ: ``(π, s, θ, ρ)`` (see module doc).

    π = λ t_p [-] the share of arrivals that find a prefill in progress, s [s] the decode step, θ [s] the
    mean of the exponential wait behind prefills, ρ = λ c [-] the arithmetic of prompts sharing a pass.
    """
    s = float(mix.decode_step_at_s(rate_rps))
    rho = rate_rps * mix.prefill_compute_s
    busy = min(rate_rps * mix.prefill_s, 1.0 - 1e-12)
    mean_wait = max(float(mix.engine_ttft_s(rate_rps)) - mix.prefill_s, 0.0) / (1.0 + 2.0 * rho)
    theta = max(mean_wait - (1.0 - busy) * s / 2.0, 0.0) / busy if busy > 0 else 0.0
    return busy, s, theta, rho


def ttft_cdf(mix: MixModel, j: int, rate_rps: float, ttft_s: np.ndarray) -> np.ndarray:
    """``P(TTFT <= x)`` for requests of class j at total load λ, at each x of ``ttft_s`` [-] (see module doc)."""
    return _ttft_cdf(mix, j, ttft_s, residual_wait(mix, rate_rps))


def _ttft_cdf(mix: MixModel, j: int, ttft_s: np.ndarray, wait: tuple[float, float, float, float]) -> np.ndarray:
    x = np.asarray(ttft_s, float)[:, None] - mix.request_latency_s  # the engine's TTFT: L is a pure delay
    rows = mix.class_rows(j)
    busy, s, theta, rho = wait
    r = np.maximum(x - mix.shape_prefill_s[rows], 0.0) / (1.0 + 2.0 * rho)
    with np.errstate(divide="ignore", invalid="ignore"):
        decode = np.where(s > 0, np.minimum(r / s, 1.0), 1.0)
        prefill = np.where(theta > 0, 1.0 - np.exp(-r / theta), 1.0)
    cdf = np.where(x >= mix.shape_prefill_s[rows], (1.0 - busy) * decode + busy * prefill, 0.0)
    return cdf @ _within(mix, rows)


def _quantile(cdf, lo: float, hi: float, p: float, points: int = 400) -> float:
    """Smallest x in [lo, hi] with ``cdf(x) >= p``: a geometric grid, then bisection inside the first step up."""
    if not hi > lo or not math.isfinite(hi):
        return math.inf
    grid = lo + (hi - lo) * (np.geomspace(1.0, 1e4, points) - 1.0) / (1e4 - 1.0)
    values = cdf(grid)
    above = np.flatnonzero(values >= p)
    if not len(above):
        return math.inf
    i = int(above[0])
    if i == 0:
        return float(grid[0])
    a, b = float(grid[i - 1]), float(grid[i])
    for _ in range(40):
        mid = 0.5 * (a + b)
        if cdf(np.array([mid]))[0] >= p:
            b = mid
        else:
            a = mid
    return b


def _quantile_at_load(mix: MixModel, rate_rps: float, p: float, cdf, lo, mean_s) -> float:
    """The p-quantile of a latency whose CDF at load λ is ``cdf`` [s], searched on ``[lo(), lo() + 200 mean_s()]``
    (callables: evaluated only below the ceiling); inf at or past the ceiling or where the mean is infinite."""
    if not 0 <= rate_rps < mix.ceiling_rps:
        return math.inf
    mean = float(mean_s())
    if not math.isfinite(mean):
        return math.inf
    low = lo()
    return _quantile(cdf, low, low + 200.0 * mean, p)


def tpot_quantile_s(mix: MixModel, j: int, rate_rps: float, p: float) -> float:
    """The p-quantile (p in (0, 1)) of class j's TPOT at total load λ [s]; inf at or past the ceiling."""
    if not 0 <= rate_rps < mix.ceiling_rps:
        return math.inf
    state = _tpot_state(mix, rate_rps)
    return _quantile_at_load(mix, rate_rps, p, lambda q: _tpot_cdf(mix, j, rate_rps, q, state),
                             lambda: 0.5 * float(mix.decode_step_at_s(rate_rps)), lambda: mix.tpot_s(rate_rps))


def ttft_quantile_s(mix: MixModel, j: int, rate_rps: float, p: float) -> float:
    """The p-quantile (p in (0, 1)) of class j's TTFT at total load λ [s]; inf at or past the ceiling."""
    if not 0 <= rate_rps < mix.ceiling_rps:
        return math.inf
    wait = residual_wait(mix, rate_rps)
    return _quantile_at_load(mix, rate_rps, p, lambda x: _ttft_cdf(mix, j, x, wait),
                             lambda: float(mix.shape_prefill_s[mix.class_rows(j)].min()) + mix.request_latency_s,
                             lambda: mix.ttft_s(rate_rps))


def class_latency(mix: MixModel, j: int, rate_rps: float, quantiles: tuple[float, ...] = QUANTILES) -> dict:
    """Mean and quantiles of class j's TTFT and TPOT at total load λ [s]: keys ``mean_ttft_s``, ``p99_tpot_s``..."""
    out: dict[str, float] = {"mean_ttft_s": float(mix.class_ttft_s(j, rate_rps)),
                             "mean_tpot_s": float(mix.tpot_s(rate_rps))}
    for p in quantiles:
        label = f"p{100 * p:g}"
        out[f"{label}_ttft_s"] = ttft_quantile_s(mix, j, rate_rps, p)
        out[f"{label}_tpot_s"] = tpot_quantile_s(mix, j, rate_rps, p)
    return out


def keeps_promise(mix: MixModel, j: int, rate_rps: float) -> bool:
    """Whether class j's promises hold at total load λ: at its percentile, or on the mean if it names none."""
    c = mix.classes[j]
    if c.percentile is None:
        return rate_rps <= mix.mean_goodput_rps(j)
    p = c.percentile / 100.0
    if c.tpot_s is not None and not tpot_quantile_s(mix, j, rate_rps, p) <= c.tpot_s:
        return False
    return c.ttft_s is None or ttft_quantile_s(mix, j, rate_rps, p) <= c.ttft_s


def percentile_goodput_rps(mix: MixModel, j: int | None = None, iterations: int = 40) -> float:
    """Largest total load [requests/s] at which class j keeps its promises at its percentile (all if None).

    The essays' goodput: the load at which the promised share of requests meets the promise. Quantiles rise
    with the load, so bisection on [0, ceiling) finds it (2^-40 of the ceiling). A class without a percentile
    takes the mean-based bound (``MixModel.mean_goodput_rps``); a class without promises, the ceiling.
    """
    if j is None:
        return min(percentile_goodput_rps(mix, k, iterations) for k in range(len(mix.classes)))
    c = mix.classes[j]
    if c.percentile is None:
        return mix.mean_goodput_rps(j)
    if c.tpot_s is None and c.ttft_s is None:
        return mix.ceiling_rps
    lo, hi = 0.0, mix.ceiling_rps
    if not keeps_promise(mix, j, 0.0):
        return 0.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if keeps_promise(mix, j, mid) else (lo, mid)
    return lo


def sizing(scenario: Any) -> pd.DataFrame:
    """One row per class and one for the whole mix: shares, promises, percentile and mean-based goodput.

    Columns: ``class``, ``share``, ``tpot_promise_s``, ``ttft_promise_s``, ``percentile``,
    ``goodput_rps`` (at the class's percentile, the essays' definition), ``mean_goodput_rps`` (the same
    promises on the mean, the single-shape model's ``goodput_rps``), ``ceiling_rps``, and at the mix's
    goodput the class's p50/p99 TTFT and TPOT [s] and its arrivals ``class_rps``.
    """
    mix = mix_model(scenario)
    overall = percentile_goodput_rps(mix)
    rows = []
    for j, c in enumerate(mix.classes):
        at = class_latency(mix, j, overall, (0.5, 0.99)) if overall > 0 else {}
        rows.append({"class": c.name, "share": c.share, "tpot_promise_s": c.tpot_s, "ttft_promise_s": c.ttft_s,
                     "percentile": c.percentile, "goodput_rps": percentile_goodput_rps(mix, j),
                     "mean_goodput_rps": mix.mean_goodput_rps(j), "ceiling_rps": mix.ceiling_rps,
                     "class_rps": overall * c.share, **at})
    rows.append({"class": "all", "share": 1.0, "goodput_rps": overall, "mean_goodput_rps": mix.mean_goodput_rps(),
                 "ceiling_rps": mix.ceiling_rps, "class_rps": overall})
    return pd.DataFrame(rows)


def sized_per_class(scenario: Any) -> bool:
    """Whether a scenario asks for the per-class sizing: it lists ``workloads:`` classes or names a percentile."""
    raw = scenario.raw or {}
    return raw.get("workloads") is not None or scenario.slo.percentile is not None


__all__ = ["QUANTILES", "class_latency", "keeps_promise", "percentile_goodput_rps", "sizing", "tpot_cdf",
           "residual_wait", "sized_per_class", "tpot_quantile_s", "ttft_cdf", "ttft_quantile_s"]
