"""Attention's arithmetic in prefill under the engine profiles (``StepModel.prefill_attention_s``).

A causal prompt of P tokens multiplies ``heads x (d_qk + d_v)`` values per query and context token in every KV
layer: ``D L P^2`` FLOPs (FlashAttention's count), at the 16-bit peak whatever the weights' dtype. The essays count
the weights' 2 N per token only, so ``engine: ideal`` leaves it out.
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity import Scenario
from capacity.model.analysis import complete_inputs, replica_stages, step_model
from capacity.simulator.cost_models import RooflineCost


def _scenario(model: str, gpu: str, engine: str, prompt: int = 8192, **gpu_keys) -> Scenario:
    return Scenario.from_dict({"model": model, "gpu": {"name": gpu, **gpu_keys}, "serving": {"engine": engine},
                               "workload": {"prompt_tokens": prompt, "output_tokens": 256}})


def test_the_attention_width_of_gqa_and_mla_models():
    # GQA: heads x 2 x head_dim; MLA as engines prefill it: 128 heads x (128 + 64 + 128) (DeepSeek-R1 config.json)
    assert _scenario("llama-3.1-8b", "h100-sxm", "vllm").inputs()["attention_dim"] == 32 * 2 * 128
    assert _scenario("deepseek-r1", "b200", "sglang", count=16).inputs()["attention_dim"] == 128 * (128 + 64 + 128)
    assert _scenario("llama-3.1-8b", "h100-sxm", "ideal").inputs()["attention_dim"] == 0.0


def test_prefill_adds_the_attention_of_its_prompts_at_the_16_bit_peak():
    s = _scenario("llama-3.1-8b", "h100-sxm", "vllm")
    x = complete_inputs(s.inputs())
    model, _ = step_model(x, np.asarray(8192.0 + 128.0))
    p = 8192.0
    # by hand: D L P^2 FLOPs at the 16-bit peak x efficiency, one GPU
    hand = 8192 * 32 * p * p / s.gpu.effective_attention_flops
    assert float(model.prefill_attention_s(p)) == pytest.approx(hand, rel=1e-12)
    assert s.gpu.attention_flops == pytest.approx(989.5e12)  # the H100 SXM's dense bf16 peak (catalog)
    # a pass of 4 prompts of 2,048 tokens holds 4 prompts' attention, not that of one 8,192-token prompt
    four = float(model.prefill_attention_s(p, 2048.0))
    assert four == pytest.approx(4 * float(model.prefill_attention_s(2048.0)), rel=1e-12)
    assert four == pytest.approx(hand / 4, rel=1e-12)
    # the whole prefill: the compute term grows by exactly the attention (compute-bound at 8,192 tokens)
    assert float(model.prefill_s(p)) - float(model.prefill_s(p, 1.0)) == pytest.approx(
        hand - float(model.prefill_attention_s(p, 1.0)), rel=1e-9)


def test_fp8_weights_do_not_speed_attention_up():
    # Qwen3-32B fp8 on H100: the matmuls of the weights run at the fp8 peak, attention at the bf16 one
    s = Scenario.from_dict({"model": "qwen3-32b", "gpu": "h100-sxm", "serving": {"engine": "vllm"},
                            "workload": {"prompt_tokens": 4096, "output_tokens": 256}})
    fp8 = Scenario.from_dict({**s.raw, "model": {"name": "qwen3-32b", "quantization": "fp8"}})
    assert fp8.gpu.flops == pytest.approx(2 * s.gpu.flops, rel=1e-3)
    assert fp8.gpu.attention_flops == s.gpu.attention_flops == pytest.approx(989.5e12)


def test_sliding_window_layers_attend_to_their_window():
    # gpt-oss-120b: half its layers keep a 128-token window, so they attend to 128 tokens, not P / 2
    s = _scenario("gpt-oss-120b", "h200", "vllm")
    x = complete_inputs(s.inputs())
    model, _ = step_model(x, np.asarray(8192.0))
    f, w = float(x["local_layer_fraction"]), float(x["sliding_window"])
    assert (f, w) == (0.5, 128.0)
    per_pair = float(model.attention_s)
    assert float(model.prefill_attention_s(8192.0)) == pytest.approx(8192 * (0.5 * 4096 + 0.5 * 128) * per_pair,
                                                                      rel=1e-12)


def test_the_ttft_and_the_simulator_charge_the_same_attention():
    s = _scenario("llama-3.1-8b", "h100-sxm", "vllm", prompt=4096)
    model, _, prefill, _ = replica_stages(s.inputs())
    # the arithmetic a prompt adds to a batched pass, c, includes its attention ...
    weights_only = 4096 * (2 * float(model.prefill_params_per_gpu) / float(model.flops) + float(model.comm_per_token))
    attention = float(model.prefill_attention_s(4096.0))
    assert float(prefill.compute_s) == pytest.approx(weights_only + attention, rel=1e-12)
    # ... and the simulator charges each prompt token the same mean
    cost = RooflineCost.from_scenario(s)
    assert cost.prefill_compute_s * 4096 == pytest.approx(
        4096 * 2 * float(model.prefill_params_per_gpu) / float(model.flops) + attention, rel=1e-12)


def test_a_cached_prefix_is_attended_to_not_recomputed():
    # 4,096-token prompts whose first 3,072 tokens are a cached shared prefix (block 16: 192 blocks): 1,024 tokens
    # are prefilled, each attending to the 3,072 cached keys and to the new ones before it, a mean context of
    # 3,072 + 512: D L (P^2 + 2 P c) FLOPs for P = 1,024, c = 3,072
    s = Scenario.from_dict({"model": "llama-3.1-8b", "gpu": "h100-sxm", "serving": {"engine": "vllm"},
                            "workload": {"prompt_tokens": 4096, "output_tokens": 256, "shared_prefix_tokens": 3072}})
    model, _, prefill, _ = replica_stages(s.inputs())
    assert float(prefill.tokens) == 1024
    p, c = 1024.0, 3072.0
    hand = 8192 * 32 * (p * p + 2 * p * c) / s.gpu.effective_attention_flops
    weights_only = p * (2 * float(model.prefill_params_per_gpu) / float(model.flops) + float(model.comm_per_token))
    assert float(prefill.compute_s) - weights_only == pytest.approx(hand, rel=1e-12)
    # the simulator charges the same per prompt token
    cost = RooflineCost.from_scenario(s)
    assert cost.prefill_compute_s * p == pytest.approx(
        p * 2 * float(model.prefill_params_per_gpu) / float(model.flops) + hand, rel=1e-12)
