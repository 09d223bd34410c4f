"""The compiled event loop (``capacity/simulator/compiled.py``) against the Python loop, its reference.

For every configuration it supports the compiled loop must give the very same per-request results, timeline
and counters as ``scheduler._run_unchunked`` (bit for bit: it compiles the cost model's own functions and does
the same operations in the same order). Random configurations over a fixed list of seeds (block sizes from 1
to past the Fenwick threshold, pools that force preemption, priorities, bounded queues, both cost models, both
KV allocations, whole and chunked prefills, requests too long for the pool); shared prefixes through the
prefix cache (one prefix; many prefixes under eviction pressure, evicted and admitted again; sessions; the cache
left in the same state, LRU order included); KV offload to a CPU tier (tiers that hold every prefix or overflow,
slow links, sessions; the tier left in the same state); chunked re-entry with tiny buffers; the fallback to Python
where the compiled loop does not apply or numba is missing or cannot cache; the app's deadline stopping it.
The pinned seeded runs run on both loops in ``tests/simulator/test_pinned.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from capacity.model.scenario import Scenario, load_scenario
from capacity.runtime import budget
from capacity.simulator import _simulate_one, compiled, simulate, simulate_table
from capacity.simulator.config import config_from_scenario
from capacity.simulator.workloads import generate

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[2]

SMALL = {  # tests/simulator/test_simulator.py's small engine: a KV pool of 95 blocks of 16 tokens
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "16.2 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
    "serving": {"memory_utilization": 1.0, "block_size": 16, "max_model_len": 4096, "step_overhead": "3 ms"},
    "workload": {"prompt_tokens": 100, "output_tokens": 50, "arrival_rate": 20},
}
SEEDS = list(range(24))


def random_case(seed: int) -> tuple[Scenario, dict]:
    """A random small engine and simulation block the compiled loop supports (seeded)."""
    rng = np.random.default_rng(seed)
    block = int(rng.choice([1, 4, 16, 32, 300]))
    raw = json.loads(json.dumps(SMALL))
    raw["gpu"]["memory"] = f"{16.05 + rng.uniform(0, 0.6):.3f} GB"
    raw["serving"]["block_size"] = block
    raw["serving"]["max_model_len"] = int(rng.choice([400, 4096]))
    low = int(rng.integers(1, 60))
    overrides = {
        "requests": int(rng.integers(250, 600)), "seed": seed,
        "rate": float(rng.uniform(4, 45)), "arrival": str(rng.choice(["poisson", "gamma", "fixed", "instant"])),
        "cost_model": str(rng.choice(["roofline", "teaching"])),
        "kv_allocation": str(rng.choice(["on_demand", "reserve"])),
        "prompt_tokens": {"dist": "uniform", "low": low, "high": low + int(rng.integers(1, 700))},
        "output_tokens": {"dist": "uniform", "low": 1, "high": int(rng.integers(2, 300))},
        "watermark": float(rng.choice([0.0, 0.01, 0.05])),
        "max_batched_tokens": int(rng.choice([64, 512, 8192])),
        "prefix_caching": bool(rng.integers(0, 2)),
        "chunked_prefill": bool(rng.random() < 0.4),
    }
    if rng.random() < 0.5:
        overrides["max_num_seqs"] = int(rng.integers(1, 40))
    if rng.random() < 0.35:
        overrides["priorities"] = [0, 1, 2] if rng.random() < 0.5 else [5, -3]
    if rng.random() < 0.3:
        overrides["max_queued_requests"] = int(rng.integers(0, 40))
    if rng.random() < 0.3:
        overrides["max_queued_tokens"] = int(rng.integers(200, 6000))
    return Scenario.from_dict(raw), overrides


def prefix_case(seed: int) -> tuple[Scenario, dict]:
    """``random_case(seed)`` with shared prefixes: from one to 40 prefixes of 16 to 400 tokens (up to 25 of the small
    pool's 95 blocks each, so unreferenced prefixes are evicted and admitted again), caching mostly on."""
    scenario, overrides = random_case(seed)
    rng = np.random.default_rng(1000 + seed)
    longest = overrides["prompt_tokens"]["high"]
    overrides["shared_prefix_tokens"] = min(int(rng.choice([16, 64, 200, 400])), longest)
    overrides["prefix_groups"] = int(rng.choice([1, 3, 12, 40]))
    overrides["prefix_caching"] = bool(rng.random() < 0.85)
    return scenario, overrides


PREFIX_SEEDS = list(range(30))


def assert_same(a, b) -> None:  # noqa: ANN001
    """Two SimulationResults are identical: every request's row (floats bit for bit), timeline, counters."""
    assert a.requests.columns.equals(b.requests.columns)
    for column in a.requests.columns:
        x, y = a.requests[column].to_numpy(), b.requests[column].to_numpy()
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), column
        else:
            assert np.array_equal(x, y), column
    assert a.timeline.equals(b.timeline)
    assert a.counters == b.counters


@pytest.fixture(scope="module")
def random_runs():
    """(seed, python result, compiled result) for every seed."""
    out = []
    for seed in SEEDS:
        scenario, overrides = random_case(seed)
        out.append((seed, simulate(scenario, event_loop="python", **overrides),
                    simulate(scenario, event_loop="compiled", **overrides)))
    return out


def test_compiled_loop_equals_python_on_random_configurations(random_runs):
    for seed, python, fast in random_runs:
        assert python.event_loop.startswith("python") and fast.event_loop == "compiled (numba)", seed
        assert_same(python, fast)


def test_random_configurations_reach_every_path(random_runs):
    """The seed list covers what the compiled loop must get right: preemption, rejection, priorities, growth."""
    preempted = [s for s, r, _ in random_runs if r.counters["preemptions"]]
    rejected = [s for s, r, _ in random_runs if (r.requests["status"] == "rejected").any()]
    queue_full = [s for s, r, _ in random_runs if r.requests["reject_reason"].str.startswith("queue full").any()]
    too_long = [s for s, r, _ in random_runs if r.requests["reject_reason"].str.contains("max_model_len").any()]
    mixed = [s for s, r, _ in random_runs if r.requests["priority"].nunique() > 1 and r.counters["preemptions"]]
    fenwick = [s for s, r, _ in random_runs if r.scenario.serving.block_size > 256
               and r.config.kv_allocation == "on_demand"]
    chunked = [s for s, r, _ in random_runs if r.config.chunked_prefill and r.counters["preemptions"]]
    for name, seeds in {"chunked prefill with preemption": chunked,
                        "preemption": preempted, "rejection": rejected, "queue full": queue_full,
                        "max_model_len": too_long, "priorities with preemption": mixed,
                        "blocks past the residue limit": fenwick}.items():
        assert seeds, f"no seed reaches {name}"


class CacheEvents:
    """What the Python loop's prefix cache did (``BlockAllocator`` wrapped): evictions, and prefixes admitted again
    after losing blocks to an eviction."""

    def __init__(self, monkeypatch) -> None:  # noqa: ANN001
        from capacity.simulator.allocator import BlockAllocator

        self.evicted: set[int] = set()
        self.evictions = self.readmissions = 0
        take, acquire = BlockAllocator.take, BlockAllocator.acquire_prefix

        def counting_take(alloc, blocks):  # noqa: ANN001, ANN202
            if blocks > alloc.free and alloc.lru:
                self.evictions += 1
                self.evicted.add(next(iter(alloc.lru)))
            return take(alloc, blocks)

        def counting_acquire(alloc, prefix_id, prefix_blocks):  # noqa: ANN001, ANN202
            if prefix_id in self.evicted and alloc.prefix_hits(prefix_id, prefix_blocks) < prefix_blocks:
                self.readmissions += 1
            return acquire(alloc, prefix_id, prefix_blocks)

        monkeypatch.setattr(BlockAllocator, "take", counting_take)
        monkeypatch.setattr(BlockAllocator, "acquire_prefix", counting_acquire)


@pytest.fixture(scope="module")
def prefix_runs():
    """(seed, python result, compiled result, cache events of the Python run) for every prefix seed."""
    out = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for seed in PREFIX_SEEDS:
            scenario, overrides = prefix_case(seed)
            events = CacheEvents(monkeypatch)
            python = simulate(scenario, event_loop="python", **overrides)
            monkeypatch.undo()
            out.append((seed, python, simulate(scenario, event_loop="compiled", **overrides), events))
    return out


def test_compiled_loop_equals_python_with_shared_prefixes(prefix_runs):
    for seed, python, fast, _ in prefix_runs:
        assert python.event_loop.startswith("python") and fast.event_loop == "compiled (numba)", seed
        assert_same(python, fast)


def test_prefix_configurations_reach_every_path(prefix_runs):
    """The prefix seeds hit the cache, evict from it and admit evicted prefixes again, with whole and chunked
    prefills, blocks on demand with preemption, reserved blocks, and caching off."""
    hits = [s for s, r, _, _ in prefix_runs if r.counters["cached_tokens"]]
    evicting = [s for s, _, _, ev in prefix_runs if ev.evictions]
    readmitted = [s for s, _, _, ev in prefix_runs if ev.readmissions]
    on_demand = [s for s, r, _, ev in prefix_runs if ev.evictions and r.counters["preemptions"]]
    reserve = [s for s, r, _, ev in prefix_runs if ev.evictions and r.config.kv_allocation == "reserve"]
    chunked = [s for s, r, _, ev in prefix_runs if r.config.chunked_prefill and ev.readmissions]
    whole = [s for s, r, _, ev in prefix_runs if not r.config.chunked_prefill and ev.readmissions]
    uncached = [s for s, r, _, _ in prefix_runs if not r.config.prefix_caching and r.counters["preemptions"]]
    one = [s for s, r, _, _ in prefix_runs if r.config.prefix_groups == 1 and r.counters["cached_tokens"]]
    for name, seeds in {"cache hits": hits, "eviction": evicting, "evicted prefixes admitted again": readmitted,
                        "eviction with preemption": on_demand, "eviction with reserved blocks": reserve,
                        "chunked prefill re-admitting": chunked, "whole prefills re-admitting": whole,
                        "caching off with preemption": uncached, "one shared prefix": one}.items():
        assert seeds, f"no prefix seed reaches {name}"


def _run_and_engine(monkeypatch, scenario: Scenario, event_loop: str, **overrides):  # noqa: ANN001, ANN202
    """The result of one run and its engine once it has ended (its allocator included)."""
    import capacity.simulator as sim

    engines = []
    books = sim.books
    monkeypatch.setattr(sim, "books", lambda e, *a: engines.append(e) or books(e, *a))
    result = simulate(scenario, event_loop=event_loop, **overrides)
    assert result.event_loop.startswith(event_loop)
    return result, engines[0]


def _engine_after(monkeypatch, scenario: Scenario, event_loop: str, **overrides):  # noqa: ANN001, ANN202
    """The engine of one run once it has ended (its allocator included)."""
    return _run_and_engine(monkeypatch, scenario, event_loop, **overrides)[1]


@pytest.mark.parametrize("chunked", [False, True])
def test_the_prefix_cache_ends_in_the_same_state(monkeypatch, chunked):
    """12 prefixes of 25 blocks over a pool of 95: the cached entries, their blocks, the LRU order and the counts
    the compiled loop writes back are the Python loop's."""
    overrides = {"requests": 800, "rate": 15, "seed": 4, "shared_prefix_tokens": 400, "prefix_groups": 12,
                 "prompt_tokens": {"dist": "uniform", "low": 300, "high": 900},
                 "output_tokens": {"dist": "uniform", "low": 1, "high": 80},
                 "chunked_prefill": chunked, "max_batched_tokens": 512}
    scenario = Scenario.from_dict(SMALL)
    a = _engine_after(monkeypatch, scenario, "python", **overrides).alloc
    b = _engine_after(monkeypatch, scenario, "compiled", **overrides).alloc
    assert a.prefixes == b.prefixes and list(a.lru) == list(b.lru)
    assert (a.free, a.cached, a.evictable, a.hit_blocks) == (b.free, b.cached, b.evictable, b.hit_blocks)
    assert len(a.lru) > 1 and a.cached < 12 * 25  # several prefixes stay cached, and some were evicted


@pytest.mark.parametrize("overrides", [
    {"shared_prefix_tokens": 200},  # one prefix (the landing preset's shape)
    {"shared_prefix_tokens": 200, "chunked_prefill": True, "max_batched_tokens": 256},
    {"turns": 3, "think_time": "2 s", "turn_tokens": {"dist": "uniform", "low": 20, "high": 120},
     "prompt_tokens": {"dist": "uniform", "low": 50, "high": 300}},  # sessions: one prefix per conversation
])
def test_shared_prefix_workloads_agree(overrides):
    scenario = Scenario.from_dict(SMALL)
    base = {"requests": 1500, "rate": 25, "seed": 2, "prompt_tokens": {"dist": "uniform", "low": 200, "high": 700}}
    python = simulate(scenario, event_loop="python", **{**base, **overrides})
    fast = simulate(scenario, event_loop="compiled", **{**base, **overrides})
    assert fast.event_loop == "compiled (numba)"
    assert python.counters["cached_tokens"] and python.counters["preemptions"]
    assert_same(python, fast)


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_chunks_and_growing_buffers_change_nothing(monkeypatch, seed):
    """Seven iterations per kernel call and buffers that start at one row: many returns, re-entries, regrowths."""
    scenario, overrides = prefix_case(seed) if seed == 7 else random_case(seed)
    want = simulate(scenario, event_loop="python", **overrides)
    monkeypatch.setattr(compiled, "CHUNK_ITERATIONS", 7)
    monkeypatch.setattr(compiled, "WINDOWS_PER_REQUEST", 0)
    monkeypatch.setattr(compiled, "MIN_ROWS", 1)
    grown = []
    original = compiled._grown_to
    monkeypatch.setattr(compiled, "_grown_to", lambda a, need, axis: grown.append(need) or original(a, need, axis))
    got = simulate(scenario, event_loop="compiled", **overrides)
    assert got.event_loop == "compiled (numba)"
    assert_same(want, got)
    assert grown  # the buffers did grow


#: KV offload over the small engine (blocks of 16 tokens, 2 MiB each: "20 MB" of CPU memory holds 9 blocks):
#: 12 prefixes of 25 blocks compete for a pool of 95, so unreferenced ones are evicted to the CPU tier and load back.
OFFLOAD_BASE = {"requests": 700, "rate": 20, "shared_prefix_tokens": 400, "prefix_groups": 12,
                "prompt_tokens": {"dist": "uniform", "low": 300, "high": 900},
                "output_tokens": {"dist": "uniform", "low": 1, "high": 80}}
OFFLOAD_CASES = {
    "a tier that holds every prefix": {"cpu_offload": "1 GB", "offload_bandwidth": "50 GB/s", "seed": 1},
    "a tier of 9 blocks that overflows": {"cpu_offload": "20 MB", "offload_bandwidth": "50 GB/s", "seed": 2},
    "a tier of one block, 40 prefixes": {"cpu_offload": "4 MB", "offload_bandwidth": "1 GB/s", "seed": 3,
                                         "prefix_groups": 40, "shared_prefix_tokens": 200},
    "under one block: no tier": {"cpu_offload": "1 MB", "offload_bandwidth": "50 GB/s", "seed": 4},
    "a slow link, chunked prefill": {"cpu_offload": "60 MB", "offload_bandwidth": "200 MB/s", "seed": 5,
                                     "chunked_prefill": True, "max_batched_tokens": 512},
    "reserved blocks, 3 prefixes": {"cpu_offload": "40 MB", "offload_bandwidth": "20 GB/s", "seed": 6,
                                    "kv_allocation": "reserve", "prefix_groups": 3},
    "prefix caching off": {"cpu_offload": "40 MB", "offload_bandwidth": "50 GB/s", "seed": 7, "prefix_caching": False},
    "sessions": {"cpu_offload": "30 MB", "offload_bandwidth": "5 GB/s", "seed": 8, "turns": 3, "think_time": "2 s",
                 "shared_prefix_tokens": 0,
                 "turn_tokens": {"dist": "uniform", "low": 20, "high": 120},
                 "prompt_tokens": {"dist": "uniform", "low": 50, "high": 300}},
    "priorities, few slots, 3 prefixes": {"cpu_offload": "100 MB", "offload_bandwidth": "2 GB/s", "seed": 9,
                                          "priorities": [0, 1, 2], "max_num_seqs": 8, "prefix_groups": 3},
    "teaching cost, short prefixes, chunked": {"cpu_offload": "10 MB", "offload_bandwidth": "500 MB/s", "seed": 10,
                                               "cost_model": "teaching", "shared_prefix_tokens": 64,
                                               "prefix_groups": 40, "chunked_prefill": True, "max_batched_tokens": 256},
}


@pytest.mark.parametrize("case", list(OFFLOAD_CASES))
def test_kv_offload_agrees(monkeypatch, case):
    """A CPU tier (``BlockAllocator.offload``, ``cpu_hits``, the reload ``Engine.charge_reload`` waits for): both
    loops give the same results, reload counters and rates included, and leave the GPU cache and the CPU tier (its
    runs and their LRU order) in the same state."""
    scenario, overrides = Scenario.from_dict(SMALL), {**OFFLOAD_BASE, **OFFLOAD_CASES[case]}
    python, engine = _run_and_engine(monkeypatch, scenario, "python", **overrides)
    fast, fast_engine = _run_and_engine(monkeypatch, scenario, "compiled", **overrides)
    a, b = engine.alloc, fast_engine.alloc
    assert fast.event_loop == "compiled (numba)"
    assert_same(python, fast)
    assert "reloaded_tokens" in fast.requests and "reloaded_tokens" in fast.counters
    for key in ("cpu_reload_rate", "peak_cpu_prefixes"):
        assert python.summary()[key] == fast.summary()[key], key
    assert a.prefixes == b.prefixes and list(a.lru) == list(b.lru) and list(a.cpu.items()) == list(b.cpu.items())
    assert (a.free, a.cached, a.evictable, a.hit_blocks) == (b.free, b.cached, b.evictable, b.hit_blocks)
    assert (a.cpu_blocks, a.cpu_used, a.reloaded_blocks, a.peak_cpu_prefixes) == \
        (b.cpu_blocks, b.cpu_used, b.reloaded_blocks, b.peak_cpu_prefixes)


def test_offload_cases_reach_every_path(monkeypatch):
    """The offload cases move evicted blocks to the CPU (growing a prefix's run), cap runs at a full tier and drop
    the oldest ones, and load runs back that fall short of or go past what the GPU lacks, beside cached blocks."""
    from capacity.simulator.allocator import BlockAllocator

    seen = dict.fromkeys(("offloaded", "grown", "capped", "dropped", "reloaded", "beside cached blocks",
                          "short of the missing blocks", "past the missing blocks"), 0)
    offload, acquire = BlockAllocator.offload, BlockAllocator.acquire_prefix

    def counting_offload(alloc, prefix_id, blocks):  # noqa: ANN001, ANN202
        run, others = alloc.cpu.get(prefix_id, 0), len(alloc.cpu) - (prefix_id in alloc.cpu)
        offload(alloc, prefix_id, blocks)
        seen["offloaded"] += 1
        seen["grown"] += run > 0
        seen["capped"] += run + blocks > alloc.cpu_blocks
        seen["dropped"] += others > len(alloc.cpu) - 1

    def counting_acquire(alloc, prefix_id, prefix_blocks):  # noqa: ANN001, ANN202
        cached = alloc.prefix_hits(prefix_id, prefix_blocks)
        run, missing = alloc.cpu.get(prefix_id, 0), prefix_blocks - cached
        if run and missing > 0:
            seen["reloaded"] += 1
            seen["beside cached blocks"] += cached > 0
            seen["short of the missing blocks"] += run < missing
            seen["past the missing blocks"] += run > missing
        return acquire(alloc, prefix_id, prefix_blocks)

    monkeypatch.setattr(BlockAllocator, "offload", counting_offload)
    monkeypatch.setattr(BlockAllocator, "acquire_prefix", counting_acquire)
    for case in OFFLOAD_CASES.values():
        simulate(Scenario.from_dict(SMALL), event_loop="python", **{**OFFLOAD_BASE, **case})
    assert all(seen.values()), seen


def test_the_compiled_loop_fills_the_cpu_tier_and_charges_reloads(monkeypatch):
    """With a CPU tier of 9 blocks the compiled loop itself offloads evicted prefix blocks, fills the tier, loads
    blocks back instead of prefilling them and waits for them: a slower link delays the first tokens."""
    scenario, overrides = Scenario.from_dict(SMALL), {**OFFLOAD_BASE, **OFFLOAD_CASES["a tier of 9 blocks that "
                                                                                     "overflows"]}
    fast, engine = _run_and_engine(monkeypatch, scenario, "compiled", **overrides)
    assert fast.event_loop == "compiled (numba)"
    summary = fast.summary()
    assert fast.counters["reloaded_tokens"] > 0 and summary["cpu_reload_rate"] > 0
    assert fast.requests["reloaded_tokens"].sum() == fast.counters["reloaded_tokens"]
    assert summary["peak_cpu_prefixes"] >= 1
    assert engine.alloc.cpu_blocks == 9 and engine.alloc.cpu_used == 9  # full at the end
    slow = simulate(scenario, event_loop="compiled", **{**overrides, "offload_bandwidth": "100 MB/s"})
    assert slow.event_loop == "compiled (numba)"
    assert slow.requests["ttft_s"].mean() > fast.requests["ttft_s"].mean()


def test_the_essay_scenarios_agree():
    """The sale-day engine with variable lengths and blocks on demand (the benchmark's workload, smaller)."""
    scenario = load_scenario(ROOT / "scenarios" / "sim-essay-001-analytic.yaml")
    overrides = {"requests": 4000, "rate": 6.5, "seed": 21, "kv_allocation": "on_demand",
                 "prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 0.6, "low": 16, "high": 8000},
                 "output_tokens": {"dist": "uniform", "low": 50, "high": 550}}
    assert_same(simulate(scenario, event_loop="python", **overrides),
                simulate(scenario, event_loop="compiled", **overrides))


@pytest.mark.parametrize(("overrides", "why"), [
    ({"record_tokens": True}, "record_tokens"),
    ({"policy": "static"}, "static batching"),
])
def test_unsupported_configurations_fall_back_to_python(overrides, why):
    scenario = Scenario.from_dict(SMALL)
    got = simulate(scenario, event_loop="compiled", requests=200, rate=20, seed=1, **overrides)
    want = simulate(scenario, event_loop="python", requests=200, rate=20, seed=1, **overrides)
    assert got.event_loop.startswith("python (") and why in got.event_loop
    assert_same(want, got)


def test_moe_cost_model_falls_back_to_python():
    scenario = Scenario.from_dict({"model": "mixtral-8x7b", "gpu": {"name": "h100-sxm", "count": 2},
                                   "workload": {"prompt_tokens": 500, "output_tokens": 50, "arrival_rate": 3}})
    result = simulate(scenario, event_loop="compiled", requests=50)
    assert "MoE" in result.event_loop


def test_missing_numba_falls_back_to_python(monkeypatch):
    scenario, overrides = random_case(5)
    want = simulate(scenario, event_loop="python", **overrides)
    import capacity.simulator

    monkeypatch.delattr(capacity.simulator, "compiled")
    monkeypatch.setitem(sys.modules, "capacity.simulator.compiled", None)  # the import now raises ImportError
    got = simulate(scenario, event_loop="compiled", **overrides)
    assert got.event_loop.startswith("python (compiled loop unavailable")
    assert_same(want, got)


def test_auto_runs_small_runs_in_python_until_numba_is_loaded(monkeypatch):
    from capacity.simulator import scheduler

    scenario = Scenario.from_dict(SMALL)
    import capacity.simulator

    monkeypatch.delattr(capacity.simulator, "compiled")
    monkeypatch.delitem(sys.modules, "capacity.simulator.compiled")
    small = simulate(scenario, requests=100, rate=20)
    assert small.event_loop.startswith("python (a small run")
    monkeypatch.setattr(scheduler, "AUTO_MIN_REQUESTS", 100)
    assert simulate(scenario, requests=100, rate=20).event_loop == "compiled (numba)"


def test_auto_under_a_time_budget_waits_for_the_kernel_to_be_loaded(monkeypatch):
    """The app's deadline cannot cut numba's import or a compile: under a budget "auto" starts neither."""
    import capacity.simulator
    from capacity.simulator import scheduler

    scenario = Scenario.from_dict(SMALL)
    monkeypatch.setattr(scheduler, "AUTO_MIN_REQUESTS", 100)
    monkeypatch.delattr(capacity.simulator, "compiled")
    monkeypatch.delitem(sys.modules, "capacity.simulator.compiled")
    with budget.time_budget(60):
        assert simulate(scenario, requests=100, rate=20).event_loop.startswith("python (a time budget is active")
    assert simulate(scenario, requests=100, rate=20).event_loop == "compiled (numba)"  # no budget: it loads
    with budget.time_budget(60):
        assert simulate(scenario, requests=100, rate=20).event_loop == "compiled (numba)"  # loaded: used


def test_unknown_event_loop_is_refused():
    with pytest.raises(ValueError, match="event_loop must be one of auto, compiled, python"):
        simulate(Scenario.from_dict(SMALL), event_loop="fast", requests=10, rate=20)


def test_the_deadline_stops_the_compiled_loop():
    """The kernel runs in chunks; between them ``budget.check`` raises once the app's deadline has passed."""
    scenario = load_scenario(ROOT / "scenarios" / "sim-essay-001-analytic.yaml")
    config = config_from_scenario(scenario, requests=300_000, rate=5.5, kv_allocation="on_demand",
                                  output_tokens={"dist": "uniform", "low": 50, "high": 550})
    table = generate(config)
    analytic = scenario.evaluate()
    simulate_table(scenario, config_from_scenario(scenario, requests=50), generate(config_from_scenario(
        scenario, requests=50)), "compiled")  # compiled or loaded before the clock starts
    with budget.time_budget(0.01), pytest.raises(budget.BudgetExceeded) as stopped:
        _simulate_one(scenario, config, table, analytic, "compiled")
    assert any(entry.path.name == "compiled.py" and entry.name == "run" for entry in stopped.traceback)


def test_without_a_writable_cache_it_compiles_in_the_process():
    """No cache location (a read-only install): numba refuses ``cache=True``; the loop compiles per process."""
    code = """if True:
        import numba.core.caching as caching
        caching.CacheImpl._locator_classes = []  # what numba finds when no cache directory is writable
        from capacity.model.scenario import Scenario
        from capacity.simulator import compiled, simulate
        import tests.simulator.test_compiled as t
        scenario, overrides = t.random_case(9)
        a = simulate(scenario, event_loop="python", **overrides)
        auto = simulate(scenario, **overrides)  # a small run: not worth compiling
        b = simulate(scenario, event_loop="compiled", **overrides)
        t.assert_same(a, b)
        print(compiled.cached, auto.event_loop.startswith("python (no writable cache"), b.event_loop)
    """
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "True", "compiled", "(numba)"]


@pytest.mark.parametrize("chunked", [False, True])
def test_a_queue_limit_of_zero_turns_every_request_away_in_both_loops(chunked):
    """``max_queued_requests: 0``: every arrival finds the queue full (each waits at least for the next step
    boundary), so every request is turned away with that reason. Taking arrivals in is progress: with more arrivals
    than the stall guard's 1,000 idle iterations the loops used to stop with "scheduler made no progress"."""
    scenario = Scenario.from_dict(SMALL)
    overrides = {"requests": 1_500, "max_queued_requests": 0, "chunked_prefill": chunked, "seed": 3}
    for loop in ("python", "compiled"):
        result = simulate(scenario, event_loop=loop, **overrides)
        frame = result.requests
        assert result.event_loop.startswith(loop)
        assert len(frame) == 1_500 and (frame["status"] == "rejected").all(), loop
        assert frame["reject_reason"].str.contains("max_queued_requests").all(), loop
