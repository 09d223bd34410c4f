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
the TTFT bound. TTFT (``ttft_at_rate_s``) is a queue for batched prefill passes that
pre-empt decode steps; its bound has no closed form and is solved row by row
(``solve.largest_rate_meeting``, a few evaluations a row). MoE step times are concave
in the batch; their TPOT bounds are solved the same way (``*_rows``). All functions
take scalars or numpy arrays.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import select
from capacity.formulas.solve import SolveTrace, largest_rate_meeting


def tpot_at_rate_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                   pieces: tuple) -> np.ndarray:
    """TPOT at load λ, the smallest fixed point of ``TPOT = t_step(λ A TPOT) / (1 - λ t_p)`` [s].

    ``max_i a_i / (1 - λ t_p - λ A m_i)``; infinite when a denominator is <= 0 (decode cannot keep up).
    ``pieces`` = ((a_mem, m_mem), (a_comp, m_comp)) of ``StepModel.pieces``. Excel (#N/A for infinite; pieces with
    a > 0): ``=IF(MIN(1-arrival_rate*prefill_s-arrival_rate*output_tokens*m_mem,1-arrival_rate*prefill_s
    -arrival_rate*output_tokens*m_comp)>0,MAX(a_mem/(1-arrival_rate*prefill_s-arrival_rate*output_tokens*m_mem),
    a_comp/(1-arrival_rate*prefill_s-arrival_rate*output_tokens*m_comp)),NA())``.
    """
    worst = None
    with np.errstate(divide="ignore", invalid="ignore"):
        for (a, _), denominator in zip(pieces, tpot_denominators(arrival_rate, prefill_s, output_tokens, pieces),
                                       strict=True):
            # A piece through the origin (no overhead) holds for every TPOT right at its limit: it adds nothing.
            through_origin = _f(a) == 0
            bound = (select(through_origin, select(denominator > -1e-12, 0.0, np.inf), np.inf)
                     if np.any(through_origin) else np.inf)  # no passes where no piece goes through the origin
            value = select(denominator > 0, a / denominator, bound)
            worst = value if worst is None else np.maximum(worst, value)
    return np.maximum(worst, 0.0)


def tpot_denominators(arrival_rate: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                      pieces: tuple) -> list[np.ndarray]:
    """``1 - λ t_p - λ A m_i`` for each piece i of the step [-]: the share of time left to decode at load λ less
    what the batch the piece's slope adds; TPOT is ``a_i`` over it (``tpot_at_rate_s``)."""
    lam, t_p, a_tokens = _f(arrival_rate), _f(prefill_s), _f(output_tokens)
    share, per_request = 1.0 - lam * t_p, lam * a_tokens
    return [share - per_request * m for _, m in pieces]


def max_rate_for_tpot_rps(tpot_slo_s: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                          pieces: tuple) -> np.ndarray:
    """Largest λ with ``TPOT(λ) <= T``: ``min_i (T - a_i) / (T t_p + m_i A T)``, at least 0 [requests/s].

    Infinite when there is no TPOT promise (T = inf). ``pieces`` as in ``tpot_at_rate_s``.
    Excel: ``=MAX(0,MIN((tpot_slo_s-a_mem)/(tpot_slo_s*prefill_s+m_mem*output_tokens*tpot_slo_s),
    (tpot_slo_s-a_comp)/(tpot_slo_s*prefill_s+m_comp*output_tokens*tpot_slo_s)))``.
    Essay 001: (50 - 11) ms / (50 ms * 109.7 ms + 75.4 us * 300 * 50 ms) = 5.9 requests/s.
    """
    t, t_p, a_tokens = _f(tpot_slo_s), _f(prefill_s), _f(output_tokens)
    best = np.full(np.broadcast(t, t_p, a_tokens, *pieces[0]).shape, np.inf)
    finite_t = select(np.isfinite(t), t, 1.0)
    for a, m in pieces:
        best = np.minimum(best, (finite_t - a) / (finite_t * t_p + m * a_tokens * finite_t))
    return select(np.isfinite(t), np.maximum(best, 0.0), np.inf)


def max_rate_for_tpot_rows(step_rows, tpot_slo_s: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                           ceiling_rps: ArrayLike, trace: SolveTrace | None = None,
                           step_args: tuple | None = None) -> np.ndarray:
    """Largest λ with ``step(λ A T) <= T (1 - λ t_p)`` for a step time rising in the batch, per row [requests/s].

    The left side rises and the right side falls with λ, so the condition holds on [0, λ*]; used where MoE
    makes the weight read concave in the batch. ``step_rows(batch, rows)`` is the step time of rows ``rows``
    (indices into the flattened arrays) at batches ``batch``; with ``step_args`` (per-row arrays,
    ``StepModel.row_steps``) it is ``step_rows(batch, *step_args)`` on the rows' args instead. The bound is the root
    of ``t_step(λ A T) - T (1 - λ t_p)`` (rising in λ) to 2.5e-13 relative, on the side that keeps the promise.
    """
    t, t_p, a, ceiling = _f(tpot_slo_s), _f(prefill_s), _f(output_tokens), _f(ceiling_rps)
    shape = np.broadcast_shapes(t.shape, t_p.shape, a.shape, ceiling.shape)
    finite = np.isfinite(t)
    hi = np.minimum(1.0 / t_p, np.maximum(ceiling, 0.0) * 2.0 + 1e-9)
    rows, step = _row_steps(step_rows, step_args, shape)

    def excess(lam, t_, t_p_, a_, *rows_):
        return step(lam * a_ * t_, *rows_) - t_ * (1.0 - lam * t_p_)

    rate = largest_rate_meeting(excess, select(finite, 0.0, np.inf), hi, (select(finite, t, 1.0), t_p, a, *rows),
                                ratio=False, trace=trace)
    return select(finite, rate, np.inf)


def _row_steps(step_rows, step_args: tuple | None, shape: tuple[int, ...]):
    """(per-row solver args, ``step(batch, *args)``) for the row-wise solves: the row ids and ``step_rows``, or
    ``step_args`` and ``step_rows`` as given."""
    if step_args is not None:
        return tuple(step_args), step_rows
    return (np.arange(math.prod(shape)).reshape(shape),), lambda batch, ids: step_rows(batch, ids.astype(np.intp))


def tpot_at_rate_rows(step_rows, arrival_rate: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                      longest_s: ArrayLike = 1e4, trace: SolveTrace | None = None,
                      step_args: tuple | None = None, upper_s: ArrayLike | None = None) -> np.ndarray:
    """Smallest fixed point of ``TPOT (1 - λ t_p) = step(λ A TPOT)`` per row (Chandrupatla's method) [s]; inf where
    there is none below ``longest_s`` (10^4 s, or per row: below the ceiling TPOT is at most ``B_max / (λ A)``).

    The fixed point is where ``s (1 - λ t_p) - t_step(λ A s)`` turns positive (once, for a step time concave
    or linear in the batch); the answer is the last s below it, as the bisection's, to 2.5e-13 relative.
    ``step_rows`` and ``step_args`` as in ``max_rate_for_tpot_rows``. ``upper_s``: a TPOT at least the smallest
    fixed point where finite (the closed form of a larger step, ``tpot_at_rate_s``), which narrows the search.
    """
    lam_in, t_p, a = _f(arrival_rate), _f(prefill_s), _f(output_tokens)
    shape = np.broadcast_shapes(lam_in.shape, t_p.shape, a.shape, np.shape(longest_s))
    longest_s = np.broadcast_to(_f(longest_s), shape)
    known = np.isfinite(lam_in)
    lam = select(known, lam_in, 0.0)
    share = 1.0 - lam * t_p
    rows, step = _row_steps(step_rows, step_args, shape)

    def excess(s, lam_, a_, share_, *rows_):
        with np.errstate(invalid="ignore", over="ignore"):
            return s * share_ - step(lam_ * a_ * s, *rows_)

    top = np.array(longest_s)
    if upper_s is not None:  # no finite bound (decode cannot keep up at the larger step): the longest
        top = np.fmin(top, select(_f(upper_s) < np.inf, upper_s, np.nan))
    # Per row, flat; a step argument with one value for every row stays one value (elementwise: the same numbers).
    everywhere = tuple(r if r.ndim == 0 and step_args is not None else np.broadcast_to(r, shape).reshape(-1)
                       for r in map(_f, rows))
    found = (step(np.broadcast_to(lam * a * longest_s, shape).reshape(-1), *everywhere).reshape(shape)
             <= longest_s * share) & (share > 0)
    fixed = largest_rate_meeting(excess, select(found & known, 0.0, np.inf), top, (lam, a, share, *rows),
                                 ratio=False, trace=trace)
    return select(found & known, fixed, np.inf)


def prefill_compute_s(prefill_tokens: ArrayLike, params_per_gpu: ArrayLike, flops: ArrayLike,
                      comm_per_token_s: ArrayLike = 0.0) -> np.ndarray:
    """GPU time a prompt adds to a batched prefill pass: ``c = P (2 N / F + comm per token)`` [s].

    A pass over k prompts lasts about ``f + k c`` with ``f = t_p - c`` (weights, overhead, all-reduce latency);
    essay 001: c = 1,000 x 16 GFLOP / 150 TFLOP/s = 106.7 ms, f = 3 ms.
    """
    return _f(prefill_tokens) * (2.0 * _f(params_per_gpu) / _f(flops) + _f(comm_per_token_s))


def decode_step_at_rate_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, output_tokens: ArrayLike,
                          pieces: tuple) -> np.ndarray:
    """Decode step at load λ: ``s = TPOT(λ) (1 - λ t_p) = t_step(λ A TPOT)`` [s] (inf where decode cannot keep up).

    ``t_p`` is the GPU time a prompt costs the decoding sequences (``analysis.prefill_stage``'s ``gpu_s``: its pass,
    or under an engine profile its share of a batched pass), the same the TPOT takes: the step at the load's batch.
    """
    return decode_step_from_tpot_s(arrival_rate, prefill_s, tpot_at_rate_s(arrival_rate, prefill_s, output_tokens,
                                                                           pieces))


def decode_step_from_tpot_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, tpot_s: ArrayLike) -> np.ndarray:
    """The decode step behind a TPOT at load λ: ``s = TPOT (1 - λ t_p)`` [s]; inf where TPOT is."""
    tpot = _f(tpot_s)
    with np.errstate(invalid="ignore"):
        return select(tpot < np.inf, tpot * (1.0 - _f(arrival_rate) * _f(prefill_s)), np.inf)


def ttft_queue_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, prefill_compute_s: ArrayLike,
                 decode_step_s: ArrayLike, output_tokens: ArrayLike) -> np.ndarray:
    """TTFT of batched prefills that pre-empt decode steps, without the capacity cut [s] (see ``ttft_at_rate_s``).

    ``t_p + (1/2 + ρ) L*``, ``ρ = λ c``, ``L* = min(λ t_p L_p + λ A s², s + λ t_p max(0, L_p - s))``,
    ``L_p = f + c / (1 - ρ²)``. The first form is an engine that idles between steps (small batches), the
    second one that always decodes; both rise with λ, so the minimum does too.
    """
    lam, t_p, c, s = _f(arrival_rate), _f(prefill_s), _f(prefill_compute_s), _f(decode_step_s)
    rho, busy = lam * c, lam * t_p
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        prefill_batch = t_p - c + c / (1.0 - rho * rho)       # length-biased prefill pass [s]
        idle_engine = busy * prefill_batch + lam * _f(output_tokens) * s * s
        busy_engine = s + busy * np.maximum(prefill_batch - s, 0.0)
        interval = select(s > 0, np.minimum(idle_engine, busy_engine), busy * prefill_batch)
        wait = select(rho < 1.0, (0.5 + rho) * interval, np.inf)
    return t_p + select(lam > 0, wait, 0.0)


def ttft_at_step_ends_s(throughput_rps: ArrayLike, prefill_s: ArrayLike, prefill_compute_s: ArrayLike,
                        tpot_s: ArrayLike, clustered: ArrayLike = 0.0) -> np.ndarray:
    """TTFT of a closed loop with no think time: each request arrives as another's answer ends [s].

    ``t_p + c max(X TPOT, n_c)``. Answers end at decode-step ends, so a new request waits for no step in progress:
    the next iteration is the prefill pass of the requests that arrived at that step end, its own and those of the
    other users who finished in the same step, ``X TPOT`` of them on average where the users' phases spread (X
    requests/s finish, one decode step per TPOT; the number finishing in a step is about Poisson, whose size-biased
    count less one has the same mean). Users whose requests all have the same lengths fall into step (they start
    together, and equal answers keep them so; ``analysis.closed_loop_lockstep`` is the limit where all do): ``n_c``
    (``clustered``) others arrive with the request, the larger count counts. No prompt arrives during a prefill pass
    (no one decodes, so no one finishes), so passes do not chain as under random arrivals (``ttft_queue_s``).
    ``throughput_rps`` X [requests/s] (of the other users: ``analysis.closed_loop`` passes ``X (C - 1) / C``),
    ``prefill_s`` t_p and ``prefill_compute_s`` c (``prefill_compute_s``) [s], ``tpot_s`` [s], ``clustered`` n_c
    [requests] (``analysis.closed_loop``: the clustering share of the C - 1 others).
    Essay 001 at 100 users (X = 6.08 requests/s, of the 99 others 6.02, TPOT 54.5 ms, no clustering): 109.7 + 106.7
    x 0.328 = 144.7 ms; the simulator run closed-loop gives 144.2 ms (tests/model/test_closed_loop.py).
    """
    return _f(prefill_s) + _f(prefill_compute_s) * np.maximum(_f(throughput_rps) * _f(tpot_s), _f(clustered))


def ttft_at_rate_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike,
                   prefill_compute_s: ArrayLike, decode_step_s: ArrayLike, output_tokens: ArrayLike) -> np.ndarray:
    """TTFT at load λ: queue for the next prefill pass, then that pass [s]; infinite at ``λ >= ceiling``.

    The engine runs either a decode step (length s, the step at the load's batch) or one prefill pass
    over every waiting prompt, which pre-empts decoding at the next step boundary (vLLM without chunked
    prefill; the simulator's continuous policy). A request arriving during an interval of length L waits
    its remainder, then prefills together with everyone who arrived during it: ``f + c (1 + λ L)``.
    Averaged over the interval in progress (length-biased, ``L* = E[L²]/E[L]``):

        TTFT = t_p + (1/2 + ρ) L*,   ρ = λ c,   L_p = f + c / (1 - ρ²)
        L*   = λ t_p L_p + min(1 - λ t_p, λ A s) s

    where prefill passes fill ``λ t_p`` of the time, chains of passes grow like a branching process
    (length-biased pass L_p), and decode steps fill the rest while sequences decode. Where decode steps
    outlast prefill passes (s > L_p) the busy-engine form ``s + λ t_p (L_p - s)`` would fall with λ;
    the model keeps ``L* = s`` there instead, so TTFT never falls as load rises (``ttft_queue_s``).
    At and above the ceiling requests wait for KV memory without bound (inf).
    Validated against the simulator (tests/formulas/test_ttft_model.py, docs/fleet.md): within 10% of its mean
    TTFT up to 80-90% of the ceiling on four request shapes; from ~95% KV-slot waits appear and the
    formula reads low (12% on essay 001, 26% for 4,000-token prompts).
    Essay 001 at 5.9 requests/s (85% of the ceiling): s = 17.7 ms, L_p = 179.5 ms, L* = 122.3 ms,
    TTFT = 109.7 + (0.5 + 0.629) x 122.3 = 248 ms.
    Excel (#N/A for infinite; decode_step_s > 0): ``=IF(arrival_rate>=ceiling_rps,NA(),
    IF((arrival_rate*prefill_compute_s)>=1,NA(),prefill_s+(0.5+arrival_rate*prefill_compute_s)*MIN(arrival_rate
    *prefill_s*(prefill_s-prefill_compute_s+prefill_compute_s/(1-(arrival_rate*prefill_compute_s)^2))
    +arrival_rate*output_tokens*decode_step_s^2,decode_step_s+arrival_rate*prefill_s*MAX(prefill_s
    -prefill_compute_s+prefill_compute_s/(1-(arrival_rate*prefill_compute_s)^2)-decode_step_s,0))))``.
    """
    lam = _f(arrival_rate)
    ttft = ttft_queue_s(lam, prefill_s, prefill_compute_s, decode_step_s, output_tokens)
    return select(lam < _f(ceiling_rps), ttft, np.inf)


def _ttft_of_rate(lam, prefill_s, prefill_compute_s, output_tokens, a_mem, m_mem, a_comp, m_comp, prefill_gpu_s):
    pieces = ((a_mem, m_mem), (a_comp, m_comp))
    step = decode_step_at_rate_s(lam, prefill_gpu_s, output_tokens, pieces)
    return ttft_queue_s(lam, prefill_s, prefill_compute_s, step, output_tokens)


def max_rate_for_ttft_rps(ttft_slo_s: ArrayLike, prefill_s: ArrayLike, ceiling_rps: ArrayLike,
                          prefill_compute_s: ArrayLike, output_tokens: ArrayLike, pieces: tuple,
                          trace: SolveTrace | None = None, prefill_gpu_s: ArrayLike | None = None) -> np.ndarray:
    """Largest λ with ``TTFT(λ) <= D`` (``ttft_at_rate_s``, decode step from the dense ``pieces``) [requests/s].

    ``prefill_s`` is the prompt's own pass (what TTFT waits for); ``prefill_gpu_s`` (default ``prefill_s``) the GPU
    time it costs the decoding sequences, which sets the decode step at each load (``decode_step_at_rate_s``), as
    ``analysis`` evaluates TTFT at the goodput: where this promise binds, TTFT there is the promise.

    0 when the prefill alone exceeds D; the ceiling when even the load just below it keeps the promise;
    infinite when there is no TTFT promise. TTFT rises with λ, so bisection on [0, ceiling] finds the bound.
    Excel: none in one cell (a root solve: TTFT(λ) = D is a degree-6 polynomial on each piece); the XLSX
    report's Solver sheet repeats the library's iterations row by row (docs/reports.md).
    """
    d = _f(ttft_slo_s)
    finite = np.isfinite(d)
    ceiling = np.maximum(_f(ceiling_rps), 0.0)
    (a_mem, m_mem), (a_comp, m_comp) = pieces
    rate = largest_rate_meeting(_ttft_of_rate, select(finite, d, np.inf), ceiling,
                                (prefill_s, prefill_compute_s, output_tokens, a_mem, m_mem, a_comp, m_comp,
                                 prefill_s if prefill_gpu_s is None else prefill_gpu_s),
                                bracket=ttft_rate_bracket, trace=trace)
    return select(finite, rate, np.inf)


def ttft_rate_bracket(target, prefill_s, prefill_compute_s, output_tokens, a_mem, m_mem, a_comp, m_comp,
                      prefill_gpu_s=None):
    """Rates ``(lo, up, terms)`` with ``TTFT(lo) <= D <= TTFT(up)`` from quadratic bounds on ``ttft_queue_s``.

    With ``y = D - t_p``: ``L* >= λ t_p²`` gives ``(1/2 + λc) λ t_p² >= y`` at the root, so the root is at most
    ``up``; below ``up`` the decode step is at most ``s(up)`` and ``L* <= s(up) + λ t_p L_p(up)``, so the
    root is at least ``lo``. Both are roots of quadratics ``A λ² + B λ = C`` taken as ``2C / (B + √(B² + 4AC))``.
    ``terms``: every value on the way (y, b_up, up, the decode step, ρ and prefill pass at up, a_lo, b_lo, c_lo,
    the lower root, lo), for a reader that shows the solve.
    """
    t_p, c = prefill_s, prefill_compute_s
    y = np.maximum(target - t_p, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b_up = 0.5 * t_p * t_p
        up = 2.0 * y / (b_up + np.sqrt(b_up * b_up + 4.0 * c * t_p * t_p * y))
        step = decode_step_at_rate_s(up, t_p if prefill_gpu_s is None else prefill_gpu_s, output_tokens,
                                     ((a_mem, m_mem), (a_comp, m_comp)))
        rho = up * c
        longest = t_p - c + c / (1.0 - rho * rho)
        a_lo, b_lo, c_lo = c * t_p * longest, 0.5 * t_p * longest + c * step, y - 0.5 * step
        root = 2.0 * c_lo / (b_lo + np.sqrt(b_lo * b_lo + 4.0 * a_lo * c_lo))
        lo = select((c_lo > 0) & (rho < 1.0) & (root < up), root, 0.0)
    terms = {"y": y, "b_up": b_up, "up": up, "decode step at up": step, "rho at up": rho,
             "prefill pass at up": longest, "a_lo": a_lo, "b_lo": b_lo, "c_lo": c_lo, "lo root": root, "lo": lo}
    return lo, select(up >= 0, up, np.inf), terms


def goodput_rps(ceiling_rps: ArrayLike, max_rate_for_tpot_rps: ArrayLike,
                max_rate_for_ttft_rps: ArrayLike) -> np.ndarray:
    """Largest load meeting every promise and the batch limit: ``min(ceiling, λ_TPOT, λ_TTFT)`` [requests/s].

    Essay 001: min(6.9, 5.9, no TTFT promise) = 5.9 requests/s.
    Excel: ``=MAX(0,MIN(ceiling_rps,max_rate_for_tpot_rps,max_rate_for_ttft_rps))``.
    """
    return np.maximum(np.minimum(_f(ceiling_rps), np.minimum(_f(max_rate_for_tpot_rps), _f(max_rate_for_ttft_rps))),
                      0.0)


def in_flight(arrival_rate: ArrayLike, output_tokens: ArrayLike, tpot_s: ArrayLike) -> np.ndarray:
    """Conversations decoding at once by Little's law: ``λ A TPOT(λ)`` [requests]. Essay 001: 5.9 * 300 * 50 ms = 88.

    Excel: ``=IF(arrival_rate>0,arrival_rate*output_tokens*tpot_s,0)``.
    """
    with np.errstate(invalid="ignore"):
        return select(_f(arrival_rate) > 0, _f(arrival_rate) * _f(output_tokens) * _f(tpot_s), 0.0)


def cost_per_million_tokens(price_per_hour: ArrayLike, gpus: ArrayLike, rate_rps: ArrayLike,
                            output_tokens: ArrayLike) -> np.ndarray:
    """Cost of a million output tokens: ``price_per_hour * gpus / (λ A 3600) * 1e6`` [currency].

    Infinite when the rate is 0. Essay 001 at $2/h and 5.9 requests/s of 300 tokens: $0.31.
    Excel: ``=price_per_hour*gpus/(rate_rps*output_tokens*3600)*1e6``.
    """
    tokens_per_hour = _f(rate_rps) * _f(output_tokens) * 3600.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(tokens_per_hour > 0, _f(price_per_hour) * _f(gpus) / tokens_per_hour * 1e6, np.inf)
