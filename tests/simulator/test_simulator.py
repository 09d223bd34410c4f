"""The scheduler simulator: the essays' direction, agreement with the analytic model, and its mechanisms.

Essay 000 ran 40 requests at 6 per second through a teaching simulator (decode 18.0 ms +
0.12 ms per sequence, prefill 0.03 ms per prompt token) and reports that continuous batching
cuts mean TTFT 6.2x against static batching, raises throughput and raises mean TPOT, that 12
requests per second roughly double TTFT, and that static batching leaves most slot-steps as
padding. Its scripts are unpublished; our workload is in scenarios/sim-essay-000-*.yaml and the
figures are compared in docs/simulator.md. Here we assert the directions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capacity import Scenario, decode_step_s, prefill_s
from capacity.model.scenario import load_scenario
from capacity.simulator import RooflineCost, TeachingCost, simulate, simulate_table
from capacity.simulator.config import config_from_scenario
from capacity.simulator.workloads import RequestTable, generate
from tests.simulator_reference import naive_continuous

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.fixture(scope="module")
def essay_runs():
    return {name: simulate(load_scenario(SCENARIOS / f"sim-essay-000-{name}.yaml")).summary()
            for name in ("static", "continuous", "continuous-12rps")}


@pytest.fixture(scope="module")
def sale_day():
    return load_scenario(SCENARIOS / "sim-essay-001-analytic.yaml")


# --- cost models ---------------------------------------------------------------------------------------------

def test_teaching_cost_is_the_essays_constants():
    cost = TeachingCost()
    assert cost.step_s(16, 0, 0) == pytest.approx(19.92e-3)  # essay 000: 18.0 + 0.12 x 16
    assert cost.step_s(253, 0, 0) == pytest.approx(48.36e-3)  # essay 000: "48.4 ms per iteration"
    assert cost.step_s(0, 0, 1000) == pytest.approx(30e-3)  # 0.03 ms per prompt token
    assert cost.decode_run_s(16, 0, 10) == pytest.approx(10 * 19.92e-3)


def test_roofline_cost_is_the_analytic_cores(sale_day):
    cost = RooflineCost.from_scenario(sale_day)
    # essay 001: 328 sequences at an average context of 1,150 tokens: max(32.7, 35.0) + 3 = 38.0 ms
    expected = decode_step_s(16e9, 328, 1150, 131072, 2e12, 8e9, 150e12, 3e-3)
    assert cost.step_s(328, 328 * 1150, 0) == pytest.approx(float(expected)) == pytest.approx(38.0e-3, abs=5e-5)
    assert cost.step_s(0, 0, 1000) == pytest.approx(float(prefill_s(16e9, 1000, 8e9, 2e12, 150e12, 3e-3)))
    assert cost.step_s(0, 0, 1000) == pytest.approx(109.7e-3, abs=5e-5)


@pytest.mark.parametrize("model, gpu", [("llama-3.1-8b", {"name": "l4"}), ("gemma-2-9b", {"name": "h100-sxm"}),
                                        ("mixtral-8x7b", {"name": "h100-sxm", "count": 2})])
def test_roofline_cost_follows_the_step_model_of_catalog_models(model, gpu):
    """Tensor parallel, MoE expert reads, sliding windows: one iteration costs what the analytic core says."""
    s = Scenario.from_dict({"model": {"name": model}, "gpu": gpu, "serving": {"max_model_len": 8192},
                            "workload": {"prompt_tokens": 2000, "output_tokens": 500}})
    r, cost = s.evaluate(), RooflineCost.from_scenario(s)
    batch = int(r["batch_max"])
    assert cost.step_s(batch, batch * r["context_tokens"], 0) == pytest.approx(r["decode_step_s"], rel=1e-9)
    assert cost.step_s(0, 0, int(r["prefill_tokens"])) == pytest.approx(r["prefill_s"], rel=1e-9)


# --- the essays' direction (teaching cost model) ----------------------------------------------------------

def test_continuous_batching_cuts_ttft_several_fold(essay_runs):
    static, continuous = essay_runs["static"], essay_runs["continuous"]
    assert static["requests_completed"] == continuous["requests_completed"] == 40
    assert continuous["mean_ttft_s"] * 4 < static["mean_ttft_s"]  # essay: 5,357 -> 867 ms (6.2x)


def test_continuous_batching_raises_throughput_and_tpot(essay_runs):
    static, continuous = essay_runs["static"], essay_runs["continuous"]
    assert continuous["throughput_rps"] > 1.3 * static["throughput_rps"]  # essay: 2.3 -> 3.6 requests/s
    assert continuous["mean_tpot_s"] > static["mean_tpot_s"]  # essay: 19.4 -> 25.4 ms: a fuller batch


def test_doubling_the_rate_raises_ttft(essay_runs):
    assert essay_runs["continuous-12rps"]["mean_ttft_s"] > 1.5 * essay_runs["continuous"]["mean_ttft_s"]


def test_static_batching_spends_most_slot_steps_on_padding(essay_runs):
    static = essay_runs["static"]
    assert static["slot_utilization"] < 0.5  # essay: 37%
    useful = static["slot_utilization"] * (static["padding_slot_steps"] / (1 - static["slot_utilization"]))
    assert static["padding_slot_steps"] > useful
    assert essay_runs["continuous"]["padding_slot_steps"] == 0


def test_static_batch_by_hand():
    """Two requests arriving together, outputs 3 and 5 tokens, prompts 100: one batch of 2, padded to 5."""
    s = Scenario.from_dict({**SMALL, "serving": {**SMALL["serving"], "max_num_seqs": 2}})
    table = _table(arrival=[0, 0], prompt=[100, 100], output=[3, 5])
    r = simulate_table(s, config_from_scenario(s, policy="static", cost_model="teaching"), table)
    prefill = 200 * 0.03e-3
    step = 18e-3 + 0.12e-3 * 2  # the finished request is padding: still computed
    df = r.requests
    assert df["ttft_s"].tolist() == pytest.approx([prefill, prefill])
    assert df["finish_s"].tolist() == pytest.approx([prefill + 2 * step, prefill + 4 * step])
    summary = r.summary()
    assert summary["padding_slot_steps"] == 2 * 4 - (2 + 4)  # 2 slots x 4 steps, 6 tokens decoded
    assert summary["slot_utilization"] == pytest.approx(6 / 8)


# --- agreement with the analytic model (roofline cost model, essay 001 inputs) -----------------------------

def test_saturated_throughput_matches_the_ceiling(sale_day):
    ceiling = sale_day.evaluate()["ceiling_rps"]  # 6.9 requests/s
    summary = simulate(sale_day, arrival="instant", requests=5000).summary()
    assert summary["throughput_rps"] == pytest.approx(ceiling, rel=0.05)
    assert summary["peak_kv_blocks_used"] <= summary["kv_pool_blocks"]


def test_largest_rate_keeping_the_tpot_promise_matches_the_goodput(sale_day):
    """Bisect on the Poisson rate whose simulated mean TPOT is 50 ms; the analytic goodput is 5.9 requests/s."""
    analytic = sale_day.evaluate()
    lo, hi = 0.5 * analytic["goodput_rps"], analytic["ceiling_rps"]
    for _ in range(8):
        mid = (lo + hi) / 2
        tpot = simulate(sale_day, rate=mid, requests=2000).summary()["mean_tpot_s"]
        lo, hi = (mid, hi) if tpot <= sale_day.slo.tpot_s else (lo, mid)
    assert lo == pytest.approx(analytic["goodput_rps"], rel=0.10)


# --- fast-forward equals stepping one iteration at a time ---------------------------------------------------

@pytest.mark.parametrize("cost_model", ["teaching", "roofline"])
def test_fast_forward_equals_stepping(cost_model):
    s = Scenario.from_dict(SMALL)
    config = config_from_scenario(s, cost_model=cost_model, kv_allocation="reserve", requests=300, rate=8,
                                  prompt_tokens={"dist": "uniform", "low": 10, "high": 400},
                                  output_tokens={"dist": "uniform", "low": 1, "high": 120}, max_num_seqs=6,
                                  max_batched_tokens=600)
    table = generate(config)
    result = simulate_table(s, config, table)
    cost = TeachingCost() if cost_model == "teaching" else RooflineCost.from_scenario(s)
    first, finish, worst = naive_continuous(table, cost, 6, int(s.evaluate()["pool_blocks"]), 16, 600)
    df = result.requests
    assert np.allclose(df["ttft_s"] + df["arrival_s"], first, rtol=0, atol=1e-6)
    assert np.allclose(df["finish_s"], finish, rtol=0, atol=1e-6)
    assert np.allclose(df["max_itl_s"], worst, rtol=0, atol=1e-6, equal_nan=True)


# --- mechanisms ---------------------------------------------------------------------------------------------

SMALL = {  # a KV pool of 95 blocks of 16 tokens: 0.2 GB / (16 x 131,072 B)
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "16.2 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
    # no serving path outside the engine: the times below are the engine's own (by hand)
    "serving": {"memory_utilization": 1.0, "block_size": 16, "max_model_len": 4096, "step_overhead": "3 ms",
                "request_latency": 0},
    "workload": {"prompt_tokens": 100, "output_tokens": 50, "arrival_rate": 20},
}


def _table(arrival, prompt, output, prefix_id=None, prefix_tokens=None, priority=None) -> RequestTable:
    n = len(arrival)
    return RequestTable(np.asarray(arrival, float), np.asarray(prompt), np.asarray(output),
                        np.asarray(prefix_id if prefix_id is not None else [-1] * n),
                        np.asarray(prefix_tokens if prefix_tokens is not None else [0] * n),
                        np.asarray(priority if priority is not None else [0] * n))


def test_small_pool_has_95_blocks():
    assert Scenario.from_dict(SMALL).evaluate()["pool_blocks"] == 95


def test_chunked_prefill_lowers_the_worst_gap(scenario_dir):
    s = load_scenario(scenario_dir / "sim-chunked-prefill.yaml")
    chunked = simulate(s).summary()
    whole = simulate(s, chunked_prefill=False).summary()
    assert chunked["max_itl_s"] < whole["max_itl_s"] / 5  # essay 000: a 764 ms pause without chunking
    assert chunked["requests_completed"] == whole["requests_completed"] == 200


def test_on_demand_blocks_preempt_when_the_pool_runs_out():
    s = Scenario.from_dict(SMALL)
    on_demand = simulate(s, requests=200, seed=1).summary()
    reserved = simulate(s, requests=200, seed=1, kv_allocation="reserve").summary()
    assert on_demand["preemptions"] > 0 and reserved["preemptions"] == 0
    assert on_demand["requests_completed"] == reserved["requests_completed"] == 200
    assert on_demand["peak_kv_blocks_used"] <= 95 and reserved["peak_kv_blocks_used"] <= 95


def test_prefix_cache_stores_the_shared_prefix_once(scenario_dir):
    s = load_scenario(scenario_dir / "sim-prefix-cache.yaml")
    cached = simulate(s, requests=400).summary()
    # 75 full blocks (1,200 tokens) of every 1,500-token prompt are hits, except for the first request
    assert cached["prefix_cache_hit_rate"] == pytest.approx(1200 / 1500 * 399 / 400, rel=1e-6)
    uncached = simulate(s, requests=400, prefix_caching=False).summary()
    assert uncached["prefix_cache_hit_rate"] == 0
    assert cached["mean_ttft_s"] < uncached["mean_ttft_s"]


def test_request_that_can_never_fit_is_rejected_with_the_reason():
    s = Scenario.from_dict(SMALL)
    table = _table(arrival=[0, 0.1, 0.2], prompt=[100, 1600, 100], output=[20, 20, 20])  # 1,620 tokens > 95 x 16
    df = simulate_table(s, config_from_scenario(s), table).requests
    assert df["status"].tolist() == ["completed", "rejected", "completed"]
    assert "needs 102 KV blocks; the pool holds 95" in df.loc[1, "reject_reason"]


def test_bounded_queue_rejects_beyond_its_limit():
    s = Scenario.from_dict(SMALL)
    table = _table(arrival=[0] * 10, prompt=[100] * 10, output=[20] * 10)
    config = config_from_scenario(s, max_num_seqs=2, max_queued_requests=3)
    df = simulate_table(s, config, table).requests
    assert (df["status"] == "rejected").sum() == 7  # 10 arrive at once into a queue of 3 (none admitted yet)
    assert df.loc[df["status"] == "rejected", "reject_reason"].str.contains("max_queued_requests").all()
    config = config_from_scenario(s, max_num_seqs=2, max_queued_tokens=250)
    assert (simulate_table(s, config, table).requests["status"] == "rejected").sum() == 8


def test_priorities_serve_the_urgent_first():
    s = Scenario.from_dict(SMALL)
    df = simulate(s, requests=300, rate=30, priorities=[0, 1], max_num_seqs=4, kv_allocation="reserve").requests
    assert df[df["priority"] == 0]["queue_s"].mean() < df[df["priority"] == 1]["queue_s"].mean() / 2


def test_same_seed_same_result_and_a_different_seed_differs():
    s = Scenario.from_dict(SMALL)
    a, b = simulate(s, requests=100, seed=7), simulate(s, requests=100, seed=7)
    assert a.requests.equals(b.requests) and a.summary() == b.summary()
    assert not simulate(s, requests=100, seed=8).requests.equals(a.requests)


def test_timeline_is_downsampled_for_the_app():
    s = Scenario.from_dict(SMALL)
    result = simulate(s, requests=20000, rate=15, kv_allocation="reserve")
    timeline = result.timeline
    assert list(timeline.columns) == ["time_s", "running", "queued", "kv_blocks_used"]
    assert 100 < len(timeline) <= 4000
    assert timeline["time_s"].is_monotonic_increasing
    assert (timeline["kv_blocks_used"] <= 95).all()


def test_summary_has_the_contract_keys(sale_day):
    summary = simulate(sale_day, requests=50).summary()
    for key in ("requests_submitted", "requests_completed", "requests_rejected", "mean_ttft_s", "p50_ttft_s",
                "p90_ttft_s", "p99_ttft_s", "mean_tpot_s", "p50_tpot_s", "p99_tpot_s", "max_itl_s", "throughput_rps",
                "output_tokens_per_s", "goodput_rps", "padding_slot_steps", "slot_utilization", "preemptions",
                "prefix_cache_hit_rate", "mean_queue_s", "mean_e2e_s"):
        assert key in summary
    assert summary["output_tokens_per_s"] == pytest.approx(300 * summary["throughput_rps"])


@pytest.mark.parametrize("router", ["round_robin", "random"])
def test_replicas_behind_a_router_share_the_load(sale_day, router):
    """Four replicas at four times the rate: each sees about one replica's load, so the fleet does 4x."""
    one = simulate(sale_day, rate=5.0, requests=1500).summary()
    fleet = simulate(sale_day, rate=20.0, requests=6000, replicas=4, router=router)
    summary = fleet.summary()
    assert summary["requests_completed"] == 6000
    assert summary["throughput_rps"] == pytest.approx(4 * one["throughput_rps"], rel=0.05)
    assert summary["mean_tpot_s"] == pytest.approx(one["mean_tpot_s"], rel=0.10)
    df = fleet.requests
    assert df["request_id"].tolist() == list(range(6000)) and set(df["replica"]) == {0, 1, 2, 3}
    assert (fleet.timeline["kv_blocks_used"] <= 4 * summary["kv_pool_blocks"]).all()
    assert fleet.timeline["running"].max() > one["mean_decode_batch"]  # the fleet runs more than one replica
