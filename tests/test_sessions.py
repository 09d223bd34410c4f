"""Multi-turn sessions, the prefix-affinity router, and KV offload to CPU memory."""

import math

import numpy as np
import pytest

from capacity import load_scenario
from capacity.offload import offload, reload_s, sessions_held
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
