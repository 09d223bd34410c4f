"""Catalog integrity: every entry sourced, positive and plausible numbers, unique names and aliases."""

import pytest
import yaml

from capacity import Scenario
from capacity.inputs import catalog
from capacity.inputs.specs import GPU_FIELDS
from capacity.inputs.units import parse_quantity

GPUS = catalog.gpus()
MODELS = catalog.models()
REQUIRED_GPUS = ["h100-sxm", "h200", "a100-80gb", "a100-40gb", "l40s", "l4", "b200", "mi300x"]
REQUIRED_MODELS = ["llama-2-7b", "llama-3-8b", "llama-3.1-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b",
                   "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "gemma-2-9b", "deepseek-v3"]


def test_required_entries_exist():
    assert set(REQUIRED_GPUS) <= set(GPUS)
    assert set(REQUIRED_MODELS) <= set(MODELS)


@pytest.mark.parametrize("key", list(GPUS))
def test_gpu_entry_is_sourced_and_plausible(key):
    gpu = GPUS[key]
    assert str(gpu.get("source", "")).startswith("http"), key
    memory = parse_quantity(gpu["memory"], "bytes")
    bandwidth = parse_quantity(gpu["bandwidth"], "bandwidth")
    bf16 = parse_quantity(gpu["flops_bf16"], "flops")
    assert 8e9 <= memory <= 512e9
    assert 1e11 <= bandwidth <= 2e13  # 100 GB/s .. 20 TB/s
    assert 1e13 <= bf16 <= 1e16       # dense BF16: 10 TFLOP/s .. 10 PFLOP/s
    if "flops_fp8" in gpu:
        assert parse_quantity(gpu["flops_fp8"], "flops") >= bf16
    if "price_per_hour" in gpu:
        assert 0 < gpu["price_per_hour"] < 100 and gpu.get("price_source"), key
    # The GPU builds through the same path a scenario takes.
    Scenario.from_dict({"model": "llama-3.1-8b", "gpu": key, "workload": {"prompt_tokens": 100, "output_tokens": 10},
                        "serving": {"max_model_len": 4096}})
    assert set(GPU_FIELDS) >= {"memory", "bandwidth"}


@pytest.mark.parametrize("key", list(MODELS))
def test_model_entry_is_sourced_and_plausible(key):
    model = MODELS[key]
    assert "config.json" in str(model.get("source", "")), key
    for field in ("layers", "params", "active_params", "kv_heads", "head_dim", "hidden_size"):
        if field in model:
            assert isinstance(model[field], (int, float)) and not isinstance(model[field], bool), (key, field)
    assert 1 <= model["layers"] <= 256
    assert 1e8 <= model["params"] <= 2e12
    if model.get("active_params"):
        assert model["active_params"] < model["params"]
    if model.get("attention") != "mla":
        assert model["attention_heads"] % model["kv_heads"] == 0


def test_names_and_aliases_are_unique_across_entries():
    for entries in (GPUS, MODELS):
        seen: dict[str, str] = {}
        for key, entry in entries.items():
            for name in [key, *(entry.get("aliases") or []), *([entry["hf_id"]] if entry.get("hf_id") else [])]:
                lowered = str(name).lower()
                assert seen.get(lowered, key) == key, f"{name} names both {seen[lowered]} and {key}"
                seen[lowered] = key


def test_catalog_files_parse_with_safe_load():
    for name in ("gpu_catalog.yaml", "model_catalog.yaml"):
        with open(catalog.CATALOG_DIR / name, encoding="utf-8") as fh:
            assert isinstance(yaml.safe_load(fh), dict)


def test_lookup_is_case_insensitive_with_aliases():
    assert catalog.gpu("H100")["key"] == "h100-sxm"
    assert catalog.model("META-LLAMA/Meta-Llama-3-8B")["key"] == "llama-3-8b"


@pytest.mark.parametrize("name, expected", [("essay 001 sale-day", "essay-001-sale-day.csv"),
                                             ("../../etc/passwd", "etc-passwd.csv"), ("", "sizing.csv"),
                                             ("=cmd|' /C calc'!A0", "cmd-C-calc-A0.csv"), ("ΩΩ", "sizing.csv")])
def test_download_names_are_safe(name, expected):
    from capacity.fileio.files import safe_filename

    assert safe_filename(name, ".csv") == expected
