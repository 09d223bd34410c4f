"""The app as a server for many sessions (issue 32): heavy jobs on the shared worker pool with per-session limits
stated in the page, memory handed back when sessions end, and jobs that return what the views draw and no more.
The server under a real crowd is ``benchmarks/bench_crowd.py``'s (timings live there, not here)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app_views import jobs, server
from capacity.errors import ScenarioError
from capacity.model.scenario import load_scenario
from capacity.runtime.budget import BudgetExceeded, time_budget
from capacity.runtime.pool import Busy
from capacity.simulator import simulate
from tests.runtime.test_pool import nap, spin

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml"


@pytest.mark.parametrize("text, expected", [("0", 0), ("3", 3), (" 2 ", 2)])
def test_the_worker_count_is_read_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv(server.WORKERS_ENV, text)
    assert server.workers() == expected


@pytest.mark.parametrize("text", ["-1", "x", "1e3", "\u0663", "2.5", "10000"])
def test_a_bad_worker_count_is_one_line_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(server.WORKERS_ENV, text)
    with pytest.raises(ScenarioError, match="CAPACITY_APP_WORKERS must be a whole number"):
        server.workers()


def test_by_default_half_the_cpus_work_and_the_rest_answer_sessions(monkeypatch):
    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    monkeypatch.setenv("CAPACITY_THREADS", "8")
    assert server.workers() == 4
    monkeypatch.setenv("CAPACITY_THREADS", "1")
    assert server.workers() == 1


def test_ended_sessions_are_forgotten_and_their_end_hands_memory_back(monkeypatch):
    released = []
    monkeypatch.setattr(server.memory, "release", lambda: released.append(True))
    monkeypatch.setattr(server, "_sessions", set())
    for session in ("a", "b", "c"):
        server.remember(session)
    assert server.sweep(lambda s: True) == 0 and released == []  # nobody left: nothing to do
    assert server.sweep(lambda s: s == "b") == 2 and released == [True]
    assert server.remembered() == 1
    assert server.sweep(lambda s: False) == 1 and released == [True, True]
    assert server.remembered() == 0


def test_note_session_outside_a_server_remembers_nothing(monkeypatch):
    monkeypatch.setattr(server, "_sessions", set())
    server.note_session()
    assert server.remembered() == 0 and server._sweeper is None


def test_the_page_under_apptest_starts_no_sweeper(monkeypatch):
    """AppTest's Runtime is a mock: the page leaves no sweeper thread (and no warnings policy) in the test process,
    where it polluted the memory measurements of later tests."""
    monkeypatch.setattr(server, "_sessions", set())
    monkeypatch.setattr(server, "_sweeper", None)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception
    assert server._sweeper is None and server.remembered() == 0


def test_a_heavy_job_runs_on_a_worker_under_its_budget_and_the_callers(monkeypatch):
    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    assert server.run_heavy(nap, 0.0, budget_s=5.0) != os.getpid()
    with pytest.raises(BudgetExceeded, match="time budget of 0.2 s"):
        server.run_heavy(spin, 60.0, budget_s=0.2)
    with time_budget(0.3), pytest.raises(BudgetExceeded):  # the caller's own budget caps the job's
        server.run_heavy(spin, 60.0, budget_s=100.0)


def test_without_workers_a_heavy_job_runs_on_the_sessions_thread(monkeypatch):
    monkeypatch.setenv(server.WORKERS_ENV, "0")
    assert server.run_heavy(os.getpid) == os.getpid()
    with pytest.raises(BudgetExceeded):
        server.run_heavy(spin, 60.0, budget_s=0.2)


def test_one_heavy_job_per_session_and_the_page_says_so(monkeypatch):
    from concurrent.futures import Future

    from capacity.runtime.pool import WorkerPool

    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    pool = WorkerPool(workers=1, max_pending=4, noun="simulation")
    monkeypatch.setattr(server, "_pool", pool)
    # AppTest's session ("test session id") has a simulation in flight (a job that has not finished).
    pool._jobs["test session id"] = Future()
    st.cache_data.clear()  # an earlier test's run of the same simulation must not answer from the cache
    with pytest.raises(Busy, match="one simulation at a time per session"):
        pool.submit("test session id", nap, 0.0)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"view": "Simulator"})
    at.run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "one simulation at a time per session" in errors, errors
    assert not pool.started()  # refused before any worker was asked


def test_a_full_pool_is_a_message_naming_its_limit(monkeypatch):
    from concurrent.futures import Future

    from capacity.runtime.pool import WorkerPool

    monkeypatch.delenv(server.WORKERS_ENV, raising=False)
    pool = WorkerPool(workers=1, max_pending=2, noun="simulation")
    monkeypatch.setattr(server, "_pool", pool)
    pool._jobs.update({"another session": Future(), "a third": Future()})
    st.cache_data.clear()  # an earlier test's run of the same simulation must not answer from the cache
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update({"view": "Simulator"})
    at.run()
    errors = " ".join(e.value for e in at.error)
    assert "the server is busy" in errors and "at most 2" in errors, errors


def test_histograms_count_every_finite_value_in_bins_over_its_range():
    rng = np.random.default_rng(32)
    values = np.concatenate([rng.exponential(0.5, 1000), [np.nan, np.inf, -np.inf]])
    binned = jobs.histogram(values, bins=40)
    edges = binned["edges_ms"]
    assert len(edges) == 41 and edges == sorted(edges) and len(binned["counts"]) == 40
    assert sum(binned["counts"]) == 1000
    finite_ms = values[:1000] * 1e3
    assert edges[0] == pytest.approx(finite_ms.min()) and edges[-1] == pytest.approx(finite_ms.max())
    one = jobs.histogram(np.array([0.2, 0.2]))  # a single value: one bin around it
    where = int(np.argmax(one["counts"]))
    assert sum(one["counts"]) == 2 and one["edges_ms"][where] <= 200.0 < one["edges_ms"][where + 1]
    assert jobs.histogram(np.array([np.nan])) == {"edges_ms": [], "counts": []}


def test_a_simulation_job_returns_the_librarys_summaries_and_not_its_requests():
    scenario_json = json.dumps(_yaml(BASE))
    settings = {"requests": 20_000, "rate": 8.0, "seed": 3}
    out = jobs.simulate_pair(scenario_json, json.dumps(settings))
    scenario = load_scenario(BASE)
    for policy in jobs.POLICIES:
        run = simulate(scenario, policy=policy, **settings)
        mine, theirs = out["summaries"][policy], run.summary()
        assert mine.keys() == theirs.keys()
        assert all(mine[k] == theirs[k] or (mine[k] != mine[k] and theirs[k] != theirs[k]) for k in mine)
        requests_bytes = len(pickle.dumps(run.requests))
        assert sum(out["histograms"]["ttft_s"][policy]["counts"]) == int(np.isfinite(run.requests["ttft_s"]).sum())
    assert len(pickle.dumps(out)) < requests_bytes / 10  # what comes back from a worker and is cached is small


def test_a_simulation_the_simulator_refuses_is_its_message():
    assert "requests" in jobs.simulate_pair(json.dumps(_yaml(BASE)), json.dumps({"requests": -5}))


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
