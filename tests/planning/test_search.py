"""`capacity search`: the cheapest engine settings keeping the promises in simulation (issue 17)."""

from __future__ import annotations

import concurrent.futures as cf
import json
from pathlib import Path

import pytest

from capacity.cli import main
from capacity.errors import ScenarioError
from capacity.model.scenario import read_yaml
from capacity.planning.search import Setting, prune, search, settings_grid, simulate_candidate

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "search-llama-8b.yaml"
RAW = read_yaml(SCENARIO)
GRID = settings_grid(["h100-sxm", "a100-80gb-sxm", "l4"], [1, 2], [64, 256], [2048], [False, True])


@pytest.fixture(scope="module")
def inline():
    return search(RAW, GRID, percentile=99.0)


def _key(row):
    return tuple(row[k] for k in ("gpu", "tensor_parallel", "max_num_seqs", "max_batched_tokens", "chunked_prefill",
                                  "replicas"))


def _outcomes(result):
    """Every simulation's outcome, bit for bit (runs are listed in order of completion)."""
    return sorted(json.dumps({k: v for k, v in r.items() if k not in ("simulation_s", "event_loop")}, sort_keys=True)
                  for r in result.runs)


def test_cheapest_keeps_the_promises_and_one_replica_fewer_does_not(inline):
    best = inline.cheapest
    assert best is not None and best["meets"] and best["lost_requests"] == 0
    assert best["ttft_s"] <= 1.0 and best["tpot_s"] <= 0.040  # the scenario's promises, at the p99
    assert best["cost_per_hour"] == min(r["cost_per_hour"] for r in inline.best)
    assert best["cost_per_hour"] == pytest.approx(best["gpus"] * best["price_per_gpu_hour"])
    for row in inline.best:  # each setting's replica count is the fewest that meets (or the analytic floor)
        setting = Setting(*(row[k] for k in ("gpu", "tensor_parallel", "max_num_seqs", "max_batched_tokens",
                                              "chunked_prefill")))
        if row["replicas"] > 1:
            fewer = [r for r in inline.runs if _key(r)[:5] == _key(row)[:5] and r["replicas"] == row["replicas"] - 1]
            run = fewer[0] if fewer else simulate_candidate(RAW, setting, row["replicas"] - 1, 99.0)
            assert not run["meets"]


def test_pareto_front_is_the_non_dominated_set(inline):
    def key(r):
        return (r["cost_per_hour"], r["ttft_s"], r["tpot_s"])

    def dominates(a, b):
        return all(x <= y for x, y in zip(key(a), key(b), strict=True)) and key(a) != key(b)

    for row in inline.best:
        assert row["pareto"] == (not any(dominates(o, row) for o in inline.best))
    assert inline.cheapest["pareto"]


def test_analytic_pruning_drops_hopeless_and_duplicate_settings():
    kept, pruned = prune(RAW, GRID, 20.0)
    reasons = {(p["gpu"], p["tensor_parallel"], p["max_num_seqs"], p["chunked_prefill"]): p["reason"] for p in pruned}
    # L4: 300 GB/s x efficiency reads 16 GB of weights per token: one sequence alone misses TPOT <= 40 ms.
    assert "over the TPOT promise" in reasons[("l4", 1, 64, False)]
    assert all(s.setting.gpu != "l4" for s in kept)
    assert len(kept) + len(pruned) == len(GRID)
    for c in kept:
        assert 1 <= c.min_replicas <= c.start_replicas
    too_big = {**RAW, "model": {"name": "llama-3.1-70b", "weight_dtype": "bf16", "kv_dtype": "bf16"}}
    kept, pruned = prune(too_big, [Setting("l4", 1, 64, 2048, False)], 20.0)
    assert kept == [] and "weights" in pruned[0]["reason"]


def test_local_processes_and_a_dask_cluster_find_the_same(inline):
    with cf.ProcessPoolExecutor(max_workers=2) as pool:
        local = search(RAW, GRID, percentile=99.0, executor=pool, workers=2)
    assert sorted(map(_key, local.best)) == sorted(map(_key, inline.best))
    assert _outcomes(local) == _outcomes(inline)  # several simulations per task (simulate_many): the same runs
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        dask = search(RAW, GRID, percentile=99.0, executor=client.get_executor(pure=False), workers=2)
    assert sorted(map(_key, dask.best)) == sorted(map(_key, inline.best))
    assert _key(dask.cheapest) == _key(inline.cheapest)


def test_cli_json_and_bad_input(tmp_path, capsys):
    out = tmp_path / "search.json"
    assert main(["search", str(SCENARIO), "--gpus", "h100-sxm", "--tp", "1", "--max-num-seqs", "256",
                 "--max-batched-tokens", "2048", "--chunked", "on", "--workers", "1", "--format", "json",
                 "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["cheapest"]["gpu"] == "h100-sxm" and data["cheapest"]["meets"]
    assert data["simulations_per_s"] > 0
    for argv, message in ((["--tp", "0"], "--tp: '0' is not one of the whole numbers in [1, 1,024]"),
                          (["--percentile", "0", "--workers", "1"], "--percentile: must be a finite number")):
        with pytest.raises(SystemExit) as exit_:  # refused by the option's reader, before any work
            main(["search", str(SCENARIO), *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_search_results_are_the_same_with_either_event_loop(inline):
    from capacity.planning.search import EVENT_LOOPS, event_loop_for_search
    from capacity.simulator.scheduler import EVENT_LOOPS as SIMULATOR_LOOPS

    assert EVENT_LOOPS == SIMULATOR_LOOPS  # the command's choices are the simulator's
    grid = settings_grid(["h100-sxm"], [1, 2], [64], [2048], [False, True])
    # at 26 requests/s the replica searches refine (a run that keeps the promises and one that does not)
    python = search(RAW, grid, percentile=99.0, event_loop="python", rate_rps=26.0)
    compiled = search(RAW, grid, percentile=99.0, event_loop="compiled", rate_rps=26.0)
    assert {r["event_loop"] for r in python.runs} == {"python"}
    assert {r["event_loop"] for r in compiled.runs} == {"compiled (numba)"}
    assert _outcomes(compiled) == _outcomes(python) and len(python.runs) > len(grid)
    assert [_key(r) for r in compiled.best] == [_key(r) for r in python.best]
    # the default (auto) runs the compiled loop in a search wherever its kernel is cached on disk (a checkout)
    from capacity.simulator import compiled as kernel

    assert event_loop_for_search("auto") == ("compiled" if kernel.cached else "auto")
    assert event_loop_for_search("python") == "python"
    if kernel.cached:
        assert {r["event_loop"] for r in inline.runs} == {"compiled (numba)"}
    with pytest.raises(ScenarioError, match="--event-loop must be one of auto, compiled, python"):
        search(RAW, grid, event_loop="numba")


RETRIES = {"retries": 1, "max_queued_requests": 2, "rate": 400.0}  # some requests rejected for good


@pytest.mark.parametrize(("replicas", "loop", "extra"), [(1, "python", {}), (3, "python", {}), (3, "compiled", {}),
                                                         (2, "python", RETRIES)])
def test_simulate_times_equals_the_simulation_result_bit_for_bit(replicas, loop, extra):
    """The search's lean path (``simulator.simulate_times``: per-request times, no books or DataFrames) gives
    the same numbers as ``simulate(...).requests`` and ``throughput_rps()``."""
    import numpy as np

    from capacity.model.scenario import Scenario
    from capacity.planning.search import scenario_data
    from capacity.simulator import simulate, simulate_times
    from capacity.simulator.metrics import throughput_of

    scenario = Scenario.from_dict(scenario_data(RAW, Setting("h100-sxm", 1, 64, 2048, True)))
    kw = {"replicas": replicas, "requests": 300, "rate": 30.0, **extra}
    result = simulate(scenario, event_loop=loop, **kw)
    times, ran = simulate_times(scenario, event_loop=loop, **kw)
    df = result.requests
    completed = (df["status"] == "completed").to_numpy()
    assert ran == result.event_loop and len(times["finish_s"]) == len(df)
    if extra:
        assert not completed.all()  # the retries branch drops what was not completed
    for key in ("arrival_s", "ttft_s", "tpot_s"):
        assert times[key].tobytes() == df[key].to_numpy(dtype=float).tobytes(), key
    assert np.array_equal(~np.isnan(times["finish_s"]), completed)
    assert times["finish_s"][completed].tobytes() == df["finish_s"].to_numpy(dtype=float)[completed].tobytes()
    assert throughput_of(times["arrival_s"], times["finish_s"][completed]) == result.throughput_rps()


def test_a_local_pool_loads_the_kernel_as_its_workers_start():
    """In a fresh process (a forked worker would inherit a kernel this one loaded): the first task a worker of
    ``executor_for``'s pool runs finds the kernel loaded by the pool's initializer, before any simulation."""
    import subprocess
    import sys

    from capacity.simulator import compiled

    if not compiled.cached:
        pytest.skip("no disk cache for the compiled loop here: the simulator's auto decides")
    script = ("from capacity.planning.search import executor_for\n"
              "from capacity.simulator.scheduler import compiled_loop_loaded\n"
              "for loop in ('auto', 'python'):\n"
              "    pool, owner = executor_for(2, None, loop)\n"
              "    print(loop, pool.submit(compiled_loop_loaded).result())\n"
              "    owner.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=300).stdout.split()
    assert out == ["auto", "True", "python", "False"]


def test_without_a_disk_cache_one_worker_at_a_time_loads(monkeypatch):
    """A fresh install: the kernel is loaded (compiled, the first time) under the pool's lock, so one worker
    compiles and writes the cache and the others read it; with the cache on disk, no lock is taken."""
    from capacity.planning.search import start_worker
    from capacity.simulator import compiled

    events = []

    class Lock:
        def __enter__(self):
            events.append("lock")

        def __exit__(self, *exc):
            events.append("unlock")

    monkeypatch.setattr(compiled, "load", lambda: events.append("load"))
    monkeypatch.setattr(compiled, "compiled_here", lambda: False)
    monkeypatch.setattr(compiled, "on_disk", lambda: False)
    start_worker("compiled", Lock())
    assert events == ["lock", "load", "unlock"]
    events.clear()
    monkeypatch.setattr(compiled, "on_disk", lambda: True)
    start_worker("compiled", Lock())
    assert events == ["load"]
    events.clear()
    start_worker("python", Lock())
    assert events == []


def test_a_dask_scheduler_passes_the_handshake_probe():
    """The probe that tells a silent or foreign port apart (issue 32) accepts a real scheduler's handshake."""
    distributed = pytest.importorskip("distributed")
    from capacity.planning.search import probe_scheduler

    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster:
        probe_scheduler(cluster.scheduler_address, timeout_s=5.0)  # no error
