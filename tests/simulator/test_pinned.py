"""Behaviour guard for the simulator's event loop: seeded runs reproduce pinned per-request results.

``tests/data/simulator_pinned.npz`` was generated from main before the event loop was sped up (issue 17) with
``python3 tests/simulator/test_pinned.py --write``. Every case runs a different path of the engine (blocks on
demand with preemption, reserved blocks, chunked prefill, static batching, prefix caching, priorities, bounded
queues, replicas, MoE and sliding-window cost models, recorded token times). A speed-up that changes one
request's timing fails here; an intentional change of behaviour regenerates the file and says why in its commit.
Floats compare with rtol 1e-12 (NaN equals NaN); counts, statuses and counters compare equal. Each case runs
on the Python loop, and the cases in ``COMPILED`` also on the compiled loop (``capacity/simulator/compiled.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capacity.model.scenario import Scenario, load_scenario
from capacity.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "tests" / "data" / "simulator_pinned.npz"
SCENARIOS = ROOT / "scenarios"
RTOL = 1e-12

SMALL = {  # a KV pool of 95 blocks of 16 tokens (tests/simulator/test_simulator.py): preemption under load
    "model": {"layers": 32, "kv_heads": 8, "head_dim": 128, "params": 8e9, "weights": "16 GB"},
    "gpu": {"memory": "16.2 GB", "bandwidth": "2 TB/s", "flops": "150 TFLOP/s"},
    "serving": {"engine": "ideal", "memory_utilization": 1.0, "block_size": 16, "max_model_len": 4096,
                "step_overhead": "3 ms"},
    "workload": {"prompt_tokens": 100, "output_tokens": 50, "arrival_rate": 20},
}
VARIABLE = {"prompt_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 0.6, "low": 16, "high": 8000},
            "output_tokens": {"dist": "uniform", "low": 50, "high": 550}}
FLOATS = ("queue_s", "ttft_s", "tpot_s", "max_itl_s", "e2e_s", "finish_s")
COUNTERS = ("useful_slot_steps", "offered_slot_steps", "decode_steps", "preemptions", "prefill_tokens",
            "cached_tokens", "pool_blocks", "peak_blocks", "slots")


def _scenario(name: str) -> Scenario:
    if name == "small":
        return Scenario.from_dict(SMALL)
    if name in ("mixtral", "mistral"):
        model = "mixtral-8x7b" if name == "mixtral" else "mistral-7b"
        return Scenario.from_dict({"model": model, "gpu": {"name": "h100-sxm", "count": 2 if name == "mixtral" else 1},
                                   "serving": {"engine": "ideal", "block_size": 16, "step_overhead": "3 ms"},
                                   "workload": {"prompt_tokens": 3000, "output_tokens": 300, "arrival_rate": 3}})
    return load_scenario(SCENARIOS / name)


#: case -> (scenario, overrides of its simulation block)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "variable-on-demand": ("sim-essay-001-analytic.yaml",
                           {"requests": 3000, "rate": 5.5, "seed": 3, "kv_allocation": "on_demand", **VARIABLE}),
    "variable-on-demand-overload": ("sim-essay-001-analytic.yaml",
                                    {"requests": 2000, "rate": 9.0, "seed": 4, "kv_allocation": "on_demand",
                                     **VARIABLE}),
    "variable-reserve": ("sim-essay-001-analytic.yaml", {"requests": 2000, "rate": 5.5, "seed": 5, **VARIABLE}),
    "small-preempting": ("small", {"requests": 1500, "rate": 25, "seed": 1}),
    "small-preempting-variable": ("small", {"requests": 1500, "rate": 12, "seed": 2, "max_num_seqs": 24,
                                            "prompt_tokens": {"dist": "uniform", "low": 20, "high": 600},
                                            "output_tokens": {"dist": "uniform", "low": 1, "high": 300}}),
    "small-chunked": ("small", {"requests": 1500, "rate": 18, "seed": 6, "chunked_prefill": True,
                                "max_batched_tokens": 256,
                                "prompt_tokens": {"dist": "uniform", "low": 20, "high": 900},
                                "output_tokens": {"dist": "uniform", "low": 1, "high": 120}}),
    "small-priorities": ("small", {"requests": 1500, "rate": 30, "seed": 7, "priorities": [0, 1, 2],
                                   "max_num_seqs": 6}),
    "small-bounded-queue": ("small", {"requests": 1500, "rate": 40, "seed": 8, "arrival": "gamma",
                                      "max_queued_requests": 20, "max_queued_tokens": 1500}),
    "chunked-teaching": ("sim-chunked-prefill.yaml", {"requests": 600, "seed": 9}),
    "static": ("sim-essay-000-static.yaml", {"requests": 400, "seed": 10}),
    "continuous-teaching": ("sim-essay-000-continuous-12rps.yaml", {"requests": 800, "seed": 11}),
    "prefix-cache": ("sim-prefix-cache.yaml", {"requests": 1500, "seed": 12, "prefix_groups": 3}),
    "prefix-cache-on-demand-small": ("small", {"requests": 1500, "rate": 20, "seed": 13, "shared_prefix_tokens": 64,
                                               "prefix_groups": 4}),
    "replicas-random": ("sim-essay-001-analytic.yaml", {"requests": 2000, "rate": 11, "seed": 14, "replicas": 2,
                                                        "router": "random", "kv_allocation": "on_demand",
                                                        **VARIABLE}),
    "moe-on-demand": ("mixtral", {"requests": 800, "rate": 3, "seed": 15, "kv_allocation": "on_demand"}),
    "sliding-window-chunked": ("mistral", {"requests": 800, "rate": 4, "seed": 16, "chunked_prefill": True}),
    "record-tokens": ("small", {"requests": 200, "rate": 20, "seed": 17, "record_tokens": True}),
}


#: The cases the compiled event loop (``capacity/simulator/compiled.py``) runs; the others fall back to Python.
COMPILED = ("variable-on-demand", "variable-on-demand-overload", "variable-reserve", "small-preempting",
            "small-preempting-variable", "small-chunked", "small-priorities", "small-bounded-queue",
            "chunked-teaching", "continuous-teaching", "prefix-cache", "prefix-cache-on-demand-small",
            "replicas-random")


def run(name: str, event_loop: str = "auto") -> dict[str, np.ndarray]:
    """The arrays one case pins: per-request floats, statuses, preemptions, counters and the timeline."""
    scenario, overrides = CASES[name]
    result = simulate(_scenario(scenario), event_loop=event_loop, **overrides)
    if event_loop != "auto":
        assert result.event_loop.startswith(event_loop), result.event_loop
    df = result.requests
    out = {f"{name}/{col}": df[col].to_numpy(dtype=float) for col in FLOATS}
    out[f"{name}/status"] = df["status"].to_numpy(dtype=str)
    out[f"{name}/preemptions_each"] = df["preemptions"].to_numpy(dtype=np.int64)
    out[f"{name}/counters"] = np.array([result.counters[k] for k in COUNTERS], dtype=np.int64)
    out[f"{name}/timeline"] = result.timeline.to_numpy(dtype=float)
    if result.token_times is not None:
        rids = sorted(result.token_times)
        out[f"{name}/token_rids"] = np.array(rids, dtype=np.int64)
        out[f"{name}/token_times"] = np.concatenate([result.token_times[r] for r in rids])
    return out


@pytest.fixture(scope="module")
def pinned() -> dict[str, np.ndarray]:
    with np.load(PINNED) as data:
        return {k: data[k] for k in data.files}


def test_every_case_is_pinned(pinned):
    assert {k.split("/")[0] for k in pinned} == set(CASES)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("name", "event_loop"), [(name, "python") for name in CASES] +
                         [(name, "compiled") for name in COMPILED])
def test_seeded_run_matches_the_pinned_results(pinned, name, event_loop):
    """Both event loops reproduce the pinned results (the compiled one on the cases it runs)."""
    now = run(name, event_loop)
    assert set(now) == {k for k in pinned if k.split("/")[0] == name}
    for key, want in pinned.items():
        if key not in now:
            continue
        got = now[key]
        assert got.shape == want.shape, key
        if want.dtype.kind == "f":
            assert np.allclose(got, want, rtol=RTOL, atol=0.0, equal_nan=True), key
        else:
            assert np.array_equal(got, want), key


if __name__ == "__main__" and "--write" in sys.argv:
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)
    arrays: dict[str, np.ndarray] = {}
    for case in CASES:
        arrays.update(run(case))
    np.savez_compressed(PINNED, **arrays)
    print(f"wrote {PINNED}: {len(CASES)} cases")
