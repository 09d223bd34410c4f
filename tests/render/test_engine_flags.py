"""Engine flags: the sizing as vLLM, TensorRT-LLM and SGLang settings, with each engine's memory fraction.

Essay 001 (80 GB GPU, utilisation 0.9, 16 GB of weights, no reserves): the planner's pool is 80 x 0.9 - 16 =
56 GB. vLLM reads the utilisation as the planner does (0.9); SGLang's static fraction holds weights + pool,
(16 + 56) / 80 = 0.9; TensorRT-LLM gives the KV cache a share of the memory left after the weights,
56 / (80 - 16) = 0.875.
"""

import json
import math
from pathlib import Path

import pytest
import yaml

from capacity import Scenario, load_scenario
from capacity.cli import main
from capacity.planning.sizing import size
from capacity.render.engine_flags import (
    ENGINES,
    engine_settings,
    kv_cache_free_gpu_memory_fraction,
    mem_fraction_static,
    model_id,
    render_text,
    sizing_settings,
)

ROOT = Path(__file__).resolve().parents[2]

#: Flag names as each engine documents them (engine_flags module docstring cites the pages).
DOCUMENTED = {
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--gpu-memory-utilization", "--max-model-len",
             "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype", "--block-size",
             "--enable-prefix-caching", "--quantization", "--dtype", "--enable-chunked-prefill",
             "--no-enable-chunked-prefill", "--kv-transfer-config",
             # https://docs.vllm.ai/en/latest/serving/expert_parallel_deployment/
             "--data-parallel-size", "--enable-expert-parallel"},
    "tensorrt-llm": {"--tp_size", "--pp_size", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
                     "--kv_cache_free_gpu_memory_fraction",
                     "--ep_size"},  # https://www.mintlify.com/NVIDIA/TensorRT-LLM/deployment/trtllm-serve
    "sglang": {"--tp-size", "--pp-size", "--mem-fraction-static", "--max-running-requests", "--chunked-prefill-size",
               "--context-length", "--kv-cache-dtype", "--page-size", "--quantization", "--disaggregation-mode",
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
    assert text.splitlines()[1] == "# layout: TP1, prefill and decode on the same GPUs"
    assert text.splitlines()[2].startswith("trtllm-serve my-model --tp_size 1")
    assert "free_gpu_memory_fraction: 0.875" in text
    multi = engine_settings(essay001, "vllm").command("m", multiline=True)
    assert multi.splitlines()[0] == "vllm serve m \\" and all(line.startswith("    --")
                                                             for line in multi.splitlines()[1:])
    assert not math.isnan(float(flags(engine_settings(essay001))["--gpu-memory-utilization"]))


# --- the sizing's chosen layout, not the stated one (issue 27) ----------------------------------------------------

#: Issue 27's sale: stated TP4, colocated; the answer is TP8 chunked prefill (tests/planning/test_sizing.py), under
#: the essays' convention (engine: ideal) as the issue reproduced it.
SALE = {"name": "sale", "model": {"name": "llama-3-70b"}, "gpu": {"name": "h100-sxm", "count": 4},
        "serving": {"engine": "ideal"},
        "workload": {"prompt_tokens": 2000, "output_tokens": 400, "arrival_rate": 20},
        "slo": {"tpot": "40 ms", "ttft": "1.5 s"}}

#: Flags that say the serving mode, per engine: (chunked prefill on?, separate-pool role) read from the flags.
def mode_of(settings) -> tuple[bool, str]:
    f, config = flags(settings), settings.config_file
    if settings.engine == "vllm":
        role = "pools" if "--kv-transfer-config" in f else ""
        return "--enable-chunked-prefill" in f and "--no-enable-chunked-prefill" not in f, role
    if settings.engine == "sglang":
        return f["--chunked-prefill-size"] != "-1", f.get("--disaggregation-mode", "")
    return bool(config["enable_chunked_prefill"]), "pools" if "cache_transceiver_config" in config else ""


def tp_of(settings) -> int:
    f = flags(settings)
    return int(f.get("--tensor-parallel-size") or f.get("--tp_size") or f["--tp-size"])


def _cli(tmp_path, capsys, data: dict, *args: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["flags", str(path), *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("engine", list(ENGINES))
def test_flags_render_the_chosen_layout_not_the_stated_one(engine, tmp_path, capsys):
    """Before: ``capacity flags`` printed the stated TP4 with the engine's chunked default where the answer is TP8
    with chunked prefill on 2 replicas; now the CLI and the report render the answer's TP, mode and replicas."""
    z = size(Scenario.from_dict(SALE))
    assert (z.tensor_parallel, z.mode) == (8, "chunked") and not z.stated_layout  # the case the test needs
    (settings,) = sizing_settings(z, engine)
    assert tp_of(settings) == 8 != SALE["gpu"]["count"]
    assert mode_of(settings) == (True, "")
    assert settings.replicas == z.replicas and settings.mode == "chunked"
    batch = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "tensorrt-llm": "--max_batch_size"}
    assert int(flags(settings)[batch[engine]]) == z.replica["batch_max"] != z.results["batch_max"]
    out = json.loads(_cli(tmp_path, capsys, SALE, "--engine", engine, "--format", "json"))
    assert [(tp_of_dict(o), o["mode"], o["replicas"]) for o in out] == [(8, "chunked", z.replicas)]
    text = _cli(tmp_path, capsys, SALE, "--engine", engine)
    assert f"# layout: {z.replicas} replicas of TP8, chunked prefill" in text


def tp_of_dict(one: dict) -> int:
    values = {f["flag"]: f["value"] for f in one["flags"]}
    return int(values.get("--tensor-parallel-size") or values.get("--tp_size") or values["--tp-size"])


@pytest.mark.parametrize("engine", list(ENGINES))
def test_separate_pools_get_two_commands_with_their_replicas(engine):
    data = {**SALE, "fleet": {"modes": ["disaggregated"]}}
    z = size(Scenario.from_dict(data))
    assert z.mode == "disaggregated" and z.prefill_replicas and z.decode_replicas
    prefill, decode = sizing_settings(z, engine)
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert (prefill.replicas, decode.replicas) == (z.prefill_replicas, z.decode_replicas)
    assert prefill.replicas + decode.replicas == z.replicas
    assert tp_of(prefill) == tp_of(decode) == z.tensor_parallel
    assert mode_of(prefill)[1] and mode_of(decode)[1]  # each command says it is one side of separate pools
    assert mode_of(prefill)[0]                          # a prefill pool prefills in chunks of the token budget
    if engine == "sglang":
        assert (mode_of(prefill)[1], mode_of(decode)[1]) == ("prefill", "decode")


def test_colocated_turns_chunked_prefill_off(essay001):
    """A colocated layout assumes prefills pause decoding: chunked prefill, vLLM V1's default, is turned off, and
    vLLM then needs a step budget of at least max-model-len."""
    vllm = flags(engine_settings(essay001, "vllm"))
    assert "--no-enable-chunked-prefill" in vllm and "--enable-chunked-prefill" not in vllm
    assert int(vllm["--max-num-batched-tokens"]) >= int(vllm["--max-model-len"])
    assert flags(engine_settings(essay001, "sglang"))["--chunked-prefill-size"] == "-1"
    assert engine_settings(essay001, "tensorrt-llm").config_file["enable_chunked_prefill"] is False
    chunked = flags(engine_settings(essay001, "vllm", mode="chunked"))
    assert chunked["--max-num-batched-tokens"] == str(essay001.scenario.serving.max_batched_tokens)
    with pytest.raises(ValueError, match="mode must be one of"):
        engine_settings(essay001, "vllm", mode="speculative-pools")


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


#: The chat preset at 40 requests/s on split pools (prefill on L40S, decode on H100 SXM) with EAGLE speculation.
SPLIT_SPEC = {**yaml.safe_load((ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").read_text()),
              "pools": {"prefill": {"gpu": {"name": "l40s", "count": 1}},
                        "decode": {"gpu": {"name": "h100-sxm", "count": 1}}}}
SPLIT_SPEC = {**SPLIT_SPEC, "workload": {**SPLIT_SPEC["workload"], "arrival_rate": 40},
              "serving": {**SPLIT_SPEC["serving"],
                          "speculative": {"method": "eagle", "draft_tokens": 3, "acceptance_rate": 0.7}}}
#: Where each engine's speculative-decoding settings live: flags, or the TensorRT-LLM options file's section.
SPEC_FLAGS = {"vllm": ("--speculative-config",), "sglang": ("--speculative-algorithm", "--speculative-num-steps",
                                                            "--speculative-num-draft-tokens"),
              "tensorrt-llm": ("speculative_config",)}


def _speculation(settings) -> set[str]:
    """The speculative-decoding settings a command carries (flags and options-file keys)."""
    keys = set(flags(settings)) | set(settings.config_file or {})
    return {key for key in keys if "speculative" in key}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("modes", [None, ["disaggregated"]])
def test_only_the_decode_pool_gets_the_speculative_flags(engine, modes, tmp_path, capsys):
    """A prefill pool only runs prompts: a prefill yields one token, so nothing is drafted or verified there. Before,
    ``capacity flags`` gave both pools the speculative flags (and a drafter to load) under split pools; now the
    decode pool's command carries them and the prefill pool's says where they went."""
    data = SPLIT_SPEC if modes is None else {**{k: v for k, v in SPLIT_SPEC.items() if k != "pools"},
                                             "fleet": {"modes": modes}}
    z = size(Scenario.from_dict(data))
    assert z.mode == ("split" if modes is None else "disaggregated")
    prefill, decode = sizing_settings(z, engine)
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert _speculation(prefill) == set()
    assert set(SPEC_FLAGS[engine]) <= _speculation(decode)
    assert any("decode pool only" in note for note in prefill.notes)
    assert not any("decode pool only" in note for note in decode.notes)
    out = json.loads(_cli(tmp_path, capsys, data, "--engine", engine, "--format", "json"))
    assert [o["role"] for o in out] == ["prefill", "decode"]
    spec_in = [any("speculative" in f["flag"] for f in o["flags"]) or "speculative_config" in (o.get("config_file")
                                                                                            or {}) for o in out]
    assert spec_in == [False, True]
    text = _cli(tmp_path, capsys, data, "--engine", engine)
    prefill_text, decode_text = text.split("decode pool: flags", 1)
    assert "speculative" not in prefill_text.replace("speculative decoding (eagle) runs in the decode pool only", "")
    assert "speculative" in decode_text


def test_one_pool_keeps_its_speculative_flags():
    data = {k: v for k, v in SPLIT_SPEC.items() if k != "pools"}
    z = size(Scenario.from_dict({**data, "fleet": {"modes": ["colocated"]}}))
    for engine in ENGINES:
        (settings,) = sizing_settings(z, engine)
        assert set(SPEC_FLAGS[engine]) <= _speculation(settings)


def test_a_quantisation_scheme_is_what_the_flags_serve():
    """``model.quantization: fp8`` is served as fp8 weights (vLLM ``--quantization fp8``, no 16-bit ``--dtype``);
    an int4 scheme as a checkpoint vLLM reads the method from (the session's note: fp8 printed ``--dtype float16``)."""
    from capacity import Scenario
    from capacity.render.engine_flags import engine_settings

    def flags(scheme):
        s = Scenario.from_dict({"model": {"name": "llama-3.1-8b", "quantization": scheme}, "gpu": "h100-sxm",
                                "serving": {"engine": "vllm"},
                                "workload": {"prompt_tokens": 500, "output_tokens": 200}})
        got = engine_settings(s.evaluate(), "vllm")
        return {f.flag: f.value for f in got.flags}, got.notes

    fp8, _ = flags("fp8")
    assert fp8.get("--quantization") == "fp8" and "--dtype" not in fp8
    awq, notes = flags("w4a16-awq")
    assert "--dtype" not in awq and any("int4 weights" in n for n in notes)
