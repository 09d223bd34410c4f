"""Issue 14's catalog refresh: the new GPUs and models load, evaluate through the CLI, agree with their configs.

Every expected value here is derived by hand from the config.json / datasheet numbers the catalog cites (the
arithmetic is in each test), not read back from the planner.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from capacity import Scenario
from capacity.cli import main
from capacity.inputs import catalog
from capacity.inputs.hf_config import param_counts
from capacity.inputs.units import parse_quantity

#: The GPUs and models issue 14 asks for, by catalog key (present) or by the name the catalog's `missing` list
#: gives the reason under (absent).
NEW_GPUS = ["b300", "mi355x", "gb200", "mi325x", "gaudi3", "l40", "rtx-4090", "rtx-5090", "h20"]
EXPLAINED_GPUS = ["a10g"]
NEW_MODELS = ["llama-3.3-70b", "llama-4-scout", "llama-4-maverick", "qwen3-32b", "qwen3-235b-a22b", "deepseek-r1",
              "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "phi-4", "mistral-small-24b"]
#: Numeric GPU fields: each one an issue-14 entry carries is commented on its own line with the source's words.
GPU_NUMBERS = ("memory", "bandwidth", "flops_bf16", "flops_fp8", "flops_int8", "flops_fp4", "interconnect_bandwidth",
               "tdp_watts", "price_per_hour")


def _raw_gpu_blocks() -> dict[str, list[str]]:
    """The YAML lines of each GPU entry, by key (the catalog's text, to see the comment beside each number)."""
    lines = (catalog.CATALOG_DIR / "gpu_catalog.yaml").read_text(encoding="utf-8").splitlines()
    blocks: dict[str, list[str]] = {}
    key = None
    for line in lines:
        head = re.match(r"^  ([a-z0-9][a-z0-9.-]*):\s*$", line)
        if head:
            key = head.group(1)
            blocks[key] = []
        elif line and not line.startswith(" "):
            key = None
        elif key:
            blocks[key].append(line)
    return blocks


def test_issue14_entries_are_present_or_explained():
    assert set(NEW_GPUS) <= set(catalog.gpus())
    assert set(NEW_MODELS) <= set(catalog.models())
    with open(catalog.CATALOG_DIR / "gpu_catalog.yaml", encoding="utf-8") as fh:
        missing = " ".join(yaml.safe_load(fh)["missing"])
    for name in EXPLAINED_GPUS:
        assert name not in catalog.gpus() and f"{name}: not added" in missing, name


@pytest.mark.parametrize("key", NEW_GPUS)
def test_new_gpu_numbers_each_cite_their_source(key):
    gpu, block = catalog.gpu(key), _raw_gpu_blocks()[key]
    assert str(gpu["source"]).startswith("https://") and len(str(gpu.get("notes", ""))) > 200
    for field in GPU_NUMBERS:
        lines = [line for line in block if re.match(rf"^\s+{field}:", line)]
        if field in gpu:
            assert len(lines) == 1 and "#" in lines[0], f"{key}.{field} has no source comment"
    # Dense figures: an 8-bit peak is the bf16 one or twice it (Gaudi 3 runs fp8 at the bf16 rate), never 4x (a
    # sparse figure beside a dense one) -- except on GeForce, whose FP32-accumulate bf16 rate is itself halved.
    bf16 = parse_quantity(gpu["flops_bf16"], "flops")
    allowed = (1.0, 2.0, 4.0) if "GeForce" in gpu["name"] else (1.0, 2.0)
    for field in ("flops_fp8", "flops_int8"):
        if field in gpu:
            ratio = parse_quantity(gpu[field], "flops") / bf16
            assert any(ratio == pytest.approx(a, rel=0.01) for a in allowed), (key, field, ratio)


@pytest.mark.parametrize("key", NEW_MODELS)
def test_new_model_is_sourced(key):
    model = catalog.model(key)
    assert re.fullmatch(r"https://huggingface\.co/[^ ]+/blob/main/config\.json", model["source"]), key
    assert str(model["params_source"]).startswith("https://") and "config" in model["notes"]
    assert model["hf_id"] in model["source"]


def _config_of(entry: dict) -> dict:
    """The config.json keys a catalog entry copies, back under their config names (for capacity.inputs.hf_config)."""
    c = {"model_type": entry["model_type"], "hidden_size": entry["hidden_size"], "num_hidden_layers": entry["layers"],
         "num_attention_heads": entry["attention_heads"], "num_key_value_heads": entry["kv_heads"],
         "vocab_size": entry["vocab_size"], "intermediate_size": entry["intermediate_size"],
         "tie_word_embeddings": entry["tie_word_embeddings"]}
    for ours, theirs in (("head_dim", "head_dim"), ("num_experts", "num_experts"),
                         ("experts_per_token", "num_experts_per_tok"), ("num_shared_experts", "n_shared_experts"),
                         ("moe_intermediate_size", "moe_intermediate_size"),
                         ("first_dense_layers", "first_k_dense_replace"), ("kv_lora_rank", "kv_lora_rank"),
                         ("q_lora_rank", "q_lora_rank"), ("qk_rope_head_dim", "qk_rope_head_dim"),
                         ("qk_nope_head_dim", "qk_nope_head_dim"), ("v_head_dim", "v_head_dim")):
        if ours in entry:
            c[theirs] = entry[ours]
    if entry.get("attention") == "mla":
        c.pop("head_dim", None)
        c["topk_method"] = "noaux_tc"  # DeepSeek-V3/R1 config.json
    return c


@pytest.mark.parametrize("key, model_type, rel", [
    ("llama-3.3-70b", "llama", 0.0), ("phi-4", "phi3", 0.0), ("mistral-small-24b", "mistral", 0.0),
    ("qwen3-32b", "qwen3", 0.005), ("qwen3-235b-a22b", "qwen3_moe", 0.005), ("deepseek-r1", "deepseek_v3", 0.005)])
def test_config_shapes_reproduce_the_sourced_parameter_count(key, model_type, rel):
    """The architecture numbers (from config.json) and the parameter count (from the card / safetensors) are
    read from different sources; the weight shapes they imply must add up to the published count (exact where
    the source gives every digit, within the card's rounding where it says e.g. "32.8B")."""
    entry = catalog.model(key)
    total, active = param_counts(_config_of({**entry, "model_type": model_type}))
    assert total == pytest.approx(entry["params"], rel=rel, abs=0)
    if entry.get("active_params"):  # the card's active figure is rounded to the billion ("22B", "37B")
        assert active == pytest.approx(entry["active_params"], rel=0.03)


def test_layer_patterns_match_the_configs():
    # gemma-3: transformers Gemma3TextConfig makes layer i global when (i + 1) % sliding_window_pattern == 0 (6).
    assert catalog.model("gemma-3-27b")["local_layers"] == sum((i + 1) % 6 != 0 for i in range(62)) == 52
    # llama-4: layer i is chunked (RoPE) unless (i + 1) % no_rope_layer_interval == 0 (4).
    for key in ("llama-4-scout", "llama-4-maverick"):
        assert catalog.model(key)["local_layers"] == sum((i + 1) % 4 != 0 for i in range(48)) == 36
    # gpt-oss: layer_types alternates sliding_attention / full_attention from layer 0.
    for key, layers in (("gpt-oss-120b", 36), ("gpt-oss-20b", 24)):
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        assert catalog.model(key)["local_layers"] == types.count("sliding_attention") == layers // 2


def _evaluate_cli(tmp_path, model, gpu: str, count: int = 1) -> dict:
    path, out = tmp_path / "s.yaml", tmp_path / "out.json"
    scenario = {"model": model, "gpu": {"name": gpu, "count": count},
                "workload": {"prompt_tokens": 1500, "output_tokens": 300}}
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    assert main(["evaluate", str(path), "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_cli_evaluates_new_models_with_hand_computed_kv(tmp_path):
    # llama-3.3-70b (GQA, config: 80 layers, 8 KV heads, head_dim 8192/64 = 128), fp16: 2 x 80 x 8 x 128 x 2 B.
    llama = _evaluate_cli(tmp_path, "llama-3.3-70b", "b300")
    assert llama["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2 == 327_680
    # 1,800 tokens in 16-token blocks: ceil(1800 / 16) = 113 blocks, no window.
    assert llama["blocks_per_request"] == 113
    # 70,553,706,496 params x 2 B on one 288 GB B300.
    assert llama["weight_bytes_per_gpu"] == pytest.approx(70_553_706_496 * 2, rel=1e-12)

    # gpt-oss-120b (config: 36 layers, 8 KV heads, head_dim 64): 2 x 36 x 8 x 64 x 2 B ...
    oss = _evaluate_cli(tmp_path, "gpt-oss-120b", "mi355x")
    assert oss["kv_bytes_per_token"] == 2 * 36 * 8 * 64 * 2 == 73_728
    # ... and half the layers keep a 128-token window: 0.5 x 113 + 0.5 x ceil(128 / 16) = 60.5 blocks.
    assert oss["blocks_per_request"] == 0.5 * 113 + 0.5 * 8 == 60.5
    # MXFP4 checkpoint: embeddings + lm_head (201,088 x 2,880 each, untied) in 16 bit, the rest at 4 + 8/32 bits.
    sixteen = 2 * 201_088 * 2_880
    assert oss["weight_bytes_per_gpu"] == pytest.approx((116_829_156_672 - sixteen) * (0.5 + 1 / 32) + sixteen * 2,
                                                        rel=1e-12)

    # deepseek-r1 (MLA: kv_lora_rank 512 + qk_rope_head_dim 64 per layer, 61 layers), fp16: 61 x 576 x 2 B.
    r1 = _evaluate_cli(tmp_path, {"name": "deepseek-r1", "weight_dtype": "fp8"}, "gb200", 8)
    assert r1["kv_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272

    # gemma-3-27b: 62 layers x 16 KV heads x head_dim 128; 52 local layers cap at the 1,024-token window.
    gemma = _evaluate_cli(tmp_path, "gemma-3-27b", "h20")
    assert gemma["kv_bytes_per_token"] == 2 * 62 * 16 * 128 * 2 == 507_904
    assert gemma["blocks_per_request"] == pytest.approx((10 * 113 + 52 * (1024 // 16)) / 62, rel=1e-12)


@pytest.mark.parametrize("gpu", NEW_GPUS)
def test_new_gpu_sizes_a_model(gpu):
    """Each new GPU builds and evaluates; its peak bandwidth and memory reach the result unchanged."""
    scenario = Scenario.from_dict({"model": "llama-3.1-8b", "gpu": gpu,
                                   "serving": {"max_model_len": 8192, "engine": "ideal"},
                                   "workload": {"prompt_tokens": 1000, "output_tokens": 200}})
    entry = catalog.gpu(gpu)
    assert scenario.gpu.memory_bytes == parse_quantity(entry["memory"], "bytes")
    assert scenario.gpu.bandwidth == parse_quantity(entry["bandwidth"], "bandwidth")
    values = scenario.evaluate().values
    # pool = memory x 0.9 - weights (8,030,261,248 params x 2 B), the essays' convention (engine: ideal).
    assert values["pool_bytes"] == pytest.approx(scenario.gpu.memory_bytes * 0.9 - 8_030_261_248 * 2, rel=1e-12)
    assert values["goodput_rps"] > 0


def test_mxfp4_weights_use_fp4_tensor_cores_only_where_the_gpu_has_them():
    # MI355X and GB200 state a dense FP4 peak; H20 (Hopper) has none, so MXFP4 matmuls fall back to bf16.
    for gpu, key in (("mi355x", "flops_fp4"), ("gb200", "flops_fp4"), ("h20", "flops_bf16")):
        scenario = Scenario.from_dict({"model": "gpt-oss-20b", "gpu": gpu,
                                       "workload": {"prompt_tokens": 100, "output_tokens": 10}})
        assert scenario.gpu.flops == parse_quantity(catalog.gpu(gpu)[key], "flops"), gpu


CONFIGS = catalog.CATALOG_DIR.parent.parent / "tests" / "data" / "configs"
#: Catalog key -> the config.json keys it copies (the first one present).
CONFIG_KEYS = {"layers": ("num_hidden_layers",), "attention_heads": ("num_attention_heads",),
               "kv_heads": ("num_key_value_heads",), "hidden_size": ("hidden_size",), "vocab_size": ("vocab_size",),
               "intermediate_size": ("intermediate_size",), "max_position_embeddings": ("max_position_embeddings",),
               "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
               "experts_per_token": ("num_experts_per_tok",), "moe_intermediate_size": ("moe_intermediate_size",),
               "kv_lora_rank": ("kv_lora_rank",), "qk_rope_head_dim": ("qk_rope_head_dim",),
               "first_dense_layers": ("first_k_dense_replace",), "tie_word_embeddings": ("tie_word_embeddings",)}


@pytest.mark.parametrize("key", ["llama-3.3-70b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-r1", "gpt-oss-120b",
                                 "gpt-oss-20b", "llama-4-scout", "llama-4-maverick"])
def test_catalog_entry_matches_its_config_fixture(key):
    """The catalog's architecture numbers are the ones the byte-for-byte config.json copy holds."""
    from capacity.inputs.hf_config import load_config

    entry = catalog.model(key)
    raw = json.loads((CONFIGS / f"{key}.json").read_text(encoding="utf-8"))
    text = raw.get("text_config") or raw
    compared = 0
    for field, names in CONFIG_KEYS.items():
        value = next((text[name] for name in names if name in text), None)
        if value is not None:
            assert entry[field] == value, (key, field, entry[field], value)
            compared += 1
    assert compared >= 8
    if entry.get("attention") == "mla":
        return
    assert entry["head_dim"] == (text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
    imported = load_config(CONFIGS / f"{key}.json")
    if "layer_types" in text:  # gpt-oss: the importer and the catalog count the same sliding layers
        assert entry["sliding_window"] == text["sliding_window"] == imported["sliding_window"]
        assert entry["local_layers"] == text["layer_types"].count("sliding_attention") == imported["local_layers"]
    elif "attention_chunk_size" in text:  # llama-4: chunked layers, read as a window of the chunk size
        assert entry["sliding_window"] == text["attention_chunk_size"] == 8192
    else:
        assert "sliding_window" not in entry and not text.get("sliding_window")
