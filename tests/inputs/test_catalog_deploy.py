"""Issue 29: the models and GPUs customers buy now, each number derived here by hand from its config.json or
datasheet figure (not from the code under test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.formulas.quantisation import SCHEMES
from capacity.inputs import catalog
from capacity.inputs.hf_config import load_config, param_counts
from capacity.model.scenario import Scenario

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


def _config(key: str) -> dict:
    return json.loads((CONFIGS / f"{key}.json").read_text())


def test_qwen35_config_imports_without_intermediate_size():
    """Qwen3.5-397B-A17B has no intermediate_size (every layer is MoE) and 45 of 60 layers are Gated DeltaNet:
    it imports, with 15 KV layers, and its parameters add up by hand to the name's 397B / 17B."""
    c = _config("qwen3.5-397b-a17b")["text_config"]
    h, v = 4096, 248320
    full = 4096 * 32 * 256 * 2 + 2 * 4096 * 2 * 256 + 32 * 256 * 4096 + 2 * 256  # gated q, k, v, o, q/k norms
    key_dim, value_dim = 16 * 128, 64 * 128
    linear = (h * (2 * key_dim + 2 * value_dim) + h * 2 * 64 + (2 * key_dim + value_dim) * 4 + 2 * 64 + 128
              + value_dim * h)
    expert, router, norms = 3 * h * 1024, h * 512, 2 * h
    moe_total, moe_active = router + expert + 512 * expert, router + expert + 10 * expert  # + the shared expert
    total = 15 * full + 45 * linear + 60 * (norms + moe_total) + 2 * v * h + h
    active = 15 * full + 45 * linear + 60 * (norms + moe_active) + 2 * v * h + h
    assert param_counts({"text_config": c}) == (total, active)
    assert round(total / 1e9) == 396 and round(active / 1e9) == 17
    model = load_config(CONFIGS / "qwen3.5-397b-a17b.json")
    assert model["attention_layers"] == 15 and model["kv_heads"] == 2 and model["head_dim"] == 256


def test_new_models_resolve_by_hub_id_and_their_kv_is_derived_by_hand():
    kv = {  # bytes per token at bf16: MLA latent L x (512 + 64) x 2; GQA 2 x L x h_kv x d x 2
        "MiniMaxAI/MiniMax-M2.5": 2 * 62 * 8 * 128 * 2,
        "zhipuai/GLM-5": 78 * 576 * 2,
        "moonshotai/Kimi-K2.5": 61 * 576 * 2,
        "Qwen/Qwen3.5-397B-A17B": 2 * 15 * 2 * 256 * 2,
        "nvidia/DeepSeek-V3.1-NVFP4": 61 * 576 * 2,
        "nvidia/DeepSeek-R1-NVFP4": 61 * 576 * 2,
    }
    for name, expected in kv.items():
        s = Scenario.from_dict({"model": name, "gpu": {"name": "gb300", "count": 8},
                                "workload": {"prompt_tokens": 1000, "output_tokens": 100}})
        assert s.evaluate()["kv_bytes_per_token"] == expected, name


@pytest.mark.parametrize("key", ["minimax-m2.5", "glm-5", "kimi-k2.5", "qwen3.5-397b-a17b", "deepseek-v3.1"])
def test_catalog_counts_are_the_configs(key):
    entry = catalog.model(key)
    model = load_config(CONFIGS / f"{key}.json")
    assert (entry["params"], entry["active_params"]) == (model["params"], model["active_params"])
    assert entry["layers"] == model["layers"] and entry["num_experts"] == model["num_experts"]


def test_kimi_int4_scheme_quantises_the_routed_experts_only():
    """Kimi K2.5 as released: int4 routed experts, one bf16 scale per 32 weights (0.5625 B per weight), the rest
    (attention, shared expert, dense layer, embeddings) bf16. Routed experts: 60 MoE layers x 384 experts x
    3 x 7168 x 2048 weights."""
    routed = 60 * 384 * 3 * 7168 * 2048
    total = catalog.model("kimi-k2.5")["params"]
    expected = routed * (0.5 + 2 / 32) + (total - routed) * 2
    s = Scenario.from_dict({"model": "kimi-k2.5", "gpu": {"name": "b200", "count": 8},
                            "workload": {"prompt_tokens": 1000, "output_tokens": 100}})
    assert SCHEMES["w4a16-int4-g32"].bytes_per_weight == 0.5625
    assert s.model.weight_bytes == pytest.approx(expected, rel=1e-9)
    assert round(s.model.weight_bytes / 1e9) == 594


@pytest.mark.parametrize("name, fp4", [("b200_sxm", 9000e12), ("b300_sxm", 14000e12), ("gb200", 10000e12),
                                       ("gb300", 15000e12)])
def test_blackwell_fp4_peaks_run_nvfp4(name, fp4):
    """An NVFP4 checkpoint's matmuls run on the fp4 peak (datasheet dense figures: GB300 NVL72 1,080 PFLOPS dense
    over 72 GPUs = 15 PFLOPS)."""
    s = Scenario.from_dict({"model": {"name": "deepseek-r1", "quantization": "nvfp4"},
                            "gpu": {"name": name, "count": 8},
                            "workload": {"prompt_tokens": 1000, "output_tokens": 100}})
    assert s.gpu.flops == fp4


def test_interconnect_domains():
    assert catalog.gpu("gb300")["nvlink_domain"] == 72 and catalog.gpu("gb200")["nvlink_domain"] == 72
    for name in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm"):
        assert catalog.gpu(name)["nvlink_domain"] == 8
    s = Scenario.from_dict({"model": "llama-3.1-8b", "gpu": "gb300",
                            "workload": {"prompt_tokens": 100, "output_tokens": 10}})
    assert s.gpu.network_bandwidth == 800e9 / 8 and s.gpu.nvlink_domain == 72
