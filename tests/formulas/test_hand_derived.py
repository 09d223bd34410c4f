"""Scenarios beyond the essays, each checked against numbers derived by hand in the comments."""

import math

import numpy as np
import pytest

import capacity
from capacity import Scenario
from tests.shared_inputs import ESSAY_001


def essay001(**changes):
    data = {k: dict(v) for k, v in ESSAY_001.items()}
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    return Scenario.from_dict(data).evaluate()


def test_fp8_kv_block_32_and_shared_prefix_on_141_gb():
    # 80 layers x 8 KV heads x 128 x 1 byte (fp8) x 2 = 163,840 B per token.
    # Pool: 141 GB x 0.9 - 70 GB = 56.9 GB; blocks of 32 tokens = 5,242,880 B -> floor(10,852.66) = 10,852.
    # Request 2,000 + 500 = 2,500 tokens = ceil(78.125) = 79 blocks -> floor(137.4) = 137 paged.
    # Prefix 1,000 tokens: floor(1000/32) = 31 shared blocks; private ceil((2500 - 992)/32) = 48
    # -> floor((10,852 - 31) / 48) = 225. Contiguous at 8,192: floor(56.9e9 / 1,342,177,280) = 42.
    r = Scenario.from_dict({
        "model": {"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70e9, "weights": "70 GB", "kv_dtype": "fp8"},
        "gpu": {"memory": "141 GB", "bandwidth": "4.8 TB/s", "flops": "989 TFLOP/s"},
        "serving": {"engine": "ideal", "memory_utilization": 0.9, "block_size": 32, "max_model_len": 8192},
        "workload": {"prompt_tokens": 2000, "output_tokens": 500, "shared_prefix_tokens": 1000},
    }).evaluate()
    assert r.kv_bytes_per_token == 163_840
    assert r.pool_bytes == pytest.approx(56.9e9)
    assert (r.pool_blocks, r.blocks_per_request, r.max_requests_paged) == (10_852, 79, 137)
    assert (r.shared_blocks, r.private_blocks, r.max_requests_shared_prefix) == (31, 48, 225)
    assert r.max_requests_contiguous == 42
    # Prefill skips the 992 cached tokens: 1,008 x 2 x 70e9 / 989e12 = 142.7 ms > 70 GB / 4.8 TB/s = 14.6 ms.
    assert r.prefill_s == pytest.approx(1008 * 2 * 70e9 / 989e12)


def test_gib_and_gb_are_never_confused():
    gib = essay001(gpu={"memory": "80 GiB"}).pool_bytes
    gb = essay001(gpu={"memory": "80 GB"}).pool_bytes
    assert gib - gb == pytest.approx(0.9 * 80 * (2**30 - 1e9))


def test_tensor_parallel_4_splits_weights_and_kv_heads():
    # 70B fp16 (140 GB) on 4 x 80 GB: 35 GB weights per GPU, pool 72 - 35 = 37 GB per GPU.
    # 8 KV heads / 4 = 2 per GPU: 2 x 80 x 2 x 128 x 2 = 81,920 B per token per GPU.
    # Blocks of 16: floor(37e9 / 1,310,720) = 28,228; 1,300 tokens = 82 blocks -> 344 requests.
    r = Scenario.from_dict({
        "model": {"layers": 80, "kv_heads": 8, "head_dim": 128, "params": 70e9, "attention_heads": 64},
        "gpu": {"memory": "80 GB", "bandwidth": "2 TB/s", "flops": "300 TFLOP/s", "count": 4},
        "workload": {"prompt_tokens": 1000, "output_tokens": 300},
        "serving": {"engine": "ideal", "max_model_len": 8192},
    }).evaluate()
    assert r.weight_bytes_per_gpu == pytest.approx(35e9)
    assert r.kv_bytes_per_token_per_gpu == 81_920
    assert (r.pool_blocks, r.max_requests_paged) == (28_228, 344)


def test_max_num_seqs_caps_the_batch():
    # B = 64: memory (16e9 + 64 x 1,150 x 131,072) / 2e12 = 12.82 ms; compute 64 x 16e9 / 150e12 = 6.83 ms.
    r = essay001(serving={"max_num_seqs": 64})
    step = (16e9 + 64 * 1150 * 131072) / 2e12 + 0.003
    prefill = 1000 * 16e9 / 150e12 + 0.003
    assert r.batch_max == 64 and r.batch_limit == "max_num_seqs" and r.decode_bound == "memory"
    assert r.decode_step_s == pytest.approx(step)
    assert r.ceiling_rps == pytest.approx(1 / (prefill + 300 * step / 64))


def test_tpot_promise_no_load_can_meet_gives_zero_with_reason():
    # One sequence alone needs 16 GB / 2 TB/s + 3 ms = 11 ms per token: 10 ms cannot be met.
    r = essay001(slo={"tpot": "10 ms"})
    assert r.goodput_rps == 0 and r.goodput_limit == "tpot"
    assert r.to_dict()["cost_per_million_tokens"] is None
    assert any("11.0 ms per token" in note for note in r.notes())


def test_ttft_promise_below_prefill_gives_zero_with_reason():
    r = essay001(slo={"ttft": "100 ms"})  # prefill alone is 109.7 ms
    assert r.goodput_rps == 0 and r.goodput_limit == "ttft"
    assert any("prefill alone" in note for note in r.notes())


def test_goodput_meets_the_tpot_promise_exactly():
    # At the goodput, TPOT x (1 - λ t_p) equals t_step(λ A TPOT), both pieces recomputed here by hand.
    r = essay001(slo={"tpot": "80 ms"})
    lam, tpot, tp = r.goodput_rps, 0.080, 1000 * 16e9 / 150e12 + 0.003
    batch = lam * 300 * tpot
    step = max((16e9 + batch * 1150 * 131072) / 2e12, batch * 16e9 / 150e12) + 0.003
    assert tpot * (1 - lam * tp) == pytest.approx(step, rel=1e-9)
    assert r.tpot_at_goodput_s == pytest.approx(tpot)
    assert r.goodput_in_flight == pytest.approx(batch)


def test_ttft_promise_binds_where_the_prefill_queue_reaches_it():
    # TTFT(λ) = t_p + (1/2 + λc) [λ t_p (f + c / (1 - (λc)²)) + min(1 - λ t_p, λ A s) s] (slo.ttft_at_rate_s):
    # c = 1,000 x 16 GFLOP / 150 TFLOP/s = 106.7 ms per batched prompt, f = t_p - c = 3 ms, s = the decode step
    # at the load's batch. At the goodput it equals the promise.
    r = essay001(slo={"ttft": "200 ms"})
    lam, tp, c = r.goodput_rps, 1000 * 16e9 / 150e12 + 0.003, 1000 * 16e9 / 150e12
    tpot = max((16e9 / 2e12 + 0.003) / (1 - lam * tp - lam * 300 * 1150 * 131072 / 2e12),
               0.003 / (1 - lam * tp - lam * 300 * 16e9 / 150e12))
    s = tpot * (1 - lam * tp)
    interval = lam * tp * (tp - c + c / (1 - (lam * c) ** 2)) + min(1 - lam * tp, lam * 300 * s) * s
    assert r.goodput_limit == "ttft"
    assert tp + (0.5 + lam * c) * interval == pytest.approx(0.200)
    assert r.ttft_at_goodput_s == pytest.approx(0.200)


def test_generous_promises_leave_the_ceiling():
    r = essay001(slo={"tpot": "1 s", "ttft": "60 s"})
    assert r.goodput_limit == "capacity"  # the prefill queue stays short up to the ceiling, where KV memory is full
    assert r.goodput_rps == pytest.approx(r.ceiling_rps)
    assert essay001(slo={"tpot": "1 s"}).goodput_rps == pytest.approx(essay001().ceiling_rps)


def test_latency_at_the_arrival_rate():
    r = essay001(workload={"arrival_rate": 3.0})
    tp = 1000 * 16e9 / 150e12 + 0.003
    # fixed point TPOT = t_step(3 x 300 x TPOT) / (1 - 3 t_p), memory piece binds at this batch
    a, m = 16e9 / 2e12 + 0.003, 1150 * 131072 / 2e12
    assert r.tpot_at_load_s == pytest.approx(a / (1 - 3 * tp - 3 * 300 * m))
    assert r.load_fraction == pytest.approx(3.0 / r.ceiling_rps)


def test_cost_per_million_tokens():
    r = essay001(slo={"tpot": "50 ms"})
    assert r.cost_per_million_tokens == pytest.approx(2.0 / (r.goodput_rps * 300 * 3600) * 1e6)
    assert round(r.cost_per_million_tokens, 2) == 0.31


def test_int4_weights_cost_0_516_bytes_each():
    r = Scenario.from_dict({
        "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weight_dtype": "int4"},
        "gpu": {"memory": "24 GB", "bandwidth": "300 GB/s", "flops": "121 TFLOP/s"},
        "workload": {"prompt_tokens": 500, "output_tokens": 200}, "serving": {"engine": "ideal", "max_model_len": 8192},
    }).evaluate()
    assert r.weight_bytes_per_gpu == pytest.approx(8e9 * (0.5 + 2 / 128))


def test_functions_broadcast_over_arrays():
    kv = capacity.kv_bytes_per_token(np.array([32, 80]), 8, 128, np.array([2, 1]))
    assert kv.tolist() == [131072, 163840]
    assert capacity.blocks_for(np.array([1, 16, 17, 1800]), 16).tolist() == [1, 1, 2, 113]
    assert capacity.max_requests_paged(28672, np.array([1800, 3600]), 16).tolist() == [253, 127]  # 28,672 // 225
    assert math.isclose(float(capacity.single_stream_tokens_per_s(2e12, 14e9)), 142.857, rel_tol=1e-5)
