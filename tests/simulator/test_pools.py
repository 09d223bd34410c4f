"""Separate prefill and decode pools in the simulator (capacity/simulator/pools.py) against the analytic model."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from capacity.errors import ScenarioError
from capacity.model.scenario import Scenario
from capacity.simulator import simulate, simulate_times
from capacity.simulator.pools import fifo_finish_s

ROOT = Path(__file__).resolve().parents[2]
ESSAY = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())


def _scenario(rate: float, simulation: dict, link: str | None = "50 GB/s") -> Scenario:
    raw = copy.deepcopy(ESSAY)
    raw["workload"]["arrival_rate"] = rate
    if link is not None:
        raw.setdefault("serving", {})["kv_transfer_bandwidth"] = link
    raw["simulation"] = simulation
    return Scenario.from_dict(raw)


def test_fifo_finish_equals_the_queue_served_one_by_one():
    rng = np.random.default_rng(7)
    arrival = np.sort(rng.uniform(0, 50, 2000))
    service = rng.exponential(0.03, 2000)
    expected, free = np.empty(2000), 0.0
    for i in range(2000):
        free = expected[i] = max(arrival[i], free) + service[i]
    np.testing.assert_allclose(fifo_finish_s(arrival, service), expected, rtol=1e-12)


@pytest.mark.parametrize("rate, prefill_replicas", [(5.0, 1), (7.0, 1), (12.0, 2)])
def test_ttft_is_the_m_d_1_prefill_queue_plus_the_kv_transfer(rate, prefill_replicas):
    """Poisson arrivals split at random stay Poisson: each prefill replica is the analytic model's M/D/1 queue
    (``disagg_ttft_at_load_s`` at rate / P), KV transfer included."""
    s = _scenario(rate, {"requests": 20000, "prefill_replicas": prefill_replicas, "replicas": 2, "router": "random"})
    per_replica = _scenario(rate / prefill_replicas, {}).evaluate()
    analytic = float(per_replica["disagg_ttft_at_load_s"])
    simulated = simulate(s).summary()["mean_ttft_s"]
    assert simulated == pytest.approx(analytic, rel=0.05)


@pytest.mark.parametrize("rate, decode_replicas", [(5.0, 1), (12.0, 1), (20.0, 2)])
def test_tpot_is_the_decode_only_replica_at_its_load(rate, decode_replicas):
    """A decode replica never stops for a prefill: its TPOT is the analytic fixed point with t_p = 0
    (``disagg_tpot_at_load_s`` at rate / D)."""
    s = _scenario(rate, {"requests": 20000, "prefill_replicas": 3, "replicas": decode_replicas})
    analytic = float(_scenario(rate / decode_replicas, {}).evaluate()["disagg_tpot_at_load_s"])
    simulated = simulate(s).summary()["mean_tpot_s"]
    assert simulated == pytest.approx(analytic, rel=0.03)


def test_a_lone_request_waits_for_nothing_but_its_prefill_and_transfer():
    """Fixed arrivals 10 s apart: no queue anywhere. TTFT = t_p + P kv / BW exactly (1,000 tokens x 131,072 B
    over 50 GB/s = 2.62 ms); the answer's other 299 tokens are plain decode steps of a batch of one."""
    s = _scenario(0.1, {"requests": 5, "arrival": "fixed", "prefill_replicas": 1, "replicas": 1})
    r = s.evaluate()
    transfer = 1000 * float(r["kv_bytes_per_token"]) / 50e9
    assert transfer == pytest.approx(2.62144e-3)
    df = simulate(s).requests
    np.testing.assert_allclose(df["ttft_s"], float(r["prefill_s"]) + transfer, rtol=1e-12)
    np.testing.assert_allclose(df["queue_s"], 0.0, atol=1e-12)
    # a step of one sequence: weights 16 GB / 2 TB/s = 8 ms, 3 ms overhead, its context's KV at 131,072 B / 2 TB/s
    # per token; the contexts of the 299 steps average 1,000 + 150 tokens
    step = 8e-3 + 3e-3 + 1150 * 131072 / 2e12
    assert df["tpot_s"].to_numpy() == pytest.approx(np.full(5, step), rel=1e-3)


def test_without_a_link_the_transfer_is_free():
    fast = simulate(_scenario(0.1, {"requests": 3, "arrival": "fixed", "prefill_replicas": 1}, link=None))
    slow = simulate(_scenario(0.1, {"requests": 3, "arrival": "fixed", "prefill_replicas": 1}, link="1 GB/s"))
    np.testing.assert_allclose(slow.requests["ttft_s"] - fast.requests["ttft_s"], 1000 * 131072 / 1e9, rtol=1e-9)


def test_times_alone_are_the_results_columns():
    s = _scenario(9.0, {"requests": 3000, "prefill_replicas": 2, "replicas": 1, "seed": 3})
    result = simulate(s)
    times, _ = simulate_times(s)
    df = result.requests
    assert list(df["request_id"]) == list(range(3000))
    for key in ("arrival_s", "ttft_s", "tpot_s", "finish_s"):
        np.testing.assert_array_equal(times[key], df[key].to_numpy(dtype=float))
    summary = result.summary()
    assert summary["prefill_replicas"] == 2
    # each prompt keeps a prefill replica busy for t_p: utilization = rate t_p / P over the run
    r = s.evaluate()
    expected = 3000 * float(r["prefill_s"]) / (2 * summary["makespan_s"])
    assert summary["prefill_utilization"] == pytest.approx(expected, rel=1e-9)


def test_a_decode_slot_wait_counts_against_the_tpot():
    """One decode slot (max_num_seqs 1) behind a fast prefill pool: requests queue for the decode replica after
    their first token, so TPOT (from the handoff) exceeds a lone sequence's step, and e2e = TTFT + (A - 1) TPOT."""
    s = _scenario(5.0, {"requests": 200, "prefill_replicas": 2, "replicas": 1, "max_num_seqs": 1})
    df = simulate(s).requests
    assert df["tpot_s"].max() > 2 * 11.1e-3  # twice a lone sequence's step (the test above)
    np.testing.assert_allclose(df["e2e_s"], df["ttft_s"] + 299 * df["tpot_s"], rtol=1e-9)
    assert (df["max_itl_s"] >= df["tpot_s"] - 1e-12).all()


def test_settings_the_pools_cannot_simulate_are_refused():
    with pytest.raises(ScenarioError, match="prefill_replicas .*shared_prefix_tokens"):
        simulate(_scenario(5.0, {"requests": 10, "prefill_replicas": 1, "shared_prefix_tokens": 100}))
    with pytest.raises(ScenarioError, match="prefill_replicas .*policy static"):
        simulate(_scenario(5.0, {"requests": 10, "prefill_replicas": 1, "policy": "static"}))
    with pytest.raises(ScenarioError, match="prefill_replicas must be a whole number"):
        simulate(_scenario(5.0, {"requests": 10, "prefill_replicas": 1.5}))


@pytest.mark.parametrize("simulation", [
    {"requests": 3000, "prefill_replicas": 2, "replicas": 1},
    {"requests": 3000, "prefill_replicas": 1, "replicas": 3, "router": "random", "max_num_seqs": 8, "seed": 4},
    {"requests": 2000, "prefill_replicas": 3, "replicas": 2, "max_queued_requests": 5, "max_num_seqs": 4,
     "chunked_prefill": True, "prompt_tokens": {"dist": "lognormal", "mean": 800, "sigma": 0.6, "low": 16,
                                                "high": 4000}, "output_tokens": {"dist": "uniform", "low": 1,
                                                                                 "high": 400}},
    {"requests": 2000, "prefill_replicas": 1, "replicas": 2, "cost_model": "teaching", "kv_allocation": "reserve"},
])
def test_both_event_loops_run_the_decode_pool_alike(simulation):
    """The decode engines' prefilled prompts (``cost_models.PrefilledCost``) in the compiled loop: the same requests,
    timeline and counters as the Python loop, bit for bit."""
    from tests.simulator.test_compiled import assert_same

    s = _scenario(14.0, simulation)
    fast, reference = simulate(s, event_loop="compiled"), simulate(s, event_loop="python")
    assert fast.event_loop == "compiled (numba)" and reference.event_loop.startswith("python")
    assert_same(fast, reference)
    assert fast.summary() == pytest.approx(reference.summary(), nan_ok=True)


# --- split pools: each pool on its own GPU type (a scenario's pools section, issue 29) ----------------------------

SPLIT = {"name": "split pools", "model": "llama-3.1-8b", "gpu": {"name": "h200", "count": 1},
         "serving": {"engine": "ideal", "kv_transfer_bandwidth": "50 GB/s", "max_model_len": 8192},
         "workload": {"prompt_tokens": 2000, "output_tokens": 300, "arrival_rate": 30},
         "slo": {"tpot": "40 ms", "ttft": "500 ms"},
         "fleet": {"modes": ["split"], "tensor_parallel": [1]},
         "pools": {"prefill": {"gpu": {"name": "h100-sxm"}}, "decode": {"gpu": {"name": "h200"}}},
         "simulation": {"requests": 6000, "seed": 1, "router": "random"}}


def test_split_pools_simulated_agree_with_the_analytic_answer_within_10_percent():
    """The answer for 30 requests/s (``sizing.size``: split pools, prefill on H100 SXM, decode on H200, each pool
    sized for the whole load) simulated with its own replicas: mean TTFT (each prefill replica the M/D/1 queue the
    answer assumes, Poisson arrivals split at random, plus the KV transfer) and mean TPOT (a decode replica at its
    share of the load) within 10% of the answer's ``ttft_at_load_s`` and ``tpot_at_load_s``, and every request
    served. Measured: TTFT +0.5%, TPOT +1.7% (6,000 requests, seed 1)."""
    from capacity.planning.sizing import size

    s = Scenario.from_dict(SPLIT)
    z = size(s)
    assert z.mode == "split" and (z.prefill_gpu, z.gpu) == ("h100-sxm", "h200")
    result = simulate(s, prefill_replicas=z.prefill_replicas, replicas=z.decode_replicas)
    summary = result.summary()
    assert summary["mean_ttft_s"] == pytest.approx(z.ttft_at_load_s, rel=0.10)
    assert summary["mean_tpot_s"] == pytest.approx(z.tpot_at_load_s, rel=0.10)
    assert (result.requests["status"] == "completed").all()


def test_each_split_pool_runs_on_its_own_gpu():
    """One request alone: its TTFT is the prefill pool's prefill (H100 SXM) plus the KV transfer, its TPOT the decode
    pool's step (H200), not the scenario's own GPU's; the replicas default to the pools' workers."""
    raw = copy.deepcopy(SPLIT)
    raw["pools"] = {"prefill": {"gpu": {"name": "h100-sxm"}, "workers": 2}, "decode": {"gpu": {"name": "h200"},
                                                                                       "workers": 3}}
    raw["simulation"] = {"requests": 3, "arrival": "fixed", "rate": 0.1}
    s = Scenario.from_dict(raw)
    from capacity.model.split_pools import pool_scenarios
    from capacity.simulator.config import config_from_scenario

    config = config_from_scenario(s)
    assert (config.prefill_replicas, config.replicas) == (2, 3)
    pools = pool_scenarios(raw)
    prefill = pools.prefill.evaluate()
    df = simulate(s).requests
    transfer = 2000 * float(prefill["kv_bytes_per_token"]) / 50e9
    np.testing.assert_allclose(df["ttft_s"], float(prefill["prefill_s"]) + transfer, rtol=1e-9)
    h200 = pools.decode.gpu
    step = 16.06e9 / h200.effective_bandwidth  # weights of one batch-of-one step dominate: H200, not H100
    assert df["tpot_s"].mean() == pytest.approx(step, rel=0.05)
    assert df["tpot_s"].mean() < float(pools.prefill.evaluate()["decode_step_s"])
