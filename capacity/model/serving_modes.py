"""Serving options beside the plain engine: chunked prefill, and separate prefill and decode pools.

Essay 001: "Chunked prefill, or separate GPU pools for prefill and decode, exist to win that gap back"
(the capacity a TPOT promise gives up because prefills pause every decoding sequence). Both options use
the dense decode-step pieces ``t_step(B) = max(a_mem + m_mem B, a_comp + m_comp B)`` of
``StepModel.pieces`` (MoE: every expert read, the large-batch limit, so an upper bound on the step).

Chunked prefill (Sarathi-Serve; vLLM ``enable_chunked_prefill``). Every iteration runs all B decodes;
while a prompt waits, the iteration also carries a chunk of ``k = min(P, budget - B)`` of its tokens, so
a prompt takes ``n = P / k`` chunk-carrying iterations of ``d_c = max(a_mem + m_mem B, a_comp + m_comp (B + k))``
instead of plain steps ``d_p = t_step(B)``. Decoding never stops; a prompt costs ``x = n (d_c - d_p)`` of
extra time, less than a separate prefill where the chunk's arithmetic hides under the memory-bound step.
Per second ``λ n`` iterations carry chunks and all iterations advance every sequence one token, so with
``B = λ A T`` (Little) the time balance gives, for each batch B, the load and the TPOT explicitly:

    λ(B) = B / (A d_p + B x),      T(B) = d_p + B x / A

Every chunked quantity is one of these at a batch found by a 1-D solve (``solve.largest_rate_meeting``):
the TPOT promise (largest B with ``T(B) <= T``), the batch cap ``min(B_max, budget - 1)``, the chunk
pipe (``u = λ n d_c <= 1``: chunk-carrying iterations fill the time), the TTFT promise, and the load.
TTFT waits for the iteration in progress, then the prompt's own chunks, queued M/D/1 behind other prompts:
``TTFT = T/2 + S + λ S² / (2 (1 - λ S))`` with ``S = n d_c``. Validated against the simulator's chunked
engine in tests/formulas/test_ttft_model.py and docs/fleet.md.

Prefill/decode disaggregation (DistServe, Splitwise). Decode replicas run only decode steps:
``TPOT = t_step(B)`` with no prefill stalls, the batch up to B_max; prefill replicas run prompts one by
one (M/D/1), then the KV cache moves over a link. Per GPU the two pools in the ideal ratio serve
``1 / (g (1/λ_d + 1/λ_p))``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas import slo
from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import select
from capacity.formulas.solve import SolveTrace, largest_rate_meeting

#: Relative accuracy of the chunked-prefill solves: an option's estimate, not a contract figure.
RTOL = 1e-9



# --- chunked prefill -----------------------------------------------------------------------------------------

def chunk_terms(batch: ArrayLike, prompt_tokens: ArrayLike, token_budget: ArrayLike,
                a_mem: ArrayLike, m_mem: ArrayLike, a_comp: ArrayLike, m_comp: ArrayLike
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(d_p, x, S)`` at batch B [s]: plain step, extra time a prompt adds, its chunk-carrying iterations.

    ``k = min(P, budget - B)``, ``n = P / k``, ``d_c = max(a_mem + m_mem B, a_comp + m_comp (B + k))``,
    ``x = n (d_c - d_p)``, ``S = n d_c``; inf where no chunk fits (``k <= 0``).
    Essay 001 at B = 100 (budget 8,192): d_p = max(11 + 7.5, 3 + 10.7) = 18.5 ms, d_c = 3 + 106.7 x 1.1 =
    120.4 ms, x = 101.9 ms (a separate prefill would take 109.7 ms and stop every decode).
    """
    t = chunk_iteration(batch, prompt_tokens, token_budget, a_mem, m_mem, a_comp, m_comp)
    return t["plain"], t["extra"], t["service"]


def chunk_iteration(batch: ArrayLike, prompt_tokens: ArrayLike, token_budget: ArrayLike, a_mem: ArrayLike,
                    m_mem: ArrayLike, a_comp: ArrayLike, m_comp: ArrayLike) -> dict[str, np.ndarray]:
    """Every term of a chunked-prefill iteration at batch B (``chunk_terms``): ``memory`` (the memory piece
    ``a_mem + m_mem B``) [s], ``plain`` d_p [s], ``chunk`` k [tokens], ``carrying`` d_c [s], ``extra`` x [s],
    ``service`` S [s]."""
    b, p = _f(batch), _f(prompt_tokens)
    memory = _f(a_mem) + _f(m_mem) * b
    plain = np.maximum(memory, _f(a_comp) + _f(m_comp) * b)
    chunk = np.minimum(p, _f(token_budget) - b)
    fits = chunk > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        n = p / chunk
        carrying = np.maximum(memory, _f(a_comp) + _f(m_comp) * (b + chunk))
        extra = n * (carrying - plain)
        service = n * carrying
        # Where no chunk fits: inf (the same values as np.where(fits, ..., inf), with no pass where every chunk fits,
        # as in the root solves, whose batches stay below the budget).
        if not np.all(fits):
            n, extra, service = (select(fits, value, np.inf) for value in (n, extra, service))
    return {"memory": memory, "plain": plain, "chunk": chunk, "carrying": carrying, "extra": extra,
            "service": service}


def chunked_rate_rps(batch: ArrayLike, output_tokens: ArrayLike, plain_s: ArrayLike, extra_s: ArrayLike) -> np.ndarray:
    """Load that holds B sequences decoding with chunked prefill: ``λ = B / (A d_p + B x)`` [requests/s]."""
    b = _f(batch)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = b / (_f(output_tokens) * _f(plain_s) + b * _f(extra_s))
    return rate if np.all(b > 0) else select(b > 0, rate, 0.0)  # no pass where every batch is positive


def chunked_tpot_s(batch: ArrayLike, output_tokens: ArrayLike, plain_s: ArrayLike, extra_s: ArrayLike) -> np.ndarray:
    """TPOT (the mean iteration) with B sequences decoding: ``T = d_p + B x / A`` [s]."""
    return _f(plain_s) + _f(batch) * _f(extra_s) / _f(output_tokens)


def chunked_ttft_s(rate: ArrayLike, tpot_s: ArrayLike, service_s: ArrayLike) -> np.ndarray:
    """TTFT with chunked prefill: ``T/2 + S + λ S² / (2 (1 - λ S))`` [s]; inf where ``λ S >= 1``."""
    lam, s = _f(rate), _f(service_s)
    busy = lam * s
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft = 0.5 * _f(tpot_s) + s + busy * s / (2.0 * (1.0 - busy))
    stable = busy < 1.0
    return ttft if np.all(stable) else select(stable, ttft, np.inf)  # no pass where every queue is stable


def _at_batch(b, a_tokens, p_tokens, budget, a_mem, m_mem, a_comp, m_comp):
    """(λ, T, TTFT, pipe share, (d_p, x, S)) at batch b."""
    terms = plain, extra, service = chunk_terms(b, p_tokens, budget, a_mem, m_mem, a_comp, m_comp)
    lam = chunked_rate_rps(b, a_tokens, plain, extra)
    tpot = chunked_tpot_s(b, a_tokens, plain, extra)
    return lam, tpot, chunked_ttft_s(lam, tpot, service), lam * service, terms


# The solvers' latencies: each computes only what it compares (the same formulas as ``_at_batch``).

def _tpot_of_batch(b, a_tokens, p_tokens, budget, a_mem, m_mem, a_comp, m_comp):
    plain, extra, _ = chunk_terms(b, p_tokens, budget, a_mem, m_mem, a_comp, m_comp)
    return chunked_tpot_s(b, a_tokens, plain, extra)


def _ttft_of_batch(b, *args):
    return _at_batch(b, *args)[2]


def _batch_gap(b, load, a_tokens, p_tokens, budget, a_mem, m_mem, a_comp, m_comp):
    """``B - λ A T(B)``: rises with B below the ceiling, nearly linearly; 0 at the batch the load holds."""
    return _batch_gap_of_tpot(b, load, a_tokens, _tpot_of_batch(b, a_tokens, p_tokens, budget, a_mem, m_mem, a_comp,
                                                                m_comp))


def _batch_gap_of_tpot(b, load, a_tokens, tpot_s):
    """``B - λ A T`` with the TPOT T at batch B given [sequences]."""
    return b - load * a_tokens * tpot_s


def _where_known(evaluate, batch: np.ndarray, args: tuple, known_batch: np.ndarray, known: tuple) -> tuple:
    """``evaluate(batch, *args)`` (a tuple of arrays): ``known`` (its values at ``known_batch``, the same numbers) in
    the rows where ``batch`` is ``known_batch``, the other rows evaluated alone (as many evaluations as they are)."""
    shape = np.broadcast_shapes(np.shape(batch), np.shape(known_batch), *(np.shape(k) for k in known),
                                *(np.shape(a) for a in args))

    def flat(a: ArrayLike) -> np.ndarray:
        return np.broadcast_to(_f(a), shape).reshape(-1)

    outs = [np.array(flat(k)) for k in known]
    other = np.flatnonzero(flat(batch) != flat(known_batch))
    if other.size:
        for out, value in zip(outs, evaluate(flat(batch)[other], *(a if np.ndim(a) == 0 else flat(a)[other]
                                                                     for a in args)), strict=True):
            out[other] = value
    return tuple(out.reshape(shape) for out in outs)


def _at_batch_flat(b, *args):
    """``_at_batch`` as one flat tuple: (λ, T, TTFT, pipe share, d_p, x, S)."""
    *values, terms = _at_batch(b, *args)
    return (*values, *terms)


def pipe_full_batch(output_tokens: ArrayLike, prompt_tokens: ArrayLike, token_budget: ArrayLike) -> np.ndarray:
    """Batch at which chunk-carrying iterations fill all the time: ``B = A min(1, budget / (A + P))`` [sequences].

    ``u = λ n d_c = 1`` with ``λ = B / (A d_p + B n (d_c - d_p))`` reduces to ``B n = A``: each iteration
    finishes B/A requests and must start as many prompts, n iterations each. With ``k = P`` that is B = A;
    where the budget cuts the chunk (``k = budget - B``), ``B P = A (budget - B)``. Essay 001 (budget 8,192):
    B = 300, which caps the batch before the 328 that memory allows.
    """
    a, p, budget = _f(output_tokens), _f(prompt_tokens), _f(token_budget)
    return a * np.minimum(1.0, budget / (a + p))


def chunk_batch_cap(batch_max: ArrayLike, token_budget: ArrayLike) -> np.ndarray:
    """Largest batch chunked prefill runs: ``max(0, min(B_max, budget - 1))`` [sequences] (every iteration
    carries its B decodes and at least one prompt token within the token budget)."""
    return np.maximum(np.minimum(_f(batch_max), _f(token_budget) - 1.0), 0.0)


def chunk_ceiling_batch(cap: ArrayLike, output_tokens: ArrayLike, prompt_tokens: ArrayLike,
                        token_budget: ArrayLike) -> np.ndarray:
    """Batch at the chunked ceiling: the cap or the full chunk pipe, whichever comes first [sequences]."""
    return np.minimum(_f(cap), pipe_full_batch(output_tokens, prompt_tokens, token_budget))


def chunked(pieces: tuple, batch_max: ArrayLike, output_tokens: ArrayLike, prefill_tokens: ArrayLike,
            token_budget: ArrayLike, tpot_slo_s: ArrayLike, ttft_slo_s: ArrayLike,
            arrival_rate: ArrayLike, trace: dict[str, SolveTrace] | None = None) -> dict[str, np.ndarray]:
    """Chunked prefill on one replica: ceiling, goodput and latencies [requests/s, s] (module docstring).

    Keys: ``ceiling_rps`` (the batch cap ``min(B_max, budget - 1)`` or the chunk pipe, whichever comes first),
    ``goodput_rps`` (also keeping the TPOT and TTFT promises), ``tpot_at_goodput_s``, ``ttft_at_goodput_s``,
    ``tpot_at_load_s``, ``ttft_at_load_s`` (inf above the ceiling or without a load); and what they are built
    from: ``batch_cap``, ``batch_ceiling``, ``batch_tpot``, ``batch_goodput``, ``batch_load`` [sequences], the
    iteration terms ``plain_*_s``, ``extra_*_s``, ``service_*_s`` at the ceiling's, the goodput's and the load's
    batch, ``load_known`` and ``rate_load_rps``. ``trace``: filled with the three solves (``SolveTrace``) under
    ``batch_tpot``, ``batch_goodput`` and ``batch_load`` (one row only).
    Essay 001 under TPOT <= 50 ms (budget 8,192): 6.27 requests/s against 5.90 without chunking.
    """
    (a_mem, m_mem), (a_comp, m_comp) = pieces
    a_tokens, budget = _f(output_tokens), _f(token_budget)
    cap = chunk_batch_cap(batch_max, budget)
    args = (a_tokens, prefill_tokens, budget, a_mem, m_mem, a_comp, m_comp)
    b_ceiling = chunk_ceiling_batch(cap, a_tokens, prefill_tokens, budget)
    traces = {} if trace is None else {k: trace.setdefault(k, SolveTrace()) for k in
                                       ("batch_tpot", "batch_goodput", "batch_load")}
    # The ceiling's batch first: the TPOT and load solves start from it and take its TPOT (the same numbers their
    # latencies give there) instead of evaluating it again.
    at_ceiling_values = _at_batch_flat(b_ceiling, *args)
    ceiling, tpot_ceiling, ttft_ceiling, _, *at_ceiling = at_ceiling_values
    b_promise = largest_rate_meeting(_tpot_of_batch, tpot_slo_s, b_ceiling, args, rtol=RTOL, ratio=False,
                                     trace=traces.get("batch_tpot"), latency_at_hi=tpot_ceiling)
    b_goodput = largest_rate_meeting(_ttft_of_batch, ttft_slo_s, b_promise, args, rtol=RTOL,
                                     trace=traces.get("batch_goodput"),
                                     latency_at_hi=_where_known(lambda b, *a: (_ttft_of_batch(b, *a),), b_promise, args,
                                                                b_ceiling, (ttft_ceiling,))[0])
    # Where no promise binds the goodput's batch is the ceiling's: its values are known there.
    lam, tpot, ttft, _, *at_goodput = _where_known(_at_batch_flat, b_goodput, args, b_ceiling, at_ceiling_values)
    # At a load: the batch whose load it is (λ(B) rises with B); above the ceiling none.
    load = _f(arrival_rate)
    known = (load > 0) & (load <= ceiling)
    held = select(known, load, 0.0)
    b_load = largest_rate_meeting(_batch_gap, select(known, 0.0, np.inf), b_ceiling, (held, *args), rtol=RTOL,
                                  ratio=False, trace=traces.get("batch_load"),
                                  latency_at_hi=_batch_gap_of_tpot(b_ceiling, held, a_tokens, tpot_ceiling))
    lam_load, tpot_load, ttft_load, _, at_load = _at_batch(b_load, *args)
    none = ~(b_goodput > 0)
    terms = {f"{part}_{at}_s": value for at, values in (("ceiling", at_ceiling), ("goodput", at_goodput),
                                                        ("load", at_load))
             for part, value in zip(("plain", "extra", "service"), values, strict=True)}
    return {"ceiling_rps": select(cap > 0, ceiling, 0.0), "goodput_rps": select(none, 0.0, lam),
            "tpot_at_goodput_s": select(none, np.inf, tpot), "ttft_at_goodput_s": select(none, np.inf, ttft),
            "tpot_at_load_s": select(known, tpot_load, np.inf), "ttft_at_load_s": select(known, ttft_load, np.inf),
            "batch_cap": cap, "batch_ceiling": b_ceiling, "batch_tpot": b_promise, "batch_goodput": b_goodput,
            "batch_load": b_load, "load_known": known, "rate_load_rps": lam_load, **terms}


# --- prefill and decode pools --------------------------------------------------------------------------------

def decode_pool_ceiling_rps(batch_max: ArrayLike, decode_step_s: ArrayLike, output_tokens: ArrayLike) -> np.ndarray:
    """Requests/s one decode-only replica finishes at its largest batch: ``B_max / (A t_step(B_max))``.

    Essay 001: 328 / (300 x 38.0 ms) = 28.8 requests/s.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(_f(batch_max) > 0, _f(batch_max) / (_f(output_tokens) * _f(decode_step_s)), 0.0)


def kv_transfer_s(prefill_tokens: ArrayLike, kv_bytes_per_token: ArrayLike, link_bandwidth: ArrayLike) -> np.ndarray:
    """Moving a prompt's KV cache from the prefill to the decode pool: ``P kv / BW_link`` [s] (0 at infinite BW).

    llama-3-8b fp16, 1,000 tokens over 50 GB/s: 1,000 x 131,072 B / 50 GB/s = 2.6 ms.
    """
    return _f(prefill_tokens) * _f(kv_bytes_per_token) / _f(link_bandwidth)


def prefill_pool_ttft_s(arrival_rate: ArrayLike, prefill_s: ArrayLike, transfer_s: ArrayLike) -> np.ndarray:
    """TTFT on a prefill-only replica at load λ: an M/D/1 queue of prompts, then the KV transfer [s].

    ``t_p + λ t_p² / (2 (1 - λ t_p)) + t_kv``; inf at ``λ t_p >= 1``. Prompts run one by one in arrival
    order: a compute-bound prefill gains nothing from batching prompts, and first-come-first-served
    finishes each prompt before the ones behind it (a batch finishes all together).
    """
    lam, t_p = _f(arrival_rate), _f(prefill_s)
    busy = lam * t_p
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft = t_p + busy * t_p / (2.0 * (1.0 - busy)) + _f(transfer_s)
    return select(busy < 1.0, ttft, np.inf)


def prefill_pool_rate_rps(ttft_slo_s: ArrayLike, prefill_s: ArrayLike, transfer_s: ArrayLike) -> np.ndarray:
    """Requests/s one prefill-only replica serves [requests/s]: ``1 / t_p`` without a TTFT promise, else
    ``prefill_pool_ttft_s`` solved for λ: ``2y / (t_p (t_p + 2y))``, ``y = D - t_p - t_kv`` (0 when y < 0).

    Essay 001 (no TTFT promise): 1 / 109.7 ms = 9.12 requests/s; under a 500 ms TTFT: y = 390.3 ms,
    2 x 0.3903 / (0.1097 x 0.8903) = 7.99 requests/s.
    Excel: ``=IF(ISBLANK(D),1/t_p,MAX(0,2*(D-t_p-tkv)/(t_p*(t_p+2*(D-t_p-tkv)))))``.
    """
    d, t_p = _f(ttft_slo_s), _f(prefill_s)
    y = select(np.isfinite(d), d, 0.0) - t_p - _f(transfer_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = select(y >= 0, 2.0 * y / (t_p * (t_p + 2.0 * y)), 0.0)
    return select(np.isfinite(d), bound, 1.0 / t_p)


def pooled_rate_per_gpu(decode_rps: ArrayLike, prefill_rps: ArrayLike, gpus_per_replica: ArrayLike) -> np.ndarray:
    """Requests/s per GPU of a fleet split into prefill and decode pools in the ideal ratio [requests/s].

    ``1 / (g (1/λ_d + 1/λ_p))``: each request needs ``1/λ_d`` of a decode replica and ``1/λ_p`` of a prefill
    replica of g GPUs. Essay 001: 1 / (1/28.8 + 1/9.12) = 6.92 requests/s per GPU (the plain ceiling: the
    decode pool runs at its largest batch, whose 38 ms steps keep the 50 ms promise).
    """
    d, p = _f(decode_rps), _f(prefill_rps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return select((d > 0) & (p > 0), 1.0 / (_f(gpus_per_replica) * (1.0 / d + 1.0 / p)), 0.0)


def split_pool_goodput_rps(prefill_rps: ArrayLike, prefill_workers: ArrayLike, decode_rps: ArrayLike,
                           decode_workers: ArrayLike) -> np.ndarray:
    """Requests/s two pools of their own layouts serve together: ``min(P λ_p, D λ_d)`` [requests/s].

    ``P`` prefill replicas of ``λ_p`` each (``prefill_pool_rate_rps``: the TTFT promise, KV transfer included) feed
    ``D`` decode replicas of ``λ_d`` each (``disaggregated``'s decode rate: the TPOT promise without prefill
    stalls); every request passes both, so the smaller total binds (DistServe, OSDI 2024, section 3). Essay 001's
    pools (9.12 and 28.8 requests/s per replica): 3 prefill + 1 decode replicas serve min(27.4, 28.8) = 27.4.
    """
    return np.minimum(_f(prefill_rps) * _f(prefill_workers), _f(decode_rps) * _f(decode_workers))


def disaggregated(pieces: tuple, batch_max: ArrayLike, decode_step_s: ArrayLike, prefill_s: ArrayLike,
                  prefill_tokens: ArrayLike, output_tokens: ArrayLike, kv_bytes_per_token: ArrayLike,
                  link_bandwidth: ArrayLike, gpus_per_replica: ArrayLike, tpot_slo_s: ArrayLike,
                  ttft_slo_s: ArrayLike, arrival_rate: ArrayLike) -> dict[str, np.ndarray]:
    """Prefill and decode pools of one replica layout: rates per replica, per GPU, and latencies.

    Decode replica: ``TPOT(λ) = max_i a_i / (1 - λ A m_i)`` (``slo.tpot_at_rate_s`` with t_p = 0), rate
    ``min(B_max / (A t_step(B_max)), λ_TPOT)``. Prefill replica: ``prefill_pool_rate_rps``.
    """
    a_tokens = _f(output_tokens)
    decode_ceiling = decode_pool_ceiling_rps(batch_max, decode_step_s, a_tokens)
    tpot_bound = slo.max_rate_for_tpot_rps(tpot_slo_s, 0.0, a_tokens, pieces)
    decode_rps = np.maximum(np.minimum(decode_ceiling, tpot_bound), 0.0)
    transfer = kv_transfer_s(prefill_tokens, kv_bytes_per_token, link_bandwidth)
    prefill_rps = prefill_pool_rate_rps(ttft_slo_s, prefill_s, transfer)
    per_gpu = pooled_rate_per_gpu(decode_rps, prefill_rps, gpus_per_replica)
    # TPOT at the pool's rate is the smallest fixed point, at most the promise for any rate up to the promise's
    # bound; where the promise sets the rate the fixed point is the promise itself (fmin guards the 0/0 of a
    # piece without intercept there). Where the full batch sets the rate the fixed point stays the answer: a
    # huge B_max can leave the batch short of full (the compute piece saturates first), and then the full
    # batch's step is not what users see.
    fixed = slo.tpot_at_rate_s(decode_rps, 0.0, a_tokens, pieces)
    at_promise = decode_rps >= tpot_bound * (1.0 - 1e-9)
    tpot = select(at_promise, np.fmin(fixed, _f(tpot_slo_s)), fixed)
    load = _f(arrival_rate)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "decode_rps": decode_rps, "prefill_rps": prefill_rps, "goodput_per_gpu_rps": per_gpu,
            "prefill_share": select(per_gpu > 0, decode_rps / (decode_rps + prefill_rps), np.nan),
            "tpot_at_goodput_s": select(decode_rps > 0, tpot, np.inf),
            "ttft_at_goodput_s": prefill_pool_ttft_s(prefill_rps, prefill_s, transfer),
            "tpot_at_load_s": select(load <= decode_ceiling, slo.tpot_at_rate_s(load, 0.0, a_tokens, pieces),
                                       np.inf),
            "ttft_at_load_s": prefill_pool_ttft_s(load, prefill_s, transfer),
            "kv_transfer_s": transfer + 0.0 * _f(prefill_s),
            "decode_ceiling_rps": decode_ceiling, "tpot_bound_rps": tpot_bound, "tpot_fixed_point_s": fixed,
        }


__all__ = ["chunk_terms", "chunked", "chunked_rate_rps", "chunked_tpot_s", "chunked_ttft_s",
           "decode_pool_ceiling_rps", "disaggregated", "kv_transfer_s", "pooled_rate_per_gpu",
           "prefill_pool_rate_rps", "prefill_pool_ttft_s"]
