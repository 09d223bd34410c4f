"""Row-wise root finding for the promises: the largest load whose latency keeps a target, one row at a time.

``largest_rate_meeting`` takes a latency that rises with the load and a target per row, settles the rows
whose answer is an end of the range, and solves the rest on compacted arrays with Chandrupatla's method
(inverse quadratic interpolation inside a bracket that always holds the root, bisection when the last three
points do not allow it; T. R. Chandrupatla, Advances in Engineering Software 28, 1997, 145-149). About
six to ten evaluations a row reach 2.5e-13 relative; the answer is the bracket end that keeps the promise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import one_value_or, select

#: Iterations ``solve_rising`` runs at most per row.
MAX_ITERATIONS = 100
#: Relative width of the bracket at which a solve stops (the answer is within it of the exact bound).
RTOL = 2.5e-13

#: The state of Chandrupatla's method after an iteration, as a trace records it.
STATE = ("x1", "f1", "x2", "f2", "x3", "f3", "t", "done")


@dataclass
class SolveTrace:
    """Every value one solve of one row took (``largest_rate_meeting(..., trace=SolveTrace())``), for a reader
    that shows the iterations (the XLSX Solver sheet). Times and rates in the solve's own unit.

    ``hi``: the upper end given; ``bracket``: the bracket function's values (``lo``, ``up`` and, where it returns
    them, the terms behind them); ``top``, ``bottom``: the search range; ``no_target``: no search (no target, the
    answer is ``hi``); ``ends``: excess at ``top``, ``bottom`` and (bracketed) 0, evaluated also where the answer
    needs none (label -> ``x``, ``f``); ``start``: the state before the first iteration; ``steps``: per iteration
    the point ``x``, its excess ``f`` and the state after it (``STATE``); ``answer``: what the solve returned.
    """

    hi: float = np.nan
    bracket: dict[str, float] = field(default_factory=dict)
    top: float = np.nan
    bottom: float = 0.0
    no_target: bool = False
    ends: dict[str, dict[str, float]] = field(default_factory=dict)
    start: dict[str, float] = field(default_factory=dict)
    steps: list[dict[str, float]] = field(default_factory=list)
    answer: float = np.nan


def largest_rate_meeting(latency, target: ArrayLike, hi: ArrayLike, args: tuple, bracket=None,
                         ratio: bool = True, rtol: float = RTOL, trace: SolveTrace | None = None,
                         latency_at_hi: ArrayLike | None = None) -> np.ndarray:
    """Largest λ in [0, hi] with ``latency(λ, *args) <= target``, for a latency that rises with λ [requests/s].

    Rows without a target (inf) get ``hi``; rows whose latency at ``hi`` meets the target get ``hi``; rows
    whose latency at 0 misses it get 0; the others are solved on compacted arrays (``solve_rising``).
    Every argument broadcasts together. ``bracket(target, *args)``, when given, returns bounds
    ``(lo, up)`` with ``latency(lo) <= target <= latency(up)`` that narrow the search. With ``ratio`` the
    root solved is that of ``1 - target / latency`` (latencies > 0): the same root, but a queue's pole at
    full load becomes a finite value, which interpolation handles far better; else ``latency - target``.
    ``rtol``: how close to the exact bound the answer is (relative). ``trace`` (one row only): filled with every
    value the solve takes (``SolveTrace``). ``bracket`` may return a third value, a dict of the terms behind its
    bounds, for the trace. ``latency_at_hi`` (no ``bracket``): ``latency(hi, *args)`` where the caller has it
    already (the same numbers), so the solve does not evaluate it again.
    """
    if latency_at_hi is not None and bracket is not None:
        raise ValueError("largest_rate_meeting: latency_at_hi is the latency at hi, not at a bracket's end; give one")
    target, hi = _f(target), _f(hi)
    shape = np.broadcast_shapes(target.shape, hi.shape, *(np.shape(a) for a in args))
    rate = np.array(np.broadcast_to(hi, shape), dtype=float).reshape(-1)
    goal = np.broadcast_to(target, shape).reshape(-1)
    finite = np.isfinite(goal)
    every = bool(finite.all())
    if every or finite.any():
        rows = slice(None) if every else np.flatnonzero(finite)
        # Per-row arguments as flat arrays of the searched rows (one value for all rows stays a scalar): the solver
        # compacts them with its state, so an evaluation touches only the rows still searching.
        flat = tuple(_per_row(a, shape, rows) for a in args)
        top, want = rate[rows], goal[rows]

        def over(value, goal):
            if ratio:
                with np.errstate(divide="ignore", invalid="ignore"):
                    return 1.0 - goal / value
            return value - goal

        def excess(lam, goal, *values):
            return over(latency(lam, *values), goal)

        lo = None
        if bracket is not None:
            lo, up, *parts = bracket(want, *flat)
            if trace is not None:
                trace.bracket = {k: _one(v) for k, v in (parts[0] if parts else {"lo": lo, "up": up}).items()}
            lo, top = np.minimum(lo, top), np.minimum(up, top)
        if trace is not None:
            trace.top, trace.bottom = _one(top), _one(lo) if lo is not None else 0.0
        f_top = None
        if latency_at_hi is not None:
            f_top = over(np.broadcast_to(_f(latency_at_hi), shape).reshape(-1)[rows], want)
        rate[rows] = solve_rising(excess, top, lo, rtol=rtol, trace=trace, args=(want, *flat), f_hi=f_top)
    if trace is not None:
        trace.hi, trace.no_target, trace.answer = _one(hi), not every, _one(rate)
        if trace.no_target:
            trace.top, trace.bottom = trace.hi, 0.0
    return rate.reshape(shape)


def _per_row(a: ArrayLike, shape: tuple[int, ...], rows: slice | np.ndarray) -> np.ndarray:
    """``a`` broadcast to ``shape``, flattened, at ``rows``; a scalar, or an array holding one value (bit for bit) in
    every row, becomes a zero-dimensional array: the solver neither gathers nor computes it row by row, and the
    arithmetic is the same."""
    a = _f(a)
    if a.ndim == 0:
        return a
    flat = a.reshape(-1) if a.shape == shape else np.broadcast_to(a, shape).reshape(-1)
    return one_value_or(flat[rows])


def _one(x: ArrayLike) -> float:
    """The single value of a traced solve's array."""
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def solve_rising(excess, hi: np.ndarray, lo: np.ndarray | None = None, rtol: float = RTOL,
                 iterations: int = MAX_ITERATIONS, trace: SolveTrace | None = None,
                 args: tuple | None = None, f_hi: np.ndarray | None = None) -> np.ndarray:
    """Largest x in [lo, hi] with ``excess(x, rows) <= 0`` for a continuous excess rising in x (one per row).

    Chandrupatla's method (1997; inverse quadratic interpolation when the last three points allow it,
    bisection otherwise), on the rows not yet converged, keeping a bracket ``x1, x2`` around the root.
    The answer is the bracket end with ``excess <= 0`` once the bracket is narrower than ``rtol x``, so the
    promise is always kept and the answer is within ``rtol`` of the exact bound. ``excess(x, rows)``
    evaluates the rows ``rows`` (None: all) at points ``x``; ``lo`` (default 0) starts the search from below.
    With ``args`` (per-row arrays, or zero-dimensional ones for all rows) ``excess(x, *args)`` is called instead
    with the args of the rows evaluated, compacted with the solver's state as rows converge (no gather per call).
    ``trace`` (one row): the ends, the start and every iteration (``SolveTrace``). ``f_hi``: ``excess`` at ``hi``
    where the caller has it (the same numbers; not evaluated again).
    """
    big = np.finfo(float).max
    if args is None:
        def at(x, rows, values):
            return excess(x, rows)
    else:
        def at(x, rows, values):
            return excess(x, *values)
        args = tuple(_f(a) for a in args)
    if f_hi is None:
        f_hi = at(hi, None, args)
    below = f_hi <= 0
    out = select(below, hi, 0.0)
    active = np.flatnonzero(~below)
    values = None if args is None else _take(args, active)
    start = np.zeros(active.size) if lo is None else lo[active]
    f_lo = at(start, active, values)
    missed = f_lo > 0  # a lower bound that is not one (rounding): start from 0 there
    if lo is not None and missed.any():
        start[missed] = 0.0
        f_lo[missed] = at(start[missed], active[missed], None if values is None else _take(values, missed))
    keep = f_lo <= 0
    if trace is not None:
        _trace_start(trace, lambda x, rows: at(x, rows, None if args is None else _take(args, rows)), hi, lo, f_hi,
                     start, f_lo, missed, big)
    if not keep.all():
        active = active[keep]
        values = None if values is None else _take(values, keep)
        x1, f1 = start[keep], f_lo[keep]
    else:
        x1, f1 = start, f_lo
    x2, f2 = hi[active], np.minimum(f_hi[active], big)
    x3, f3 = x2, f2
    t = np.full(active.size, 0.5)
    # The iteration keeps what the next one reuses (the same numbers, fewer passes): ``diff = x2 - x1`` (the bracket's
    # width with its sign: the next point, the width and the step's terms) and ``low = f1 <= 0``.
    diff = x2 - x1
    low = f1 <= 0
    live, dead = None, 0  # rows still searching among those iterated (None: all), and how many are not
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for _ in range(iterations):
            if active.size == 0:
                break
            diff *= t
            x = np.add(x1, diff, out=diff)  # x1 + t (x2 - x1)
            fx = np.minimum(at(x, active, values), big)
            low_x = fx <= 0
            same = np.equal(low_x, low)
            x3, x2 = _pick(same, x1, x2)
            f3, f2 = _pick(same, f1, f2)
            x1, f1, low = x, fx, low_x
            diff = np.subtract(x2, x1)
            width = np.abs(diff)
            tol = rtol * np.maximum(x1, x2)
            done = (width <= tol) | (fx == 0)
            if trace is not None:
                step = _next_t(x1, f1, x2, f2, x3, f3, tol, width)
                trace.steps.append({"x": float(x[0]), "f": float(fx[0]), **dict(zip(STATE, (
                    float(x1[0]), float(f1[0]), float(x2[0]), float(f2[0]), float(x3[0]), float(f3[0]),
                    float(step[0]), bool(done[0])), strict=True))})
            if live is not None:
                done &= live
            if done.any():
                ended = np.flatnonzero(done)
                out[active[ended]] = select((fx[ended] == 0) | low[ended], x1[ended], x2[ended])
                live = ~done if live is None else live & ~done
                dead += ended.size
                if dead == active.size:
                    break
                # Finished rows are dropped (the state and the args compacted) once they are a quarter of the
                # rows iterated: until then they iterate along, ignored, which costs less than compacting each time.
                if dead * COMPACT_SHARE >= active.size:
                    # Gathered by index: a boolean mask as scattered as converged rows is several times slower.
                    kept = np.flatnonzero(live)
                    active, x1, f1, x2, f2, x3, f3, tol, width, diff, low = (
                        v.take(kept) for v in (active, x1, f1, x2, f2, x3, f3, tol, width, diff, low))
                    values = None if values is None else _take(values, kept)
                    live, dead = None, 0
            t = _next_t(x1, f1, x2, f2, x3, f3, tol, width, diff)
        else:
            rest = slice(None) if live is None else live
            out[active[rest]] = select(f1[rest] <= 0, x1[rest], x2[rest])
    return out


def _pick(same: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(where(same, a, b), where(same, b, a))`` (``same`` bool): the bits selected by xor, ``b ^ ((a ^ b) * same)``,
    exact, and several times faster than ``np.where`` on a mask as scattered as this."""
    ai, bi = a.view(np.int64), b.view(np.int64)
    d = np.bitwise_xor(ai, bi)
    np.multiply(d, same, out=d)
    return np.bitwise_xor(d, bi).view(np.float64), np.bitwise_xor(d, ai, out=d).view(np.float64)


#: Finished rows are compacted away once they are at least this share (1 / COMPACT_SHARE) of the rows iterated.
COMPACT_SHARE = 4


def _next_t(x1: np.ndarray, f1: np.ndarray, x2: np.ndarray, f2: np.ndarray, x3: np.ndarray, f3: np.ndarray,
            tol: np.ndarray, width: np.ndarray, diff: np.ndarray | None = None) -> np.ndarray:
    """Chandrupatla's next step as a share of the bracket ``x1 -> x2``: inverse quadratic interpolation through
    the last three points where they allow it, else 0.5 (bisection), at least ``tol / 2`` from either end.
    ``diff``: ``x2 - x1`` where the caller has it (the same numbers)."""
    # In the order of the formulas (same bits): xi = (x1 - x2) / (x3 - x2), phi = (f1 - f2) / (f3 - f2),
    # quadratic where 1 - sqrt(1 - xi) < phi < sqrt(xi), and there
    # t = f1 / (f2 - f1) * f3 / (f2 - f3) + (x3 - x1) / (x2 - x1) * f1 / (f3 - f1) * f2 / (f3 - f2).
    # Negating both sides of a quotient gives the same number (IEEE division is sign-symmetric), so the differences
    # are taken once: xi = (x2 - x1) / (x2 - x3), phi = (f2 - f1) / (f2 - f3), and the last quotient is subtracted as
    # ``... * f2 / (f2 - f3)``. Where the quadratic test fails (a zero difference among them) t is 1/2 whatever
    # those quotients are; where it holds every difference is nonzero.
    if diff is None:
        diff = np.subtract(x2, x1)
    xi, rise, fall = np.subtract(x2, x3), np.subtract(f2, f1), np.subtract(f2, f3)
    np.divide(diff, xi, out=xi)
    phi = np.divide(rise, fall)
    tmp = np.subtract(1.0, xi)
    np.sqrt(tmp, out=tmp)
    np.subtract(1.0, tmp, out=tmp)
    quadratic = tmp < phi
    np.sqrt(xi, out=xi)
    quadratic &= phi < xi
    t = np.divide(f1, rise, out=rise)
    t *= f3
    t /= fall
    second = np.subtract(x3, x1, out=xi)
    second /= diff
    second *= f1
    np.subtract(f3, f1, out=tmp)
    second /= tmp
    second *= f2
    second /= fall
    t -= second
    # t where quadratic, else 0.5 (bisection): bits selected by xor, exact and faster than np.where on this mask
    bits = t.view(np.int64)
    np.bitwise_xor(bits, _HALF_BITS, out=bits)
    np.multiply(bits, quadratic, out=bits)
    np.bitwise_xor(bits, _HALF_BITS, out=bits)
    least = np.multiply(0.5, tol, out=tmp)
    least /= width
    # clip(t, least, 1 - least) as maximum then minimum: the same values (NaN kept), in half the time of np.clip
    np.maximum(t, least, out=t)
    np.minimum(t, np.subtract(1.0, least, out=least), out=t)
    usable = np.isfinite(t)
    if not usable.all():
        t[~usable] = 0.5
    return t


#: The bits of 0.5 (float64), for the bitwise select in ``_next_t``.
_HALF_BITS = np.array(0.5).view(np.int64)


def _take(values: tuple, rows: np.ndarray) -> tuple:
    """The per-row arrays of ``values`` at ``rows`` (indices or a mask); zero-dimensional ones (all rows) unchanged."""
    if isinstance(rows, np.ndarray) and rows.dtype == bool:
        rows = np.flatnonzero(rows)
    return tuple(v if v.ndim == 0 else v.take(rows) for v in values)


def _trace_start(trace: SolveTrace, excess, hi: np.ndarray, lo: np.ndarray | None, f_hi: np.ndarray,
                 start: np.ndarray, f_lo: np.ndarray, missed: np.ndarray, big: float) -> None:
    """The ends and the state before the first iteration of a one-row solve; the ends the answer needs no
    excess at are evaluated here, for the reader."""
    row = np.zeros(1, dtype=np.intp)
    bottom = np.zeros(1) if lo is None else np.asarray(lo, float).reshape(-1)[:1]
    f_top = float(f_hi[0])
    f_bottom = float(excess(bottom, row)[0])
    trace.ends = {"at top": {"x": float(hi[0]), "f": f_top}, "at bottom": {"x": float(bottom[0]), "f": f_bottom}}
    if lo is not None:
        trace.ends["at 0"] = {"x": 0.0, "f": float(excess(np.zeros(1), row)[0])}
    searched = f_lo.size > 0
    x1 = float(start[0]) if searched else float(bottom[0])
    f1 = float(f_lo[0]) if searched else f_bottom
    if lo is not None and not searched and f_bottom > 0:
        x1, f1 = 0.0, trace.ends["at 0"]["f"]
    f2 = min(f_top, big)
    trace.start = {"x1": x1, "f1": f1, "x2": float(hi[0]), "f2": f2, "x3": float(hi[0]), "f3": f2, "t": 0.5,
                   "done": bool(f_top <= 0 or f1 > 0)}
    del missed


__all__ = ["MAX_ITERATIONS", "RTOL", "STATE", "SolveTrace", "largest_rate_meeting", "solve_rising"]
