"""Heavy jobs on a shared pool of worker processes (issue 32): one job per owner, a bounded number in flight, budgets
and waits enforced in the worker, lower CPU priority, quiet warnings, workers that exit when idle and a pool that
survives a worker's death. The jobs below run in spawned workers, which import this module to find them."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

from capacity.runtime import budget
from capacity.runtime.budget import BudgetExceeded
from capacity.runtime.pool import NICE, Busy, WorkerPool


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def spin(seconds: float) -> str:
    """Work that checks its budget as the simulator's loops do."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        budget.check()
    return "finished"


def touch(path: str) -> None:
    Path(path).write_text("ran")


def niceness() -> int:
    return os.nice(0)


def warns() -> int:
    """How many warnings a numpy division by zero records in this process under its own filters."""
    import numpy as np

    with warnings.catch_warnings(record=True) as caught:
        np.log(np.zeros(2))
    return len(caught)


def die() -> None:
    os._exit(3)


@pytest.fixture
def pool():
    made = WorkerPool(workers=1, max_pending=2, wait_s=20.0, idle_s=30.0, noun="simulation")
    yield made
    made.close()


def test_one_job_per_owner_and_a_bounded_number_in_flight(pool):
    first = pool.submit("a", nap, 1.0)
    with pytest.raises(Busy, match="one simulation at a time per session"):
        pool.submit("a", nap, 0.0)
    second = pool.submit("b", nap, 0.0)
    with pytest.raises(Busy, match=r"the server is busy: 2 simulations .* its 1 worker \(at most 2\)"):
        pool.submit("c", nap, 0.0)
    assert pool.owners() == {"a", "b"}
    assert first.result(timeout=60) == second.result(timeout=60) != os.getpid()  # one worker, not this process
    deadline = time.monotonic() + 10
    while pool.pending() and time.monotonic() < deadline:  # done callbacks run on the pool's own thread
        time.sleep(0.01)
    assert pool.pending() == 0
    assert pool.run("a", nap, 0.0) == first.result()  # the owner may run again once its job is done


def test_a_job_past_its_budget_is_stopped_in_the_worker(pool):
    assert pool.run("a", spin, 0.0, budget_s=5.0) == "finished"
    with pytest.raises(BudgetExceeded, match="time budget of 0.2 s"):
        pool.run("a", spin, 60.0, budget_s=0.2)
    assert pool.pending() == 0


def test_a_job_that_waited_too_long_for_a_worker_never_starts(tmp_path):
    pool = WorkerPool(workers=1, max_pending=2, wait_s=0.5, idle_s=30.0, noun="simulation")
    try:
        pool.run("warm", nap, 0.0)  # the worker is up: the waits below are for it, not for its start
        busy = pool.submit("a", nap, 2.0)
        marker = tmp_path / "ran"
        with pytest.raises(Busy, match=r"no worker was free to start this simulation within 0.5 s"):
            pool.run("b", touch, str(marker))
        busy.result(timeout=60)
        assert not marker.exists()
    finally:
        pool.close()


def test_workers_run_at_a_lower_priority_with_warnings_kept_quiet(pool, monkeypatch):
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)  # as a server without -W starts them
    assert pool.run("a", niceness) == min(19, os.nice(0) + NICE)
    assert pool.run("a", warns) == 0


def test_workers_exit_when_idle_and_start_again_for_the_next_job():
    pool = WorkerPool(workers=1, idle_s=0.3, noun="simulation")
    try:
        first = pool.run("a", nap, 0.0)
        deadline = time.monotonic() + 20
        while pool.started() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pool.started()
        assert pool.run("a", nap, 0.0) != first  # a new worker process
    finally:
        pool.close()


def test_a_dead_worker_is_a_message_and_the_pool_starts_afresh(pool):
    with pytest.raises(Busy, match="stopped"):
        pool.run("a", die)
    assert pool.run("a", nap, 0.0) != os.getpid()


def test_bad_limits_are_refused():
    with pytest.raises(ValueError):
        WorkerPool(workers=2, max_pending=1)
    with pytest.raises(ValueError):
        WorkerPool(workers=1, wait_s=0)
    with pytest.raises(ValueError):
        WorkerPool(workers=1).submit("a", nap, 0.0, budget_s=float("nan"))
