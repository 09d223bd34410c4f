"""Chunked prefill and separate prefill/decode pools on essay 001, by hand, and chunking against the simulator.

Essay 001 under TPOT <= 50 ms: ceiling 6.92 requests/s, goodput 5.90; the promise costs 1.03 requests/s.
Separate pools win all of it back (decode steps of 38 ms at the full batch keep the promise); chunked
prefill with vLLM's default budget (8,192 tokens) wins back 37%, with a 512-token budget 72%.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity import Scenario, analyse
from capacity.model import serving_modes as options
from tests.formulas.test_invariants import inputs
from tests.shared_inputs import ESSAY_001_TPOT_50 as ESSAY_001

A_MEM, M_MEM = 0.011, 1150 * 131072 / 2e12  # 8 ms of weights + 3 ms overhead; 75.4 us per sequence
A_COMP, M_COMP = 0.003, 16e9 / 150e12        # 3 ms; 106.7 us per token
TP = 1000 * M_COMP + 0.003                   # 109.7 ms


def essay001(**sections):
    data = {k: dict(v) for k, v in ESSAY_001.items()}
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return Scenario.from_dict(data).evaluate()


def test_separate_pools_win_back_the_whole_promise():
    r = essay001()
    # Decode pool: 328 / (300 x 38.0 ms) = 28.78 requests/s (the batch fills before TPOT reaches 50 ms:
    # the TPOT bound alone is min((50 - 11) / (0.0754 x 300 x 50), (50 - 3) / (0.1067 x 300 x 50)) = 29.4).
    decode = 328 / (300 * r["decode_step_s"])
    assert r["disagg_decode_rps"] == pytest.approx(decode) and decode == pytest.approx(28.78, abs=0.01)
    assert r["disagg_tpot_at_goodput_s"] == pytest.approx(0.03799, abs=1e-5)
    # Prefill pool without a TTFT promise: 1 / 109.7 ms = 9.12 requests/s.
    assert r["disagg_prefill_rps"] == pytest.approx(1 / TP)
    # Per GPU: 1 / (1/28.78 + 1/9.12) = 6.92 = the plain ceiling, so all of the 1.03 requests/s come back.
    per_gpu = 1 / (1 / decode + TP)
    assert r["disagg_goodput_per_gpu_rps"] == pytest.approx(per_gpu)
    assert per_gpu == pytest.approx(r["ceiling_rps"])
    assert r["disagg_win_back"] == pytest.approx(1.0)
    assert r["disagg_prefill_share"] == pytest.approx(decode / (decode + 1 / TP))  # 76% of GPUs prefill


def test_prefill_pool_under_a_ttft_promise_and_a_kv_link():
    # M/D/1 on prompts: TTFT = t_p + λ t_p² / (2 (1 - λ t_p)) + t_kv <= 500 ms. KV of 1,000 tokens over
    # 50 GB/s: 131.1 MB / 50 GB/s = 2.6 ms. y = 500 - 109.7 - 2.6 = 387.7 ms -> λ = 2y / (t_p (t_p + 2y)).
    r = essay001(slo={"ttft": "500 ms"}, serving={"kv_transfer_bandwidth": "50 GB/s"})
    t_kv = 1000 * 131072 / 50e9
    y = 0.5 - TP - t_kv
    assert r["kv_transfer_s"] == pytest.approx(t_kv)
    assert r["disagg_prefill_rps"] == pytest.approx(2 * y / (TP * (TP + 2 * y)))
    assert r["disagg_ttft_at_goodput_s"] == pytest.approx(0.5)


def test_chunked_prefill_by_hand():
    # Budget 8,192: a 1,000-token prompt rides in one iteration with the B decodes: d_c = 3 + 0.1067 (B + 1,000)
    # ms (compute), d_p = 11 + 0.0754 B ms (memory, B < 256), extra x = d_c - d_p. Time balance:
    # T(B) = d_p + B x / A = 11 + 0.4043 B + 1.043e-4 B² ms = 50 ms at B = 94.2, so λ = B / (A T) = 6.279.
    quad, lin, const = (M_COMP - M_MEM) / 300, M_MEM + (A_COMP + 1000 * M_COMP - A_MEM) / 300, A_MEM - 0.05
    batch = (-lin + (lin * lin - 4 * quad * const) ** 0.5) / (2 * quad)
    r = essay001()
    assert batch == pytest.approx(94.2, abs=0.1)
    assert r["chunked_goodput_rps"] == pytest.approx(batch / (300 * 0.05), rel=1e-8)
    assert r["chunked_tpot_at_goodput_s"] == pytest.approx(0.05, rel=1e-8)
    # The ceiling: chunks fill every iteration at B = A = 300 (each iteration must start B/A prompts):
    # λ = 1 / (d_p(300) + x(300)) = 1 / d_c(300) = 1 / (3 + 0.1067 x 1,300) ms = 7.06 requests/s.
    assert r["chunked_ceiling_rps"] == pytest.approx(1 / (A_COMP + 1300 * M_COMP))
    win = (r["chunked_goodput_rps"] - r["goodput_rps"]) / (r["ceiling_rps"] - r["goodput_rps"])
    assert r["chunked_win_back"] == pytest.approx(win) and win == pytest.approx(0.372, abs=0.001)


def test_smaller_chunks_hide_prefill_under_memory_bound_steps():
    # Budget 512: chunks of 512 - B tokens; more of the arithmetic hides under the 11 ms weight read.
    small = essay001(serving={"max_batched_tokens": 512})
    default = essay001()
    assert small["chunked_goodput_rps"] > default["chunked_goodput_rps"] > default["goodput_rps"]
    assert small["chunked_win_back"] == pytest.approx(0.725, abs=0.005)
    # The pipe fills at B = A x budget / (A + P) = 300 x 512 / 1,300 = 118 sequences.
    assert options.pipe_full_batch(300, 1000, 512) == pytest.approx(300 * 512 / 1300)


@pytest.mark.parametrize("budget", [512, 8192])
def test_chunked_tpot_agrees_with_the_simulator(budget):
    pytest.importorskip("capacity.simulator")
    from capacity.planning.simulated_percentiles import simulated_latency

    data = {k: dict(v) for k, v in ESSAY_001.items()}
    data["serving"]["max_batched_tokens"] = budget
    scenario = Scenario.from_dict(data)
    r = scenario.evaluate()
    for fraction in (0.5, 0.8):
        rate = fraction * r["chunked_ceiling_rps"]
        analytic = scenario.with_changes(workload={"arrival_rate": rate}).evaluate()
        sim = simulated_latency(scenario, rate, requests=20_000, chunked_prefill=True, max_batched_tokens=budget)
        assert analytic["chunked_tpot_at_load_s"] == pytest.approx(sim["mean_tpot_s"], rel=0.15)
        assert analytic["chunked_ttft_at_load_s"] == pytest.approx(sim["mean_ttft_s"], rel=0.25)


# --- invariants over random inputs (the strategy of test_invariants.py) ------------------------------------

@settings(max_examples=200, deadline=None)
@given(inputs(), st.sampled_from([256.0, 2048.0, 8192.0]))
def test_options_keep_their_promises_and_bounds(x, budget):
    r = {k: float(v) if not isinstance(v, str) else v for k, v in analyse({**x, "max_batched_tokens": budget}).items()
         if k != "goodput_limit" and k not in ("decode_bound", "batch_limit")}
    assert 0 <= r["chunked_goodput_rps"] <= r["chunked_ceiling_rps"] * (1 + 1e-9)
    if r["chunked_goodput_rps"] > 0:
        assert r["chunked_tpot_at_goodput_s"] <= x["tpot_slo_s"] * (1 + 1e-6)
        assert r["chunked_ttft_at_goodput_s"] <= x["ttft_slo_s"] * (1 + 1e-6) or r["chunked_goodput_rps"] >= r[
            "chunked_ceiling_rps"] * (1 - 1e-6)
    if r["disagg_decode_rps"] > 0:
        assert r["disagg_tpot_at_goodput_s"] <= x["tpot_slo_s"] * (1 + 1e-9)
    assert r["disagg_goodput_per_gpu_rps"] * r["gpus_per_replica"] <= min(r["disagg_decode_rps"],
                                                                          r["disagg_prefill_rps"]) * (1 + 1e-9)
    if 0 < r["goodput_rps"] < r["ceiling_rps"] * (1 - 1e-9) and r["max_rate_for_ttft_rps"] <= r[
            "max_rate_for_tpot_rps"]:
        assert r["ttft_at_goodput_s"] <= x["ttft_slo_s"] * (1 + 1e-9)


@settings(max_examples=150, deadline=None)
@given(inputs(), st.floats(0.1, 1.0), st.floats(0.1, 1.0))
def test_a_tighter_promise_never_raises_an_options_goodput(x, tpot_factor, ttft_factor):
    loose = analyse({**x, "tpot_slo_s": 0.1, "ttft_slo_s": 5.0})
    tight = analyse({**x, "tpot_slo_s": 0.1 * tpot_factor, "ttft_slo_s": 5.0 * ttft_factor})
    for key in ("chunked_goodput_rps", "disagg_goodput_per_gpu_rps", "goodput_rps"):
        assert tight[key] <= loose[key] * (1 + 1e-6), key
