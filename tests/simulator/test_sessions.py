"""Multi-turn sessions, the prefix-affinity router, and KV offload to CPU memory."""

import math

import numpy as np
import pytest

from capacity import load_scenario
from capacity.model.offload import offload, reload_s, sessions_held
from capacity.simulator import simulate
from capacity.simulator.config import config_from_scenario
from capacity.simulator.workloads import generate
from tests.conftest import SCENARIOS

SESSIONS = {"requests": 2000, "seed": 0, "rate": 8.0, "turns": 4, "think_time": "20 s", "turn_tokens": 100,
            "replicas": 4}


@pytest.fixture(scope="module")
def chat():
    return load_scenario(SCENARIOS / "chat-llama-3.1-8b-h100.yaml")


def test_turns_carry_the_conversation_so_far(chat):
    table = generate(config_from_scenario(chat, requests=40, seed=2, rate=1.0, turns=4, turn_tokens=100))
    assert len(table) == 40 and (np.diff(table.arrival_s) >= 0).all()
    for s in range(10):
        turn = np.flatnonzero(table.session == s)
        assert len(turn) == 4
        prompts, outputs, prefix = table.prompt_tokens[turn], table.output_tokens[turn], table.prefix_tokens[turn]
        assert prefix[0] == 0 and table.prefix_id[turn[0]] == -1
        for k in range(1, 4):  # history = the previous prompt and answer; then 100 new tokens
            assert prefix[k] == prompts[k - 1] + outputs[k - 1] and prompts[k] == prefix[k] + 100
            assert table.prefix_id[turn[k]] == s


def test_prefix_affinity_finds_the_conversation_cached(chat):
    spread = simulate(chat, router="round_robin", **SESSIONS)
    sticky = simulate(chat, router="prefix_affinity", **SESSIONS)
    replicas = sticky.requests.groupby(sticky.requests["request_id"].map(
        dict(enumerate(generate(config_from_scenario(chat, **SESSIONS)).session))))["replica"].nunique()
    assert (replicas == 1).all()  # every session stays on one replica
    hit = [r.summary()["prefix_cache_hit_rate"] for r in (spread, sticky)]
    assert hit[1] > 2 * hit[0]
    assert sticky.summary()["mean_ttft_s"] < spread.summary()["mean_ttft_s"]


def test_offload_by_hand(essay001):
    kv = 131_072
    assert reload_s(2000, kv, 50e9) == pytest.approx(2000 * kv / 50e9)
    assert sessions_held(56e9, 2000, kv) == math.floor(56e9 / (2000 * kv)) == 213
    out = offload(essay001, cpu_memory_bytes=256e9, link_bandwidth=50e9, history_tokens=2000)
    assert out["sessions_on_gpu"] == 213
    assert out["sessions_with_offload"] == 213 + math.floor(256e9 / (2000 * kv))
    assert out["recompute_s"] == pytest.approx(0.003 + 2000 * 16e9 / 150e12)  # prefill of the history
    assert out["ttft_saved_s"] == pytest.approx(out["recompute_s"] - out["reload_s"])
    # a slow link loses to recomputing
    assert offload(essay001, 256e9, 1e9, 2000)["ttft_saved_s"] < 0


OFFLOAD_RUN = {"requests": 6000, "seed": 0, "rate": 3.0, "turns": 3, "think_time": "600 s", "turn_tokens": 100,
               "prompt_tokens": 1000, "output_tokens": 300}


@pytest.fixture(scope="module")
def offload_runs(essay001):
    """Essay 001 at 3 requests/s in 3-turn sessions, 10 minutes between turns: about 600 idle conversations,
    more than the GPU's pool keeps (328 of 1,300 tokens), so histories are evicted between turns."""
    plain = simulate(essay001, **OFFLOAD_RUN)
    fast = simulate(essay001, **OFFLOAD_RUN, cpu_offload="32 GB", offload_bandwidth="50 GB/s")
    slow = simulate(essay001, **OFFLOAD_RUN, cpu_offload="32 GB", offload_bandwidth="1 GB/s")
    return plain, fast, slow


def _saved_s(plain, offloaded, history):
    """Median over the turns that loaded their whole history back of their TTFT without offload minus with it."""
    a, b = plain.requests.set_index("request_id"), offloaded.requests.set_index("request_id")
    rows = b.index[b["reloaded_tokens"] == history]
    assert len(rows) > 100
    return float((a.loc[rows, "ttft_s"] - b.loc[rows, "ttft_s"]).median())


def test_simulated_offload_agrees_with_the_analytic_ttft(essay001, offload_runs):
    """Turn 3 finds turn 2's history (1,000 + 300 tokens) on the CPU: its TTFT gains the transfer and loses the
    recompute. Stated tolerance: the simulated saving within 5% of the recompute time of offload.offload's
    ``ttft_saved_s`` (measured: 135.3 ms against 138.3 ms at 50 GB/s, the 3 ms step overhead the analytic
    recompute counts for a pass of its own; -31.7 ms against -28.7 ms at 1 GB/s, where reloading loses)."""
    plain, fast, slow = offload_runs
    for run, bandwidth in ((fast, 50e9), (slow, 1e9)):
        analytic = offload(essay001, 32e9, bandwidth, 1300)
        assert abs(_saved_s(plain, run, 1300) - analytic["ttft_saved_s"]) <= 0.05 * analytic["recompute_s"]
    assert fast.summary()["mean_ttft_s"] < plain.summary()["mean_ttft_s"] < slow.summary()["mean_ttft_s"]
    assert "reloaded_tokens" not in plain.requests and "cpu_reload_rate" not in plain.summary()


def test_simulated_offload_keeps_what_the_cpu_holds(essay001, offload_runs):
    """What offload buys in concurrency: the CPU tier keeps floor(cpu / (H kv)) more histories. It holds turn 2's
    (1,300 tokens, still wanted) and turn 3's (1,700, sessions over) histories, so the most it held at once lies
    between the analytic count for 1,700 and for 1,300 tokens (143 and 187 in 32 GB; measured 166)."""
    _, fast, _ = offload_runs
    kv = essay001.evaluate()["kv_bytes_per_token_per_gpu"]
    held = fast.summary()["peak_cpu_prefixes"]
    assert sessions_held(32e9, 1700, kv) <= held <= sessions_held(32e9, 1300, kv)
    assert offload(essay001, 32e9, 50e9, 1300)["sessions_with_offload"] - 328 == sessions_held(32e9, 1300, kv)
    assert fast.summary()["cpu_reload_rate"] > 0.03


def test_offload_needs_a_link(essay001):
    from capacity import ScenarioError

    with pytest.raises(ScenarioError, match="simulation.offload_bandwidth is missing"):
        simulate(essay001, requests=10, rate=1.0, cpu_offload="32 GB")
    with pytest.raises(ScenarioError, match="simulation.cpu_offload"):
        simulate(essay001, requests=10, rate=1.0, cpu_offload="-1 GB", offload_bandwidth="50 GB/s")
