"""``scenario.evaluate_many``: one vectorised ``analyse`` call equals ``Scenario.evaluate()`` per scenario, bit for
bit and type for type (issue 17: the search prunes with it)."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from capacity.errors import ScenarioError
from capacity.model.scenario import Scenario, evaluate_many, load_scenario, read_yaml
from capacity.planning.search import scenario_data, settings_grid

ROOT = Path(__file__).resolve().parents[2]
SEARCH = read_yaml(ROOT / "tests" / "data" / "search-llama-8b.yaml")
MODELS = ["llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "gemma-2-9b", "deepseek-v3", "gpt-oss-20b"]


def _varied() -> list[Scenario]:
    """Every example scenario, and the search file across models (dense, MoE, MLA, sliding window), GPUs, TP,
    batch caps (none: an infinite input), token budgets, with and without promises, price and arrival rate."""
    out = [load_scenario(p) for p in sorted((ROOT / "scenarios").glob("*.yaml"))]
    grid = settings_grid(["h100-sxm", "l4", "mi300x"], [1, 8], [64, None], [2048, 8192], [False, True])
    for i, model in enumerate(MODELS):
        raw = {k: v for k, v in SEARCH.items() if k != "simulation"}
        raw["model"] = {"name": model}
        if i % 3 == 1:
            raw["slo"] = {"tpot": "25 ms"}
        if i % 3 == 2:
            raw["workload"] = {"prompt_tokens": 3000, "output_tokens": 500, "shared_prefix_tokens": 1000}
        if i % 2:
            raw["serving"] = {**raw["serving"], "engine": "vllm"}
        for setting in grid[i % 4::3]:
            data = scenario_data(raw, setting)
            data.pop("simulation")
            if setting.tensor_parallel == 8 and setting.max_num_seqs is None:
                data["gpu"]["price_per_hour"] = None
            try:
                out.append(Scenario.from_dict(data))
            except ScenarioError:
                pass  # does not fit or divide: not a scenario
    return out


def _same(a: float | str, b: float | str) -> bool:
    if type(a) is not type(b):
        return False
    return a == b if isinstance(a, str) else struct.pack("<d", a) == struct.pack("<d", b)


@pytest.fixture(scope="module")
def varied() -> list[Scenario]:
    return _varied()


def test_the_varied_set_is_varied(varied):
    inputs = [s.inputs() for s in varied]
    assert len(varied) > 60
    assert any(x["experts"] > 1 for x in inputs) and any(x["experts"] <= 1 for x in inputs)
    assert any(math.isinf(x["max_num_seqs"]) for x in inputs) and any(x["max_num_seqs"] == 64 for x in inputs)
    assert any(math.isnan(x["price_per_hour"]) for x in inputs) and any(math.isinf(x["ttft_slo_s"]) for x in inputs)
    assert {x["gpu_count"] for x in inputs} >= {1, 8} and any(x["kv_latent_dim"] > 0 for x in inputs)
    assert any(math.isfinite(x["sliding_window"]) for x in inputs)


def test_evaluate_many_equals_evaluate_bit_for_bit(varied):
    many = evaluate_many(varied)
    assert len(many) == len(varied)
    for scenario, result in zip(varied, many, strict=True):
        alone = scenario.evaluate()
        assert result.scenario is scenario
        assert list(result.values) == list(alone.values)
        wrong = [k for k, v in alone.values.items() if not _same(v, result.values[k])]
        assert wrong == [], (scenario.name, scenario.model.name, wrong)


def test_evaluate_many_of_nothing_is_empty():
    assert evaluate_many([]) == []
