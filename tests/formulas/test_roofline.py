"""The roofline step times (``capacity/formulas/roofline.py``) on essay 001's worked example, by hand.

Essay 001: an 8B model in 16 GB of weights on a GPU of 2 TB/s and 150 TFLOP/s (both effective), step overhead
3 ms, 328 requests of 1,000 prompt + 300 output tokens, 131,072 KV bytes per token.
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity.formulas.roofline import (
    ceiling_rps,
    critical_batch,
    decode_compute_s,
    decode_memory_s,
    decode_share,
    decode_step_s,
    gpu_time_per_request_s,
    prefill_s,
    single_stream_tokens_per_s,
    tpot_at_ceiling_s,
)

W, N, BW, F, OVERHEAD = 16e9, 8e9, 2e12, 150e12, 0.003
B, KV, P, A = 328, 131_072, 1_000, 300
CONTEXT = P + A / 2  # the mean context a decoding request holds: 1,150 tokens


def test_decode_memory_s():
    # (16e9 + 328 x 1,150 x 131,072) / 2e12 = (16e9 + 49.44e9) / 2e12 = 32.72 ms
    assert decode_memory_s(W, B, CONTEXT, KV, BW) == pytest.approx((16e9 + 328 * 1_150 * 131_072) / 2e12, rel=1e-15)
    assert decode_memory_s(W, B, CONTEXT, KV, BW) == pytest.approx(0.03272, abs=5e-6)


def test_decode_compute_s():
    # 328 x 2 x 8e9 / 150e12 = 34.99 ms
    assert decode_compute_s(B, N, F) == pytest.approx(328 * 16e9 / 150e12, rel=1e-15)


def test_decode_step_s_is_the_slower_term_plus_overhead():
    # max(32.72, 34.99) + 3 = 37.99 ms; at batch 1 the weights dominate: 16e9/2e12 + 3 ms = 11.07 ms (KV is small)
    assert decode_step_s(W, B, CONTEXT, KV, BW, N, F, OVERHEAD) == pytest.approx(328 * 16e9 / 150e12 + 0.003, rel=1e-15)
    one = decode_step_s(W, 1, CONTEXT, KV, BW, N, F, OVERHEAD)
    assert one == pytest.approx((16e9 + 1_150 * 131_072) / 2e12 + 0.003, rel=1e-15)


def test_prefill_s():
    # max(16e9 / 2e12, 1,000 x 16e9 / 150e12) + 3 ms = max(8, 106.7) + 3 = 109.7 ms; a 10-token prompt reads weights
    assert prefill_s(W, P, N, BW, F, OVERHEAD) == pytest.approx(1_000 * 16e9 / 150e12 + 0.003, rel=1e-15)
    assert prefill_s(W, 10, N, BW, F, OVERHEAD) == pytest.approx(16e9 / 2e12 + 0.003, rel=1e-15)


def test_ceiling_share_and_tpot():
    step, pre = decode_step_s(W, B, CONTEXT, KV, BW, N, F, OVERHEAD), prefill_s(W, P, N, BW, F, OVERHEAD)
    per_request = pre + A * step / B  # 109.7 + 300 x 37.99 / 328 = 144.4 ms
    assert gpu_time_per_request_s(pre, step, B, A) == pytest.approx(per_request, rel=1e-15)
    assert ceiling_rps(pre, step, B, A) == pytest.approx(1 / per_request, rel=1e-15)  # 6.93 requests/s
    assert round(float(ceiling_rps(pre, step, B, A)), 1) == 6.9
    share = (A * step / B) / per_request  # 0.24
    assert decode_share(pre, step, B, A) == pytest.approx(share, rel=1e-15)
    assert round(float(share), 2) == 0.24
    assert tpot_at_ceiling_s(step, share) == pytest.approx(step / share, rel=1e-15)  # 158 ms
    assert ceiling_rps(pre, step, 0, A) == 0.0 and tpot_at_ceiling_s(step, 0.0) == np.inf  # nothing fits


def test_single_stream_and_critical_batch():
    assert single_stream_tokens_per_s(BW, W) == 125.0  # 2e12 / 16e9
    assert critical_batch(W, N, BW, F) == pytest.approx(75.0, rel=1e-15)  # 16e9 x 150e12 / (16e9 x 2e12)


def test_attention_arithmetic_is_flash_attentions_count():
    # A causal prompt of P tokens does 4 P^2 heads d / 2 FLOPs a layer (FlashAttention-2, Dao 2023, sec. 4.1: the
    # forward pass's 4 s^2 h d, halved by the causal mask). Llama-3.1-8B: 32 heads of 128 (D = 32 x 2 x 128), 32
    # layers, 8,192 tokens, on 2 GPUs of 1 PFLOP/s: 2 P^2 h d L / (2 x 1e15) seconds.
    from capacity.formulas.roofline import attention_s, attention_s_per_pair

    p, heads, d, layers, gpus, f = 8192.0, 32, 128, 32, 2, 1e15
    hand = 4.0 * p * p * heads * d / 2.0 * layers / (gpus * f)
    per_pair = attention_s_per_pair(heads * 2 * d, layers, gpus, f)
    assert float(attention_s(p, p / 2.0, per_pair)) == pytest.approx(hand, rel=1e-15)
    assert hand * gpus * f == pytest.approx(17.59e12, rel=1e-3)  # 17.6 TFLOP, the docstring's figure
    # a prefill pass adds it to the weights' arithmetic before the memory term is compared
    assert float(prefill_s(16e9, 1000, 8e9, 2e12, 150e12, 3e-3, 0.01)) == pytest.approx(
        1000 * 16e9 / 150e12 + 0.01 + 3e-3, rel=1e-15)
