"""Fleet sizing by hand: essay 001's GPU at 100 requests/s under TPOT <= 50 ms, and the same GPU at TP 2."""

import math

import numpy as np
import pandas as pd
import pytest

from capacity import Scenario
from capacity.planning.fleet import fleet_for_load, fleet_options, pareto_front, replicas_for, target_rps
from tests.shared_inputs import ESSAY_001_TPOT_50 as ESSAY_001

TP = 1000 * 16e9 / 150e12 + 0.003  # prefill of 1,000 tokens: 109.7 ms


def option(table, tp, mode):
    rows = table[(table["tensor_parallel"] == tp) & (table["mode"] == mode)]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.fixture(scope="module")
def at_100():
    return fleet_options(ESSAY_001, target=100)


def test_essay_001_gpu_at_100_requests_per_second(at_100):
    # Goodput under TPOT <= 50 ms (essay 001, memory piece binds): (50 - 11) ms / (50 ms x 109.7 ms
    # + 75.4 us x 300 x 50 ms) = 5.897 requests/s per GPU. 100 / 5.897 = 16.96 -> 17 GPUs, $34/h at $2.
    row = option(at_100, 1, "colocated")
    assert row["replica_rps"] == pytest.approx(5.897, abs=5e-4)
    assert (row["replicas"], row["gpus"], row["cost_per_hour"]) == (17, 17, 34.0)
    # 100/17 = 5.882 requests/s each: just under the goodput, so TPOT just under the promise.
    assert row["load_per_replica_rps"] == pytest.approx(100 / 17)
    assert row["tpot_at_design_s"] < 0.050 and row["meets_slo"]
    # Cost split by GPU time: prefills take λ t_p = 5.882 x 109.7 ms = 64.5% of each GPU.
    f_in = 100 / 17 * TP
    assert row["input_share"] == pytest.approx(f_in)
    assert row["cost_per_million_input_tokens"] == pytest.approx(34 * f_in / (100 * 1000 * 3600) * 1e6)  # $0.061
    assert row["cost_per_million_output_tokens"] == pytest.approx(34 * (1 - f_in) / (100 * 300 * 3600) * 1e6)  # $0.112
    # One meaning of cost_per_million_tokens everywhere (issue 27): the whole cost over the output tokens, as the
    # headline's; before, the fleet table divided by prompt + output tokens ($0.0726), now cost_per_million_all_tokens.
    assert row["cost_per_million_tokens"] == pytest.approx(34 / (100 * 300 * 3600) * 1e6)  # $0.315
    assert row["cost_per_million_all_tokens"] == pytest.approx(34 / (100 * 1300 * 3600) * 1e6)  # $0.0726 blended


def test_tensor_parallel_2_by_hand(at_100):
    # Per GPU: 8 GB of weights, 4 of 8 KV heads (65,536 B per token); pool 72 - 8 = 64 GB -> 976,562 tokens,
    # 751 conversations of 1,300. Pieces: a_mem = 8 GB / 2 TB/s + 3 ms = 7 ms, m_mem = 1,150 x 65,536 B / 2 TB/s
    # = 37.7 us; a_comp = 3 ms, m_comp = 8 GFLOP / 150 TFLOP/s = 53.3 us. Prefill 1,000 x 53.3 us + 3 ms = 56.3 ms.
    # TPOT <= 50 ms: memory (50 - 7) / (50 x 56.33 + 37.7e-3 x 300 x 50) us = 12.71 requests/s per replica
    # (compute: 47 / (2.817 + 0.800) = 13.0). 100 / 12.71 = 7.87 -> 8 replicas = 16 GPUs, $32/h.
    tp, a_mem, m_mem = 1000 * 8e9 / 150e12 + 0.003, 0.007, 1150 * 65536 / 2e12
    rate = min((0.05 - a_mem) / (0.05 * tp + m_mem * 300 * 0.05), (0.05 - 0.003) / (0.05 * tp + 8e9 / 150e12 * 15))
    row = option(at_100, 2, "colocated")
    assert row["replica_rps"] == pytest.approx(rate)
    assert rate == pytest.approx(12.71, abs=0.01)
    assert (row["replicas"], row["gpus"], row["cost_per_hour"]) == (8, 16, 32.0)


def test_chunked_and_separate_pools_need_fewer_gpus(at_100):
    # Chunked prefill (budget 8,192): 6.279 requests/s (tests/model/test_serving_modes.py) -> ceil(15.93) = 16 GPUs.
    assert option(at_100, 1, "chunked")["gpus"] == 16
    # Pools: decode replicas at 328 / (300 x 38.0 ms) = 28.78 -> ceil(3.47) = 4; prefill at 1 / 109.7 ms = 9.12
    # -> ceil(10.97) = 11; 15 GPUs, $30/h: the cheapest, and ranked first.
    pools = option(at_100, 1, "disaggregated")
    assert (pools["decode_replicas"], pools["prefill_replicas"], pools["gpus"]) == (4, 11, 15)
    assert pools["input_share"] == pytest.approx(11 / 15)
    assert at_100.iloc[0]["rank"] == 1 and at_100.iloc[0]["cost_per_hour"] == 30.0


def test_peak_factor_headroom_and_tokens_per_day():
    # A sale day: 10 requests/s usual, 10x peak = 100 requests/s at the design point -> the same 17 GPUs,
    # but the blended cost per token is taken at the usual 10 requests/s: ten times higher.
    sale = option(fleet_options(ESSAY_001, target=10, peak_factor=10, modes=["colocated"],
                                tensor_parallel=[1]), 1, "colocated")
    assert sale["gpus"] == 17
    assert sale["cost_per_million_all_tokens"] == pytest.approx(34 / (10 * 1300 * 3600) * 1e6)
    assert sale["cost_per_million_tokens"] == pytest.approx(34 / (10 * 300 * 3600) * 1e6)
    # 20% headroom: 100 / (5.897 x 0.8) = 21.2 -> 22 GPUs.
    spare = fleet_options(ESSAY_001, target=100, headroom=0.2, modes=["colocated"], tensor_parallel=[1])
    assert spare.iloc[0]["gpus"] == 22
    # A billion (input + output) tokens a day of 1,300-token requests: 1e9 / 86,400 / 1,300 = 8.90 requests/s;
    # x10 peak = 89.0 requests/s -> ceil(89.03 / 5.897) = 16 GPUs.
    assert target_rps(tokens_per_day=1e9, prompt_tokens=1000, output_tokens=300) == pytest.approx(8.9031, abs=1e-4)
    daily = fleet_options(ESSAY_001, tokens_per_day=1e9, peak_factor=10, modes=["colocated"], tensor_parallel=[1])
    assert daily.iloc[0]["gpus"] == 16
    with pytest.raises(ValueError):
        target_rps(5.0, 1e9, 1000, 300)


def test_ranking_and_the_pareto_front(at_100):
    ok = at_100[at_100["meets_slo"]]
    assert list(ok["rank"]) == list(range(1, len(ok) + 1))
    assert np.all(np.diff(ok["cost_per_hour"].to_numpy()) >= 0)  # cheapest first
    front = ok[ok["pareto"]]
    assert len(front) >= 2
    for _, row in ok.iterrows():  # a front row is dominated by no row; any other row by some front row
        dominated_by = ok[(ok["cost_per_hour"] <= row["cost_per_hour"]) & (ok["tpot_at_design_s"] <= row[
            "tpot_at_design_s"]) & ((ok["cost_per_hour"] < row["cost_per_hour"]) | (ok["tpot_at_design_s"] < row[
                "tpot_at_design_s"]))]
        assert row["pareto"] == dominated_by.empty


def test_pareto_front_small_table():
    table = pd.DataFrame({"cost_per_hour": [10, 20, 20, 30, 5], "tpot_at_design_s": [0.05, 0.03, 0.04, 0.03, math.inf]})
    assert pareto_front(table).tolist() == [True, True, False, False, False]


def test_options_that_miss_a_promise_or_do_not_fit_are_listed_last():
    tight = {**ESSAY_001, "slo": {"tpot": "5 ms"}}  # one sequence alone needs 11 ms per token
    table = fleet_options(tight, target=10, tensor_parallel=[1])
    assert not table["meets_slo"].any() and table["rank"].isna().all()
    small = {**ESSAY_001, "gpu": {**ESSAY_001["gpu"], "memory": "16 GB"}}  # 16 GB of weights do not fit at TP 1
    table = fleet_options(small, target=10, tensor_parallel=[1, 2], modes=["colocated"])
    assert "do not fit" in table.iloc[-1]["problem"] and table.iloc[-1]["tensor_parallel"] == 1
    assert table.iloc[0]["tensor_parallel"] == 2


def test_replicas_round_up_but_not_an_exact_multiple():
    assert replicas_for(100, 5.0).item() == 20 and replicas_for(100.0001, 5.0).item() == 21
    assert replicas_for(0, 5.0).item() == 0 and replicas_for(1, 0.0).item() == math.inf


def test_fleet_for_load_keeps_its_contract():
    r = Scenario.from_dict(ESSAY_001).evaluate()
    fleet = fleet_for_load(r, 10, peak_factor=10)
    assert (fleet.replicas, fleet.gpus, fleet.cost_per_hour, fleet.design_load_rps) == (17, 17, 34.0, 100)
    with pytest.raises(ValueError):
        fleet_for_load(r, 10, headroom=1.0)


def test_fleet_command(tmp_path, capsys):
    import json

    import yaml

    from capacity.cli import main

    path = tmp_path / "essay.yaml"
    path.write_text(yaml.safe_dump(ESSAY_001))
    assert main(["fleet", str(path), "--target-rps", "100", "--tp", "1", "--modes", "colocated"]) == 0
    out = capsys.readouterr().out
    assert "colocated" in out and "   17 " in out and "34.00" in out
    assert main(["fleet", str(path), "--tokens-per-day", "1e9", "--peak", "10", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["rank"] == 1 and rows[0]["mode"] == "disaggregated"
    with pytest.raises(SystemExit) as exit_:  # refused by the option's reader
        main(["fleet", str(path), "--target-rps", "10", "--headroom", "1.5"])
    assert exit_.value.code == 2
    assert "headroom" in capsys.readouterr().err
