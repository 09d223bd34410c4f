"""`capacity search` over separate prefill and decode pools (simulator/pools.py, search.pool_split)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from capacity.cli import main
from capacity.model.scenario import Scenario, read_yaml
from capacity.planning.search import Setting, pool_split, prune, scenario_data, search, settings_grid
from capacity.simulator import simulate_times

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "search-llama-8b.yaml"
RAW = read_yaml(SCENARIO)
POOLS = Setting("l40s", 1, 64, 2048, False, True)


@pytest.mark.parametrize("replicas", range(2, 40))
@pytest.mark.parametrize("share", [0.0, 0.05, 0.2, 0.5, 0.76, 0.97, 1.0])
def test_pool_split_keeps_one_of_each_and_the_ratio(replicas, share):
    prefill, decode = pool_split(replicas, share)
    assert prefill >= 1 and decode >= 1 and prefill + decode == replicas
    if 1 <= replicas * share <= replicas - 1:  # the nearest whole split to the ideal ratio
        assert abs(prefill - replicas * share) <= 0.5


def test_the_grid_holds_one_pools_setting_per_engine():
    grid = settings_grid(["h100-sxm", "l40s"], [1, 2], [64, 256], [2048, 8192], [False, True], [False, True])
    pools = [s for s in grid if s.separate_pools]
    assert len(grid) == 2 * 2 * 2 * (2 * 2 + 1) and len(pools) == 2 * 2 * 2
    assert {(s.gpu, s.tensor_parallel, s.max_num_seqs) for s in pools} == \
        {(g, t, n) for g in ("h100-sxm", "l40s") for t in (1, 2) for n in (64, 256)}
    assert all(not s.chunked_prefill for s in pools)
    assert settings_grid(["l40s"], [1], [64], [2048], [True]) == [Setting("l40s", 1, 64, 2048, True)]


@pytest.fixture(scope="module")
def pools_search():
    return search(RAW, [POOLS], percentile=99.0)


def _simulated(replicas: int, share: float) -> dict:
    prefill, decode = pool_split(replicas, share)
    scenario = Scenario.from_dict(scenario_data(RAW, POOLS))
    times, _ = simulate_times(scenario, replicas=decode, prefill_replicas=prefill)
    done = ~np.isnan(times["finish_s"])
    tpot = times["tpot_s"][done]
    return {"ttft_s": float(np.percentile(times["ttft_s"][done], 99)),
            "tpot_s": float(np.percentile(tpot[~np.isnan(tpot)], 99)), "prefill_replicas": prefill}


def test_the_fewest_pool_replicas_keep_the_promises_and_one_fewer_does_not(pools_search):
    """The search's answer for a pools setting is a simulation of the split it reports: the same p99s, within
    the promises (TTFT 1 s, TPOT 40 ms), and one replica fewer (split again) misses them."""
    (best,) = pools_search.best
    share = float(Scenario.from_dict(scenario_data(RAW, POOLS)).evaluate()["disagg_prefill_share"])
    again = _simulated(best["replicas"], share)
    assert again == {k: best[k] for k in again}
    assert best["separate_pools"] and best["meets"] and best["ttft_s"] <= 1.0 and best["tpot_s"] <= 0.040
    assert best["gpus"] == best["replicas"] and best["cost_per_hour"] == pytest.approx(
        best["replicas"] * best["price_per_gpu_hour"])
    if best["replicas"] > 2:
        fewer = _simulated(best["replicas"] - 1, share)
        assert fewer["ttft_s"] > 1.0 or fewer["tpot_s"] > 0.040


def test_a_workload_the_pools_cannot_simulate_is_pruned_before_simulating():
    raw = copy.deepcopy(RAW)
    raw["workload"]["shared_prefix_tokens"] = 200
    kept, pruned = prune(raw, [POOLS, Setting("l40s", 1, 64, 2048, False)], 20.0)
    assert [c.setting for c in kept] == [Setting("l40s", 1, 64, 2048, False)]
    assert "prefill_replicas" in pruned[0]["reason"] and "shared_prefix_tokens" in pruned[0]["reason"]


def test_cli_separate_pools(capsys):
    assert main(["search", str(SCENARIO), "--gpus", "l40s", "--tp", "1", "--max-num-seqs", "64",
                 "--max-batched-tokens", "2048", "--chunked", "off", "--separate-pools", "both", "--workers", "1",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    settings = {row["separate_pools"]: row for row in out["settings"]}
    assert set(settings) == {False, True}
    split = settings[True]
    assert 1 <= split["prefill_replicas"] < split["replicas"]
    assert settings[False]["prefill_replicas"] == 0
    assert main(["search", str(SCENARIO), "--gpus", "l40s", "--tp", "1", "--max-num-seqs", "64",
                 "--separate-pools", "on", "--workers", "1"]) == 0
    table = capsys.readouterr().out
    assert f"{split['prefill_replicas']}+{split['replicas'] - split['prefill_replicas']}" in table


def test_split_settings_pair_every_prefill_layout_with_every_decode_layout():
    """Split pools (issue 29): prefill GPU x TP by decode GPU x TP by batch cap, chunked prefill off; an MoE model's
    layouts add their attention data and expert parallel sizes."""
    grid = settings_grid(["h200"], [1, 2], [256], [8192], [False], [False], None, ["l40s", "h100-sxm"], [1])
    split = [s for s in grid if s.split]
    assert len(split) == 2 * 1 * 1 * 2 and all(s.separate_pools and not s.chunked_prefill for s in split)
    assert {(s.prefill_gpu, s.prefill_tensor_parallel, s.gpu, s.tensor_parallel) for s in split} == \
        {(p, 1, "h200", t) for p in ("l40s", "h100-sxm") for t in (1, 2)}
    data = scenario_data(RAW, split[0])
    assert data["pools"]["prefill"]["gpu"] == {"name": "l40s", "pipeline_parallel": 1, "count": 1}
    assert "pools" not in scenario_data({**RAW, "pools": data["pools"]}, Setting("h200", 1, 64, 2048, False))
    moe = settings_grid(["h200"], [2], [256], [8192], [False], moe={2: [(1, 1), (2, 4)]})
    assert [(s.attention_data_parallel, s.expert_parallel) for s in moe] == [(1, 1), (2, 4)]


def test_a_split_candidate_costs_each_pool_at_its_own_price():
    """3 prefill replicas of 1 L40S and 2 decode replicas of 2 H200s: 3 x 1 x c_l40s + 2 x 2 x c_h200 per hour."""
    from capacity.planning.search import _cost

    setting = Setting("h200", 2, 256, 8192, False, True, prefill_gpu="l40s", prefill_tensor_parallel=1)
    kept, _ = prune(RAW, [setting], 20.0)
    (c,) = kept
    l40s = Scenario.from_dict({**RAW, "gpu": "l40s"}).gpu.price_per_hour
    h200 = Scenario.from_dict({**RAW, "gpu": "h200"}).gpu.price_per_hour
    cost = _cost(c, 5, 3)
    assert cost["gpus"] == 3 + 4 and cost["cost_per_hour"] == pytest.approx(3 * l40s + 4 * h200)
    assert 0 < c.prefill_share < 1
