"""Row-wise root finding for the promises: the largest load whose latency keeps a target, one row at a time.

``largest_rate_meeting`` takes a latency that rises with the load and a target per row, settles the rows
whose answer is an end of the range, and solves the rest on compacted arrays with Chandrupatla's method
(inverse quadratic interpolation inside a bracket that always holds the root, bisection when the last three
points do not allow it; T. R. Chandrupatla, Advances in Engineering Software 28, 1997, 145-149). About
six to ten evaluations a row reach 2.5e-13 relative; the answer is the bracket end that keeps the promise.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._numeric import as_float as _f


def largest_rate_meeting(latency, target: ArrayLike, hi: ArrayLike, args: tuple, bracket=None,
                         ratio: bool = True, rtol: float = 2.5e-13) -> np.ndarray:
    """Largest λ in [0, hi] with ``latency(λ, *args) <= target``, for a latency that rises with λ [requests/s].

    Rows without a target (inf) get ``hi``; rows whose latency at ``hi`` meets the target get ``hi``; rows
    whose latency at 0 misses it get 0; the others are solved on compacted arrays (``solve_rising``).
    Every argument broadcasts together. ``bracket(target, *args)``, when given, returns bounds
    ``(lo, up)`` with ``latency(lo) <= target <= latency(up)`` that narrow the search. With ``ratio`` the
    root solved is that of ``1 - target / latency`` (latencies > 0): the same root, but a queue's pole at
    full load becomes a finite value, which interpolation handles far better; else ``latency - target``.
    ``rtol``: how close to the exact bound the answer is (relative).
    """
    target, hi = _f(target), _f(hi)
    shape = np.broadcast_shapes(target.shape, hi.shape, *(np.shape(a) for a in args))
    rate = np.array(np.broadcast_to(hi, shape), dtype=float).reshape(-1)
    goal = np.broadcast_to(target, shape).reshape(-1)
    finite = np.isfinite(goal)
    rows = slice(None) if finite.all() else np.flatnonzero(finite)
    if finite.any():
        flat = tuple(np.broadcast_to(_f(a), shape).reshape(-1)[rows] for a in args)
        top, want = rate[rows], goal[rows]

        def excess(lam, idx):
            value = latency(lam, *flat) if idx is None else latency(lam, *(a[idx] for a in flat))
            goal = want if idx is None else want[idx]
            if ratio:
                with np.errstate(divide="ignore", invalid="ignore"):
                    return 1.0 - goal / value
            return value - goal

        lo = None
        if bracket is not None:
            lo, up = bracket(want, *flat)
            lo, top = np.minimum(lo, top), np.minimum(up, top)
        rate[rows] = solve_rising(excess, top, lo, rtol=rtol)
    return rate.reshape(shape)


def solve_rising(excess, hi: np.ndarray, lo: np.ndarray | None = None, rtol: float = 2.5e-13,
                  iterations: int = 100) -> np.ndarray:
    """Largest x in [lo, hi] with ``excess(x, rows) <= 0`` for a continuous excess rising in x (one per row).

    Chandrupatla's method (1997; inverse quadratic interpolation when the last three points allow it,
    bisection otherwise), on the rows not yet converged, keeping a bracket ``x1, x2`` around the root.
    The answer is the bracket end with ``excess <= 0`` once the bracket is narrower than ``rtol x``, so the
    promise is always kept and the answer is within ``rtol`` of the exact bound. ``excess(x, rows)``
    evaluates the rows ``rows`` (None: all) at points ``x``; ``lo`` (default 0) starts the search from below.
    """
    big = np.finfo(float).max
    f_hi = excess(hi, None)
    out = np.where(f_hi <= 0, hi, 0.0)
    active = np.flatnonzero(~(f_hi <= 0))
    start = np.zeros(active.size) if lo is None else lo[active]
    f_lo = excess(start, active)
    missed = f_lo > 0  # a lower bound that is not one (rounding): start from 0 there
    if lo is not None and missed.any():
        start[missed] = 0.0
        f_lo[missed] = excess(start[missed], active[missed])
    keep = f_lo <= 0
    active = active[keep]
    x1, f1 = start[keep], f_lo[keep]
    x2, f2 = hi[active].copy(), np.minimum(f_hi[active], big)
    x3, f3 = x2.copy(), f2.copy()
    t = np.full(active.size, 0.5)
    for _ in range(iterations):
        if active.size == 0:
            break
        x = x1 + t * (x2 - x1)
        fx = np.minimum(excess(x, active), big)
        same = (fx <= 0) == (f1 <= 0)
        x3, f3 = np.where(same, x1, x2), np.where(same, f1, f2)
        x2, f2 = np.where(same, x2, x1), np.where(same, f2, f1)
        x1, f1 = x, fx
        width = np.abs(x2 - x1)
        tol = rtol * np.maximum(x1, x2)
        done = (width <= tol) | (fx == 0)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            xi, phi = (x1 - x2) / (x3 - x2), (f1 - f2) / (f3 - f2)
            quadratic = (1.0 - np.sqrt(1.0 - xi) < phi) & (phi < np.sqrt(xi))
            t_quadratic = f1 / (f2 - f1) * f3 / (f2 - f3) + (x3 - x1) / (x2 - x1) * f1 / (f3 - f1) * f2 / (f3 - f2)
            least = 0.5 * tol / width
            t = np.clip(np.where(quadratic, t_quadratic, 0.5), least, 1.0 - least)
        t = np.where(np.isfinite(t), t, 0.5)
        if done.any():
            kept = np.where(fx == 0, x1, np.where(f1 <= 0, x1, x2))
            out[active[done]] = kept[done]
            keep = ~done
            active, x1, f1, x2, f2, x3, f3, t = (v[keep] for v in (active, x1, f1, x2, f2, x3, f3, t))
    out[active] = np.where(f1 <= 0, x1, x2)
    return out


__all__ = ["largest_rate_meeting", "solve_rising"]
