"""Latency promises: TPOT and TTFT at a load, the goodput that keeps them, and cost.

The load model (essay 001, "Part 3: the promise to users"): at arrival rate λ
[requests/s] prefills take a share ``λ t_p`` of the GPU, decode gets the rest, and
by Little's law the decode batch is ``B = λ A TPOT``. So

    TPOT(λ) = t_step(B) / (1 - λ t_p),   t_step(B) = max(a_mem + m_mem B, a_comp + m_comp B)

with ``a_mem = W/BW + o``, ``m_mem = c kv/BW``, ``a_comp = o``, ``m_comp = 2N/F``.
Each piece is linear in λ, so the promise ``TPOT(λ) <= T`` solves in closed form:

    λ <= (T - a_i) / (T t_p + m_i A T)   for both pieces i

The batch limit ``B <= B_max`` is met exactly up to ``ceiling_rps``, where the
self-consistent batch reaches B_max. Goodput is the smallest of those bounds and
the TTFT bound; no grid, no iteration. All functions take scalars or numpy arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def _f(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=float)


def step_pieces(weight_bytes: ArrayLike, context_tokens: ArrayLike, kv_bytes_per_token: ArrayLike,
                bandwidth: ArrayLike, params: ArrayLike, flops: ArrayLike,
                step_overhead_s: ArrayLike) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Intercept [s] and slope [s per sequence] of the memory and compute pieces of a dense ``t_step(B)``.

    ``a_mem = W/BW + o``, ``m_mem = c kv/BW``, ``a_comp = o``, ``m_comp = 2N/F`` (per-GPU figures).
    """
    o = _f(step_overhead_s)
    memory = (_f(weight_bytes) / _f(bandwidth) + o, _f(context_tokens) * _f(kv_bytes_per_token) / _f(bandwidth))
    compute = (o + 0.0 * memory[0], 2.0 * _f(params) / _f(flops) + 0.0 * memory[1])
    return memory, compute


def tpot_at_rate_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                   pieces: tuple) -> np.ndarray:
    """TPOT at load λ, the smallest fixed point of ``TPOT = t_step(λ A TPOT) / (1 - λ t_p)`` [s].

    ``max_i a_i / (1 - λ t_p - λ A m_i)``; infinite when a denominator is <= 0 (decode cannot keep up).
    """
    lam, tp, a_tokens = _f(arrival_rate), _f(prefill_s), _f(output_tokens)
    worst = np.zeros(np.broadcast(lam, tp, a_tokens, *pieces[0]).shape)
    for a, m in pieces:
        denominator = 1.0 - lam * tp - lam * a_tokens * m
        with np.errstate(divide="ignore", invalid="ignore"):
            worst = np.maximum(worst, np.where(denominator > 0, a / denominator, np.inf))
    return worst


def max_rate_for_tpot_rps(tpot_slo_s: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                          pieces: tuple) -> np.ndarray:
    """Largest λ with ``TPOT(λ) <= T``: ``min_i (T - a_i) / (T t_p + m_i A T)``, at least 0 [requests/s].

    Infinite when there is no TPOT promise (T = inf). Excel: ``=MAX(0,MIN((T-a1)/(T*tp+m1*A*T),(T-a2)/(...)))``.
    Essay 001: (50 - 11) ms / (50 ms * 109.7 ms + 75.4 us * 300 * 50 ms) = 5.9 requests/s.
    """
    t, tp, a_tokens = _f(tpot_slo_s), _f(prefill_s), _f(output_tokens)
    best = np.full(np.broadcast(t, tp, a_tokens, *pieces[0]).shape, np.inf)
    finite_t = np.where(np.isfinite(t), t, 1.0)
    for a, m in pieces:
        best = np.minimum(best, (finite_t - a) / (finite_t * tp + m * a_tokens * finite_t))
    return np.where(np.isfinite(t), np.maximum(best, 0.0), np.inf)


def _bisect(ok, lo: np.ndarray, hi: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Largest x in [lo, hi] with ``ok(x)`` for a condition true below a threshold and false above it."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        good = ok(mid)
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    return lo


def max_rate_for_tpot_general(step_s, tpot_slo_s: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                              ceiling_rps: ArrayLike) -> np.ndarray:
    """Largest λ with ``step_s(λ A T) <= T (1 - λ t_p)`` for any step time increasing in the batch [requests/s].

    The left side rises and the right side falls with λ, so the condition holds on [0, λ*]; bisection
    finds λ* to machine precision. Used where MoE makes the weight read concave in the batch.
    """
    t, tp, a = _f(tpot_slo_s), _f(prefill_s), _f(output_tokens)
    finite_t = np.where(np.isfinite(t), t, 1.0)

    def ok(lam):
        return step_s(lam * a * finite_t) <= finite_t * (1.0 - lam * tp)

    hi = np.minimum(1.0 / tp, np.maximum(_f(ceiling_rps), 0.0) * 2.0 + 1e-9)
    zero = np.zeros(np.broadcast(t, tp, a, hi).shape)
    rate = np.where(ok(zero), _bisect(ok, zero, hi + zero), 0.0)
    return np.where(np.isfinite(t), rate, np.inf)


def tpot_at_rate_general(step_s, arrival_rate: ArrayLike, prefill_s: ArrayLike,
                         output_tokens: ArrayLike, longest_s: float = 1e4) -> np.ndarray:
    """Smallest fixed point of ``TPOT (1 - λ t_p) = step_s(λ A TPOT)`` by bisection [s]; inf if none below 10^4 s.

    For a step time concave or linear in the batch, ``step_s(λ A s) <= s (1 - λ t_p)`` holds exactly from the
    fixed point upward, so the condition is monotone in s.
    """
    lam, tp, a = _f(arrival_rate), _f(prefill_s), _f(output_tokens)
    lam = np.where(np.isfinite(lam), lam, 0.0)
    share = 1.0 - lam * tp

    def ok(s):
        return step_s(lam * a * s) <= s * share

    shape = np.broadcast(lam, tp, a).shape
    top = np.full(shape, longest_s)
    found = ok(top) & (share > 0)
    lowest_bad = _bisect(lambda s: ~ok(s), np.zeros(shape), top)
    return np.where(found & np.isfinite(_f(arrival_rate)), lowest_bad, np.inf)


def ttft_at_rate_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike) -> np.ndarray:
    """TTFT at load λ: prefill plus an M/D/1 queue wait, ``t_p + t_p ρ / (2 (1 - ρ))`` with ``ρ = λ / ceiling`` [s].

    An approximation: requests wait for prefills queued ahead of them, and the queue
    diverges where the GPU runs out of capacity (the ceiling). Infinite at ρ >= 1.
    """
    tp = _f(prefill_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(_f(ceiling_rps) > 0, _f(arrival_rate) / _f(ceiling_rps), np.inf)
        wait = np.where(rho < 1.0, tp * rho / (2.0 * (1.0 - rho)), np.inf)
    return tp + wait


def max_rate_for_ttft_rps(ttft_slo_s: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike) -> np.ndarray:
    """Largest λ with ``TTFT(λ) <= D``: ``ceiling * 2r / (1 + 2r)``, ``r = (D - t_p) / t_p`` [requests/s].

    0 when the prefill alone exceeds D; infinite when there is no TTFT promise.
    Excel: ``=IF(D<tp,0,ceiling*2*(D-tp)/tp/(1+2*(D-tp)/tp))``.
    """
    d, tp, ceiling = _f(ttft_slo_s), _f(prefill_s), _f(ceiling_rps)
    finite_d = np.where(np.isfinite(d), d, 0.0)
    r = np.maximum(finite_d - tp, 0.0) / tp
    return np.where(np.isfinite(d), ceiling * 2.0 * r / (1.0 + 2.0 * r), np.inf)


def goodput_rps(ceiling_rps: ArrayLike, max_rate_for_tpot_rps: ArrayLike,
                max_rate_for_ttft_rps: ArrayLike) -> np.ndarray:
    """Largest load meeting every promise and the batch limit: ``min(ceiling, λ_TPOT, λ_TTFT)`` [requests/s].

    Essay 001: min(6.9, 5.9, no TTFT promise) = 5.9 requests/s.
    """
    return np.maximum(np.minimum(_f(ceiling_rps), np.minimum(_f(max_rate_for_tpot_rps), _f(max_rate_for_ttft_rps))),
                      0.0)


def in_flight(arrival_rate: ArrayLike, output_tokens: ArrayLike, tpot_s: ArrayLike) -> np.ndarray:
    """Conversations decoding at once by Little's law: ``λ A TPOT(λ)`` [requests]. Essay 001: 5.9 * 300 * 50 ms = 88."""
    with np.errstate(invalid="ignore"):
        return np.where(_f(arrival_rate) > 0, _f(arrival_rate) * _f(output_tokens) * _f(tpot_s), 0.0)


def cost_per_million_tokens(price_per_hour: ArrayLike, gpus: ArrayLike, rate_rps: ArrayLike,
                            output_tokens: ArrayLike) -> np.ndarray:
    """Cost of a million output tokens: ``price_per_hour * gpus / (λ A 3600) * 1e6`` [currency].

    Infinite when the rate is 0. Essay 001 at $2/h and 5.9 requests/s of 300 tokens: $0.31.
    Excel: ``=price_per_hour*gpu_count/(goodput_rps*output_tokens*3600)*1e6``.
    """
    tokens_per_hour = _f(rate_rps) * _f(output_tokens) * 3600.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tokens_per_hour > 0, _f(price_per_hour) * _f(gpus) / tokens_per_hour * 1e6, np.inf)
