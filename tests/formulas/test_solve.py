"""The row solver on many rows at once gives each row exactly what solving it alone gives (issue 17).

``solve.solve_rising`` compacts finished rows (and their per-row args) away only once they are a quarter of the
rows it iterates; until then they iterate along, ignored. These tests pin that a row's answer never depends on
the rows beside it, whichever iteration it finishes at, and that ``StepModel.row_steps`` (the MoE step on
per-row args the solver compacts) is the same step as ``StepModel.step_rows`` (the model gathered per call).
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity.formulas import memory, solve
from capacity.model.analysis import complete_inputs, step_model


def cubic(x: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``x^3 + c x - d``: rises in x for c >= 0; root somewhere in (0, hi) for d > 0."""
    return x * x * x + c * x - d


def test_rows_solved_together_equal_rows_solved_alone():
    rng = np.random.default_rng(3)
    n = 400
    c = rng.uniform(0.0, 5.0, n) * rng.choice([0.0, 1.0, 1e-6, 1e6], n)  # very different convergence speeds
    d = np.exp(rng.uniform(-20.0, 20.0, n))
    hi = np.full(n, 1e8)
    together = solve.largest_rate_meeting(cubic, d, hi, (c, np.zeros(n)), ratio=False)
    alone = np.array([solve.largest_rate_meeting(cubic, d[i], 1e8, (c[i], 0.0), ratio=False) for i in range(n)])
    assert np.array_equal(together, alone)
    assert np.all(cubic(together, c, d) - 0.0 <= 0)  # ``d`` is the target: the latency x^3 + c x keeps it


def test_the_rows_api_and_the_args_api_agree():
    rng = np.random.default_rng(4)
    n = 300
    c, d = rng.uniform(0.1, 3.0, n), np.exp(rng.uniform(-5.0, 5.0, n))
    hi = np.full(n, 1e3)
    by_args = solve.solve_rising(lambda x, c_, d_: cubic(x, c_, d_), hi, args=(c, d))
    by_rows = solve.solve_rising(lambda x, rows: cubic(x, c, d) if rows is None else cubic(x, c[rows], d[rows]), hi)
    assert np.array_equal(by_args, by_rows)
    # The answer keeps the promise and is within the solver's tolerance of the exact root.
    assert np.all(cubic(by_args, c, d) <= 0)
    above = by_args * (1 + 4 * solve.RTOL)
    assert np.all(cubic(above, c, d) > 0)


@pytest.mark.parametrize("experts, top_k", [(8.0, 2.0), (256.0, 8.0), (0.0, 0.0)])
def test_row_steps_equal_step_rows(experts, top_k):
    rng = np.random.default_rng(5)
    n = 64
    x = complete_inputs({
        "layers": 32.0, "kv_heads": 8.0, "head_dim": 128.0, "kv_bytes_per_value": 2.0,
        "params": rng.uniform(40e9, 50e9, n), "active_params": rng.uniform(10e9, 13e9, n) if experts else np.nan,
        "weight_bytes": rng.uniform(80e9, 100e9, n), "gpu_memory_bytes": 80e9, "bandwidth": 3e12, "flops": 7e14,
        "gpu_count": rng.choice([1.0, 2.0, 4.0], n), "price_per_hour": 2.0, "memory_utilization": 0.9,
        "block_size": 16.0, "max_model_len": 4096.0, "step_overhead_s": 0.002, "max_num_seqs": np.inf,
        "prompt_tokens": 1000.0, "output_tokens": 300.0, "shared_prefix_tokens": 0.0, "arrival_rate": 0.0,
        "tpot_slo_s": 0.05, "ttft_slo_s": np.inf, "experts": experts, "experts_per_token": top_k,
        "hidden_size": 4096.0, "interconnect_bandwidth": 4.5e11})
    model, _ = step_model(x, 1150.0)
    step, args = model.row_steps()
    batch = rng.uniform(1.0, 500.0, n)
    rows = np.arange(n)
    assert np.array_equal(step(batch, *args), model.step_rows(batch, rows))
    pick = rows[::3]
    # An arg holding one value for every row is zero-dimensional (the solver keeps it so, as it does here).
    assert any(a.ndim == 0 for a in args) and any(a.ndim == 1 for a in args)
    assert np.array_equal(step(batch[pick], *(a if a.ndim == 0 else a[pick] for a in args)),
                          model.step_rows(batch[pick], pick))


def test_moe_read_terms_are_the_weight_read_of_every_token_count():
    w, n, na, e, k = 93e9, 46.7e9, 12.9e9, 8.0, 2.0
    tokens = np.array([0.0, 1.0, 7.0, 300.0])
    plain = memory.weight_bytes_read(w, n, na, e, k, tokens)
    with_terms = memory.weight_bytes_read(w, n, na, e, k, tokens, memory.moe_read_terms(n, na, e, k))
    assert np.array_equal(plain, with_terms)
    # One token reads the shared weights and k experts: W (N - E p_e + k p_e) / N = W N_a / N.
    assert plain[1] == pytest.approx(w * na / n, rel=1e-12)


def test_moe_tpot_search_below_the_every_expert_closed_form_finds_the_same_fixed_point():
    """``analysis.tpot_at_rates_s`` searches the MoE TPOT fixed point no higher than the pieces' closed form (every
    expert read): the same smallest fixed point as the search from 10^4 s, within the solver's tolerance."""
    from capacity.formulas import slo
    from capacity.model.analysis import tpot_at_rates_s

    rng = np.random.default_rng(6)
    n = 200
    x = complete_inputs({
        "layers": 32.0, "kv_heads": 8.0, "head_dim": 128.0, "kv_bytes_per_value": 2.0, "params": 46.7e9,
        "active_params": 12.9e9, "weight_bytes": 93.4e9, "gpu_memory_bytes": 141e9, "bandwidth": 4.0e12,
        "flops": 8e14, "gpu_count": 2.0, "price_per_hour": 2.0, "memory_utilization": 0.9, "block_size": 16.0,
        "max_model_len": 8192.0, "step_overhead_s": 0.002, "max_num_seqs": np.inf, "prompt_tokens": 1000.0,
        "output_tokens": 300.0, "shared_prefix_tokens": 0.0, "arrival_rate": 0.0, "tpot_slo_s": 0.05,
        "ttft_slo_s": np.inf, "experts": 8.0, "experts_per_token": 2.0})
    model, _ = step_model(x, 1150.0)
    pieces = model.pieces()
    prefill = float(model.prefill_s(1000.0))
    rates = rng.uniform(0.0, 8.0, n)
    narrowed = tpot_at_rates_s(model, pieces, prefill, 300.0, 1e4, rates, True)
    step, args = model.row_steps()
    wide = slo.tpot_at_rate_rows(step, rates, prefill, 300.0, 1e4, step_args=args)
    closed = slo.tpot_at_rate_s(rates, prefill, 300.0, pieces)
    finite = np.isfinite(wide)
    assert finite.sum() > n // 2 and np.array_equal(finite, np.isfinite(narrowed))
    assert np.allclose(narrowed[finite], wide[finite], rtol=2 * solve.RTOL, atol=0.0)
    assert np.all(narrowed[finite] <= closed[finite])  # the closed form bounds the MoE fixed point from above
    # Each answer is the last TPOT below the fixed point: s (1 - λ t_p) - t_step(λ A s) <= 0 there.
    s = narrowed[finite]
    lam = rates[finite]
    assert np.all(s * (1 - lam * prefill) - model.rows(np.zeros(s.size, dtype=np.intp)).step_s(lam * 300.0 * s) <= 0)


@pytest.mark.parametrize("ratio", [False, True])
def test_the_latency_at_hi_given_by_the_caller_changes_nothing(ratio):
    """``latency_at_hi`` (what ``options.chunked`` passes: its TPOT at the ceiling's batch) skips one evaluation per
    row and gives the same bits; an infinite target (no search) and a row whose hi keeps the promise included."""
    rng = np.random.default_rng(5)
    n = 500
    c = rng.uniform(0.1, 3.0, n)
    target = np.exp(rng.uniform(-5.0, 8.0, n))
    target[::7] = np.inf
    hi = np.exp(rng.uniform(0.0, 3.0, n))

    def latency(x, c_):
        return x * x * x + c_ * x + 1.0  # > 0, for the ratio form

    calls = []

    def counted(x, c_):
        calls.append(np.size(x))
        return latency(x, c_)

    plain = solve.largest_rate_meeting(counted, target, hi, (c,), ratio=ratio)
    evaluated = sum(calls)
    calls.clear()
    given = solve.largest_rate_meeting(counted, target, hi, (c,), ratio=ratio, latency_at_hi=latency(hi, c))
    assert np.array_equal(plain.view(np.int64), given.view(np.int64))
    assert sum(calls) == evaluated - np.isfinite(target).sum()  # hi is not evaluated again
    assert np.any(plain == hi) and np.any(plain < hi)  # both kinds of rows are in the test
    with pytest.raises(ValueError, match="latency_at_hi"):
        solve.largest_rate_meeting(latency, target, hi, (c,), bracket=lambda t, c_: (0.0 * t, hi),
                                   latency_at_hi=latency(hi, c))


def test_chunked_solves_give_the_same_batches_as_without_the_ceilings_tpot():
    """``options.chunked`` hands its TPOT and load solves the TPOT at the ceiling's batch, and its TTFT solve the TTFT
    there where the TPOT's batch is the ceiling's: the batches equal those of the solves evaluating hi themselves
    (bit for bit)."""
    from capacity.model import serving_modes as options

    rng = np.random.default_rng(6)
    n = 2000
    pieces = ((rng.uniform(5e-3, 3e-2, n), rng.uniform(1e-5, 1e-4, n)), (rng.uniform(1e-3, 5e-3, n),
                                                                         rng.uniform(5e-5, 2e-4, n)))
    a_tokens, p_tokens = rng.uniform(20, 4000, n), rng.uniform(50, 16000, n)
    budget, b_max = rng.choice([2048.0, 8192.0], n), rng.uniform(1, 1000, n)
    tpot, ttft = rng.choice([np.inf, 0.03, 0.05, 0.1], n), rng.choice([np.inf, 0.5, 3.0], n)
    load = rng.choice([0.0, 1.0, 5.0, 20.0], n)
    got = options.chunked(pieces, b_max, a_tokens, p_tokens, budget, tpot, ttft, load)
    args = (a_tokens, p_tokens, budget, *pieces[0], *pieces[1])
    b_ceiling = got["batch_ceiling"]
    b_promise = solve.largest_rate_meeting(options._tpot_of_batch, tpot, b_ceiling, args, rtol=options.RTOL,
                                           ratio=False)
    b_goodput = solve.largest_rate_meeting(options._ttft_of_batch, ttft, b_promise, args, rtol=options.RTOL)
    known = got["load_known"]
    b_load = solve.largest_rate_meeting(options._batch_gap, np.where(known, 0.0, np.inf), b_ceiling,
                                        (np.where(known, load, 0.0), *args), rtol=options.RTOL, ratio=False)
    for key, batch in (("batch_tpot", b_promise), ("batch_goodput", b_goodput), ("batch_load", b_load)):
        assert np.array_equal(got[key].view(np.int64), batch.view(np.int64)), key
    assert np.any(known) and np.any((b_promise > 0) & (b_promise < b_ceiling)) and np.any(b_promise == b_ceiling)
    assert np.any((b_goodput > 0) & (b_goodput < b_promise))
    # The values at the goodput's batch (taken from the ceiling's where the batches are the same) are _at_batch's.
    lam, tpot_g, ttft_g, _, (plain, extra, service) = options._at_batch(b_goodput, *args)
    none = ~(b_goodput > 0)
    for key, value in (("goodput_rps", np.where(none, 0.0, lam)), ("tpot_at_goodput_s", np.where(none, np.inf, tpot_g)),
                       ("ttft_at_goodput_s", np.where(none, np.inf, ttft_g)), ("plain_goodput_s", plain),
                       ("extra_goodput_s", extra), ("service_goodput_s", service)):
        assert np.array_equal(got[key].view(np.int64), value.view(np.int64)), key
    assert np.any(b_goodput == b_ceiling) and np.any(b_goodput != b_ceiling)
