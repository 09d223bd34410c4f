"""Engine profiles and quantisation schemes: pool rules, reserves, caps and weights derived by hand."""

import math

import pytest

from capacity import Scenario
from capacity.formulas import quantisation
from capacity.inputs import engines
from capacity.planning.calibration import Factors, Observation, batch_fits, predict

MiB = 2.0**20
H100 = 81_559 * MiB  # the catalog's device-reported total of an H100 SXM
LLAMA8B_PARAMS = 8_030_261_248
EMBED = 2 * 128_256 * 4_096  # llama-3.1-8b: untied embedding + lm_head


def scenario(serving=None, model=None, gpu=None, prompt=1000, output=1000):
    return Scenario.from_dict({"model": {"name": "llama-3.1-8b", **(model or {})},
                               "gpu": {"name": "h100-sxm", **(gpu or {})},
                               "serving": serving or {},
                               "workload": {"prompt_tokens": prompt, "output_tokens": output}})


def test_ideal_engine_changes_nothing():
    plain = scenario({"engine": "ideal"})
    assert plain.serving.engine_defaults == () and plain.serving.step_overhead_s == 0.0
    assert plain.evaluate().notes()[0].startswith("serving.engine: ideal: the essays' conventions")
    assert plain.serving.max_num_seqs is None and plain.serving.reserved_bytes == 0.0
    assert plain.evaluate()["pool_bytes"] == pytest.approx(0.9 * H100 - 2 * LLAMA8B_PARAMS)


def test_no_engine_named_assumes_vllm_and_says_so():
    # SPEC: a scenario that names no engine gets the most common engine's profile, stated as an assumption.
    default, named = scenario(), scenario({"engine": "vllm"})
    assert default.serving.engine == "vllm" and default.serving.engine_defaults == named.serving.engine_defaults
    assert default.evaluate()["pool_bytes"] == named.evaluate()["pool_bytes"]
    notes = default.evaluate().notes()
    assert notes[0].startswith("assumption: no serving.engine named, so vllm's profile applies")
    assert not named.evaluate().notes()[0].startswith("assumption")


def test_vllm_pool_holds_back_the_activation_peak():
    s = scenario({"engine": "vllm"})
    # vLLM >= 0.8 on a >= 70 GiB non-A100 GPU: max_num_seqs 1024, 8192 tokens per pass; the activation peak of
    # a pass: 8192 x 2 B x (3 x 14,336 + 3 x 4,096) = 905,969,664 B.
    act = 8192 * 2 * (3 * 14_336 + 3 * 4_096)
    assert s.serving.max_num_seqs == 1024 and s.serving.max_batched_tokens == 8192
    assert s.serving.reserved_bytes == pytest.approx(act)
    assert s.evaluate()["pool_bytes"] == pytest.approx(0.9 * H100 - 2 * LLAMA8B_PARAMS - act)
    notes = s.evaluate().notes()
    assert notes[0].startswith("engine defaults applied: vllm: gpu_memory_utilization 0.9")


def test_vllm_v0_and_a100_defaults():
    v0 = scenario({"engine": "vllm", "engine_version": "0.6.3", "max_model_len": 20_000})
    assert v0.serving.max_num_seqs == 256 and v0.serving.max_batched_tokens == 20_000  # no chunked prefill
    a100 = Scenario.from_dict({"model": "llama-3.1-8b", "gpu": "a100-80gb", "serving": {"engine": "vllm"},
                               "workload": {"prompt_tokens": 100, "output_tokens": 100}})
    assert a100.serving.max_num_seqs == 256 and a100.serving.max_batched_tokens == 2048


def test_tensorrt_llm_pool_is_a_fraction_of_the_free_memory_and_fp8_weights_get_fp8_kv():
    s = scenario({"engine": "tensorrt-llm"}, model={"weight_dtype": "fp8"})
    weights = (LLAMA8B_PARAMS - EMBED) * 1.0 + EMBED * 2.0  # fp8 scheme: 16-bit embeddings and lm_head
    act = 8192 * 2 * (3 * 14_336 + 3 * 4_096)
    assert s.model.weight_bytes == pytest.approx(weights) and s.model.kv_dtype == "fp8"
    assert s.serving.max_num_seqs == 2048
    assert s.evaluate()["pool_bytes"] == pytest.approx(0.9 * (H100 - weights - act))
    stated = scenario({"engine": "tensorrt-llm"}, model={"weight_dtype": "fp8", "kv_dtype": "fp16"})
    assert stated.model.kv_dtype == "fp16"  # a stated KV dtype wins


def test_sglang_static_fraction_by_tensor_parallel_size():
    assert scenario({"engine": "sglang"}).serving.memory_utilization == 0.88
    tp2 = Scenario.from_dict({"model": "llama-3.1-70b", "gpu": {"name": "h100-sxm", "count": 2},
                              "serving": {"engine": "sglang"}, "workload": {"prompt_tokens": 10, "output_tokens": 10}})
    assert tp2.serving.memory_utilization == 0.87 and tp2.serving.reserved_bytes == 0.0
    assert tp2.gpu.allreduce_latency_s == engines.ALLREDUCE_LATENCY_S


def test_explicit_values_win_over_the_engine():
    s = scenario({"engine": "vllm", "max_num_seqs": 64, "memory_utilization": 0.8, "step_overhead": "3 ms",
                  "activation_memory": "1 GiB"}, gpu={"bandwidth_efficiency": 0.5, "flops_efficiency": 0.5})
    assert s.serving.max_num_seqs == 64 and s.serving.memory_utilization == 0.8
    assert s.serving.step_overhead_s == pytest.approx(3e-3) and s.serving.reserved_bytes == pytest.approx(2**30)
    assert s.gpu.bandwidth_efficiency == 0.5 and s.gpu.flops_efficiency == 0.5
    fitted = scenario({"engine": "vllm"})
    assert (fitted.gpu.bandwidth_efficiency, fitted.gpu.flops_efficiency) == engines.FITTED_EFFICIENCY["hopper"][:2]


def test_batched_prefill_shares_a_pass():
    s = scenario({"engine": "vllm", "step_overhead": "0 ms"}, prompt=128, output=128)
    r = s.evaluate()
    # A 128-token prompt in a pass of 8192 tokens costs 128/8192 of that pass, far less than its own pass.
    assert r["gpu_time_per_request_s"] < r["prefill_s"] + 128 * r["decode_step_s"] / r["batch_max"]


def test_gptq_keeps_embeddings_in_16_bit():
    b = 0.5 + 2.5 / 128
    assert quantisation.SCHEMES["w4a16-gptq"].bytes_per_weight == pytest.approx(b)
    m = scenario(model={"quantization": "w4a16-gptq"}).model
    assert m.weight_bytes == pytest.approx((LLAMA8B_PARAMS - EMBED) * b + EMBED * 2.0)
    assert quantisation.SCHEMES["nvfp4"].bytes_per_weight == 0.5625
    assert quantisation.SCHEMES["mxfp4"].bytes_per_weight == 0.53125
    # weight-only int4 runs bf16 matmuls: the GPU's FLOP/s is its bf16 peak
    assert scenario(model={"quantization": "w4a16-gptq"}, gpu={"flops_efficiency": 1.0}).gpu.flops == \
        pytest.approx(989.5e12)


def test_a_stated_batch_that_does_not_fit_is_flagged_and_runs_at_what_fits():
    s = scenario(prompt=20_000, output=20_000)
    fits = s.evaluate()["max_requests_shared_prefix"]
    big = Observation(s, "output_tokens_per_s", 1.0, batch_size=int(fits) + 50)
    assert not batch_fits(big)
    at_fit = Observation(s, "output_tokens_per_s", 1.0, batch_size=int(fits))
    assert predict(big, Factors.of(s)) == pytest.approx(predict(at_fit, Factors.of(s)) * math.floor(fits) / fits)
    note = scenario({"max_num_seqs": 10_000}, prompt=20_000, output=20_000).evaluate().notes()
    assert any("does not fit in the KV pool" in n for n in note)


def test_unknown_engine_is_a_one_line_error():
    with pytest.raises(Exception, match="serving.engine must be one of vllm, tensorrt-llm, sglang"):
        scenario({"engine": "tgi"})
