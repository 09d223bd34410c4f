"""Invariants of the simulator, checked on random configurations (hypothesis) and against brute force.

For any workload and settings: every submitted request ends completed or rejected; the
blocks in use never exceed the pool and all return to it; each request's tokens come in
order, one per index, without gaps; the same seed gives the same result.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capacity import Scenario
from capacity.simulator import RooflineCost, TeachingCost, simulate
from capacity.simulator.allocator import BlockAllocator, GrowthTracker
from capacity.simulator.metrics import range_max

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def small_scenario(block_size: int) -> Scenario:
    """A 0.2 GB KV pool: 95 blocks of 16 tokens, 217 of 7, 1,525 of 1 (131,072 B per token)."""
    return Scenario.from_dict({
        "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
        "gpu": {"memory": "16.2 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
        "serving": {"memory_utilization": 1.0, "block_size": block_size, "max_model_len": 4096,
                    "step_overhead": "3 ms"},
        "workload": {"prompt_tokens": 100, "output_tokens": 50, "arrival_rate": 20}})


SCENARIOS = {bs: small_scenario(bs) for bs in (1, 7, 16)}

settings_ = st.fixed_dictionaries({
    "policy": st.sampled_from(["continuous", "continuous", "static"]),
    "cost_model": st.sampled_from(["teaching", "roofline"]),
    "kv_allocation": st.sampled_from(["on_demand", "reserve"]),
    "chunked_prefill": st.booleans(),
    "max_batched_tokens": st.integers(8, 700),
    "requests": st.integers(1, 50),
    "arrival": st.sampled_from(["poisson", "fixed", "gamma", "on_off", "instant"]),
    "rate": st.floats(0.5, 200),
    "seed": st.integers(0, 10_000),
    "prompt_tokens": st.integers(1, 700).flatmap(
        lambda hi: st.just({"dist": "uniform", "low": max(1, hi // 3), "high": hi})),
    "output_tokens": st.integers(1, 300).flatmap(lambda hi: st.just({"dist": "uniform", "low": 1, "high": hi})),
    "shared_prefix_tokens": st.sampled_from([0, 0, 40, 200]),
    "prefix_groups": st.integers(1, 3),
    "prefix_caching": st.booleans(),
    "priorities": st.sampled_from([[0], [0, 1]]),
    "max_num_seqs": st.one_of(st.none(), st.integers(1, 12)),
    "max_queued_requests": st.one_of(st.none(), st.integers(0, 20)),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_size=st.sampled_from([1, 7, 16]), overrides=settings_)
def test_invariants_hold_for_any_configuration(block_size, overrides):
    scenario = SCENARIOS[block_size]
    overrides["shared_prefix_tokens"] = min(overrides["shared_prefix_tokens"], overrides["prompt_tokens"]["low"])
    result = simulate(scenario, record_tokens=True, **overrides)  # the pool's books are checked at the end
    df = result.requests
    summary = result.summary()
    pool = summary["kv_pool_blocks"]

    assert set(df["status"]) <= {"completed", "rejected"}
    assert summary["requests_completed"] + summary["requests_rejected"] == summary["requests_submitted"]
    assert (df.loc[df["status"] == "rejected", "reject_reason"] != "").all()
    assert summary["peak_kv_blocks_used"] <= pool
    assert (result.timeline["kv_blocks_used"] <= pool).all()

    done = df[df["status"] == "completed"]
    assert set(result.token_times) == set(done["request_id"])
    for row in done.itertuples():
        times = result.token_times[row.request_id]
        assert len(times) == row.output_tokens  # one time per token index 1..A: none missing, none twice
        assert np.all(np.diff(times) > 0)  # in order
        # token times are the engine's clock; the TTFT a user sees adds the request latency outside the engine
        assert times[0] == pytest.approx(row.arrival_s + row.ttft_s - result.config.request_latency_s, abs=1e-9)
        assert times[-1] == pytest.approx(row.finish_s, abs=1e-9)
        if row.output_tokens > 1:
            assert np.diff(times).max() == pytest.approx(row.max_itl_s, abs=1e-9)
        assert 0 <= row.queue_s <= row.ttft_s <= row.e2e_s

    again = simulate(scenario, record_tokens=True, **overrides)
    assert again.requests.equals(df)


@settings(max_examples=200, deadline=None)
@given(block_size=st.one_of(st.integers(1, 40), st.integers(250, 270)),  # residue sums, and Fenwick past 256
       lengths=st.lists(st.integers(-500, 5000), min_size=0, max_size=30),
       step=st.integers(600, 10_000), ahead=st.integers(0, 500), available=st.integers(0, 400))
def test_growth_tracker_counts_blocks_like_brute_force(block_size, lengths, step, ahead, available):
    tracker = GrowthTracker(block_size)
    for c in lengths:
        tracker.add(c)
    if lengths:
        tracker.remove(lengths[0])
    kept = lengths[1:]

    def brute(g: int) -> int:
        return sum(math.ceil((c + g) / block_size) for c in kept)

    assert tracker.total(step) == brute(step)
    assert tracker.next_step_blocks(step) == brute(step + 1) - brute(step)
    assert tracker.grown(step, ahead) == brute(step + ahead) - brute(step)
    k, grow = tracker.steps_affordable(step, available, ahead)
    assert grow == brute(step + k) - brute(step) <= available
    assert k == ahead or brute(step + k + 1) - brute(step) > available


@settings(max_examples=300, deadline=None)
@given(batch=st.integers(1, 2000), context=st.integers(0, 5_000_000), steps=st.integers(1, 400),
       overhead_ms=st.floats(0, 10), kind=st.sampled_from(["teaching", "dense", "window", "moe"]),
       window=st.integers(16, 4096), local=st.sampled_from([0.5, 1.0]))
def test_closed_form_decode_run_equals_the_sum_of_steps(batch, context, steps, overhead_ms, kind, window, local):
    cost = TeachingCost() if kind == "teaching" else RooflineCost(
        weights_s=8e-3, kv_s_per_token=65.536e-9, decode_compute_s=0.10667e-3, prefill_compute_s=0.10667e-3,
        fixed_s=overhead_ms * 1e-3, comm_s_per_token=1e-6,
        sliding_window=window if kind == "window" else math.inf, local_fraction=local if kind == "window" else 0,
        moe_weights_s=(lambda tokens: 1e-3 + 7e-3 * (1 - 0.9**tokens)) if kind == "moe" else None)
    each = [cost.step_s(batch, context + batch * j, 0) for j in range(steps)]
    total, first, last = cost.window(batch, context, steps)
    assert total == pytest.approx(sum(each), rel=1e-9)
    assert cost.decode_run_s(batch, context, steps) == pytest.approx(sum(each), rel=1e-9)
    assert first == pytest.approx(each[0]) and last == pytest.approx(max(each))
    k = cost.steps_to_reach(batch, context, sum(each[: steps // 2 + 1]) * (1 - 1e-12))
    assert k == steps // 2 + 1


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=200), data=st.data())
def test_range_max_matches_brute_force(values, data):
    n = len(values)
    ranges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)), max_size=50))
    ranges = [(lo, hi) for lo, hi in ranges if hi > lo]
    lo = np.array([r[0] for r in ranges], dtype=int)
    hi = np.array([r[1] for r in ranges], dtype=int)
    expected = [max(values[a:b]) for a, b in ranges]
    assert range_max(np.array(values), lo, hi).tolist() == expected


def test_prefix_cache_evicts_least_recently_used_unreferenced_blocks():
    pool = BlockAllocator(10)
    assert pool.acquire_prefix(1, 3) == 3 and pool.acquire_prefix(2, 3) == 3
    assert pool.acquire_prefix(1, 3) == 0  # a hit: stored once, two references
    assert pool.hit_blocks == 3
    pool.release_prefix(1, 3)
    pool.release_prefix(2, 3)  # prefix 2 unreferenced, most recently used
    assert (pool.free, pool.evictable, pool.used) == (4, 3, 3)
    pool.release_prefix(1, 3)  # now prefix 1 is the most recently released
    pool.take(6)  # 4 free + 2 evicted from the least recently used prefix (2), tail first
    assert pool.prefix_hits(2, 3) == 1 and pool.prefix_hits(1, 3) == 3
    pool.take(1)  # the last block of prefix 2
    assert pool.prefix_hits(2, 3) == 0 and 2 not in pool.prefixes
    with pytest.raises(RuntimeError, match="overdrawn"):
        pool.take(4)
