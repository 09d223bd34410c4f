"""Engine flags: the sizing as vLLM, TensorRT-LLM and SGLang settings, with each engine's memory fraction.

Essay 001 (80 GB GPU, utilisation 0.9, 16 GB of weights, no reserves): the planner's pool is 80 x 0.9 - 16 =
56 GB. vLLM reads the utilisation as the planner does (0.9); SGLang's static fraction holds weights + pool,
(16 + 56) / 80 = 0.9; TensorRT-LLM gives the KV cache a share of the memory left after the weights,
56 / (80 - 16) = 0.875.
"""

import math
from pathlib import Path

import pytest
import yaml

from capacity import Scenario, load_scenario
from capacity.render.engine_flags import (
    ENGINES,
    engine_settings,
    kv_cache_free_gpu_memory_fraction,
    mem_fraction_static,
    model_id,
    render_text,
)

ROOT = Path(__file__).resolve().parents[2]

#: Flag names as each engine documents them (engine_flags module docstring cites the pages).
DOCUMENTED = {
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--gpu-memory-utilization", "--max-model-len",
             "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype", "--block-size",
             "--enable-prefix-caching", "--quantization", "--dtype",
             # https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment/
             "--data-parallel-size", "--enable-expert-parallel"},
    "tensorrt-llm": {"--tp_size", "--pp_size", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
                     "--kv_cache_free_gpu_memory_fraction",
                     "--ep_size"},  # https://www.mintlify.com/NVIDIA/TensorRT-LLM/deployment/trtllm-serve
    "sglang": {"--tp-size", "--pp-size", "--mem-fraction-static", "--max-running-requests", "--chunked-prefill-size",
               "--context-length", "--kv-cache-dtype", "--page-size", "--quantization",
               # https://docs.sglang.io/cookbook/base/reference/server_arguments
               "--dp-size", "--enable-dp-attention", "--ep-size"},
}


def flags(settings) -> dict[str, str]:
    return {f.flag: f.value for f in settings.flags}


@pytest.fixture(scope="module")
def essay001():
    return load_scenario(ROOT / "scenarios" / "essay-001-sale-day.yaml").evaluate()


def test_memory_fractions_of_essay_001(essay001):
    assert mem_fraction_static(16e9, 56e9, 80e9) == pytest.approx(0.9)
    assert kv_cache_free_gpu_memory_fraction(56e9, 80e9, 16e9) == pytest.approx(0.875)
    assert kv_cache_free_gpu_memory_fraction(56e9, 80e9, 16e9, reserved_bytes=8e9) == pytest.approx(1.0)
    assert flags(engine_settings(essay001, "vllm"))["--gpu-memory-utilization"] == "0.900"
    assert flags(engine_settings(essay001, "sglang"))["--mem-fraction-static"] == "0.900"
    assert flags(engine_settings(essay001, "tensorrt-llm"))["--kv_cache_free_gpu_memory_fraction"] == "0.875"
    assert engine_settings(essay001, "tensorrt-llm").config_file["kv_cache_config"]["free_gpu_memory_fraction"] \
        == 0.875


def test_essay_001_batch_and_context(essay001):
    """328 conversations fit (SPEC, essay 001): every engine's running-request cap is 328."""
    assert flags(engine_settings(essay001, "vllm"))["--max-num-seqs"] == "328"
    assert flags(engine_settings(essay001, "tensorrt-llm"))["--max_batch_size"] == "328"
    assert flags(engine_settings(essay001, "sglang"))["--max-running-requests"] == "328"
    assert flags(engine_settings(essay001, "vllm"))["--max-model-len"] == "32768"
    # block size 1 is the essay's token counting, not a vLLM block size: said, not silently dropped
    assert "--block-size" not in flags(engine_settings(essay001, "vllm"))
    assert any("block_size 1" in note for note in engine_settings(essay001, "vllm").notes)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_each_engine_gets_the_planners_pool(path):
    """Invariant: the engine's own arithmetic with the emitted fraction gives the planner's pool, less at most the
    0.001 the fraction is rounded down by (rounding up would promise memory the plan lacks)."""
    results = load_scenario(path).evaluate()
    s = results.scenario
    memory, weights, pool = s.gpu.memory_bytes, results["weight_bytes_per_gpu"], results["pool_bytes"]
    sglang = float(flags(engine_settings(results, "sglang"))["--mem-fraction-static"])
    # SGLang's static fraction holds the weights and the KV pool; activations live in the rest (engines.py), so
    # its arithmetic subtracts no reserve (the scenarios without an engine now carry vLLM's activation reserve)
    assert 0 <= pool - (sglang * memory - weights) <= 1e-3 * memory
    free = memory - weights - s.serving.reserved_bytes
    trt = float(flags(engine_settings(results, "tensorrt-llm"))["--kv_cache_free_gpu_memory_fraction"])
    assert 0 <= pool - trt * free <= 1e-3 * free
    vllm = flags(engine_settings(results, "vllm"))
    assert float(vllm["--gpu-memory-utilization"]) * memory - weights - s.serving.reserved_bytes == pytest.approx(
        pool, abs=1e-3 * memory)
    assert int(vllm["--tensor-parallel-size"]) == s.gpu.count
    for engine in ENGINES:
        settings = engine_settings(results, engine)
        assert set(flags(settings)) <= DOCUMENTED[engine], engine
        assert settings.command(model_id(results)).split()[0] in ("vllm", "trtllm-serve", "python")


def test_dtypes_and_prefix_map_to_engine_values():
    data = yaml.safe_load((ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml").read_text())
    results = Scenario.from_dict(data).evaluate()  # fp8 weights and KV, a shared prefix, 4-way tensor parallel
    vllm = flags(engine_settings(results, "vllm"))
    assert vllm["--kv-cache-dtype"] == "fp8" and vllm["--quantization"] == "fp8"
    assert "--enable-prefix-caching" in vllm and vllm["--tensor-parallel-size"] == "4"
    assert flags(engine_settings(results, "sglang"))["--kv-cache-dtype"] == "fp8_e4m3"
    trt = engine_settings(results, "tensorrt-llm")
    assert trt.config_file["kv_cache_config"]["dtype"] == "fp8"
    assert trt.config_file["kv_cache_config"]["enable_block_reuse"] is True
    assert model_id(results) == "meta-llama/Llama-3.1-70B"
    data["gpu"]["pipeline_parallel"] = 2
    staged = Scenario.from_dict(data).evaluate()
    assert flags(engine_settings(staged, "vllm"))["--pipeline-parallel-size"] == "2"
    assert flags(engine_settings(staged, "tensorrt-llm"))["--pp_size"] == "2"


def test_unknown_engine_and_text_rendering(essay001):
    with pytest.raises(ValueError, match="engine must be one of vllm, tensorrt-llm, sglang"):
        engine_settings(essay001, "tgi")
    text = render_text(engine_settings(essay001, "tensorrt-llm"), "my-model")
    assert text.splitlines()[1].startswith("trtllm-serve my-model --tp_size 1")
    assert "free_gpu_memory_fraction: 0.875" in text
    multi = engine_settings(essay001, "vllm").command("m", multiline=True)
    assert multi.splitlines()[0] == "vllm serve m \\" and all(line.startswith("    --")
                                                             for line in multi.splitlines()[1:])
    assert not math.isnan(float(flags(engine_settings(essay001))["--gpu-memory-utilization"]))


def test_engine_flags_state_the_moe_layout():
    """Attention DP 8 x EP 8: vLLM --data-parallel-size 8 --enable-expert-parallel; SGLang --tp-size 8 --dp-size 8
    --enable-dp-attention --ep-size 8; TensorRT-LLM --tp_size 8 --ep_size 8 with enable_attention_dp; the running
    batch per rank where each rank schedules its own."""
    from capacity.model.scenario import Scenario

    r = Scenario.from_dict({"model": {"name": "deepseek-r1", "weight_dtype": "fp8"},
                            "gpu": {"name": "h200", "count": 1},
                            "serving": {"attention_data_parallel": 8, "expert_parallel": 8},
                            "workload": {"prompt_tokens": 1000, "output_tokens": 1000}}).evaluate()
    per_rank = str(int(r["batch_max"]) // 8)
    flags = {e: {f.flag: f.value for f in engine_settings(r, e).flags} for e in ("vllm", "sglang", "tensorrt-llm")}
    assert flags["vllm"]["--data-parallel-size"] == "8" and "--enable-expert-parallel" in flags["vllm"]
    assert flags["vllm"]["--max-num-seqs"] == per_rank
    assert (flags["sglang"]["--tp-size"], flags["sglang"]["--dp-size"], flags["sglang"]["--ep-size"]) == ("8", "8", "8")
    assert "--enable-dp-attention" in flags["sglang"]
    assert (flags["tensorrt-llm"]["--tp_size"], flags["tensorrt-llm"]["--ep_size"]) == ("8", "8")
    assert flags["tensorrt-llm"]["--max_batch_size"] == per_rank
    assert engine_settings(r, "tensorrt-llm").config_file["enable_attention_dp"] is True
