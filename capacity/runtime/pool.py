"""Heavy jobs on a few low-priority worker processes that a server's sessions share (the app's simulations).

A server that answers many people at once runs each person's cheap work on that session's thread, and its heavy
work (a simulation of 100,000 requests, a day under autoscaling) here, so that:

* **one session cannot starve the rest**: the work runs in other processes, outside the server's GIL, at a lower
  CPU priority (``nice``), so a person opening the page is answered first; at most ``workers`` jobs run at once
  and at most ``max_pending`` run or wait in all (``Busy`` beyond);
* **one job per owner**: an owner (a session) with a job in flight gets ``Busy`` for another, so a second click
  queues nothing;
* **bounded time**: a job runs under its own time budget (``capacity.runtime.budget``) from the moment a worker
  takes it, and a job that waited over ``wait_s`` for a worker is dropped unstarted (``Busy``);
* **memory returned**: a worker collects and trims its heap after each job (``capacity.runtime.memory``), and
  the workers exit after ``idle_s`` without work (the next job starts them again, in about a second).

Jobs are plain functions of picklable arguments, run in processes started fresh ("spawn": a server's threads are
not copied half-way through their work). Errors a job raises come back to the caller as raised.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from typing import Any, TypeVar

from capacity.errors import ScenarioError
from capacity.runtime import memory
from capacity.runtime.budget import time_budget
from capacity.runtime.threads import default_threads

R = TypeVar("R")

#: How much lower a worker's CPU priority is than the server's (``nice`` increment; 19 is the lowest priority).
NICE = 10


class Busy(ScenarioError):
    """A job refused before it ran: its owner has one in flight, the pool is full, or no worker was free in time."""


def default_workers() -> int:
    """Workers for a server: half the CPUs this process may use (the other half answers the sessions), at least 1."""
    return max(1, default_threads() // 2)


def _start_worker(nice: int, initializer: Callable[[], None] | None) -> None:
    """A worker's start: a lower CPU priority, warnings kept quiet, then the pool's own initializer."""
    from capacity.runtime.quiet import quiet_warnings

    try:
        os.nice(nice)
    except (AttributeError, OSError):  # not POSIX, or not allowed: the worker runs at the server's priority
        pass
    quiet_warnings()
    if initializer is not None:
        initializer()


def _job(fn: Callable[..., R], args: tuple[Any, ...], budget_s: float | None, start_by: float, noun: str,
         wait_s: float) -> R:
    """Run in a worker: ``fn(*args)`` under ``budget_s`` unless it waited past ``start_by`` (``time.monotonic``,
    the same clock in every process of the machine); the heap is collected and trimmed afterwards."""
    if time.monotonic() > start_by:
        raise Busy(f"no worker was free to start this {noun} within {wait_s:g} s (other sessions' {noun}s were "
                   f"running); try again in a few seconds")
    try:
        with time_budget(budget_s) if budget_s is not None else nullcontext():
            return fn(*args)
    finally:
        memory.release()


class WorkerPool:
    """A bounded pool of low-priority worker processes for heavy jobs, one job in flight per owner.

    ``workers`` run at once (default: ``default_workers()``), ``max_pending`` run or wait in all (default 4 per
    worker); a job waits at most ``wait_s`` for a worker, then runs at most its ``budget_s``; the workers exit
    after ``idle_s`` without a job. ``noun`` names a job in the messages ("simulation"); ``initializer`` runs once
    in each worker (e.g. to load a compiled kernel). Thread-safe: every session's thread submits here.
    """

    def __init__(self, workers: int | None = None, max_pending: int | None = None, wait_s: float = 30.0,
                 idle_s: float = 60.0, noun: str = "job", nice: int = NICE,
                 initializer: Callable[[], None] | None = None) -> None:
        self.workers = int(workers) if workers else default_workers()
        self.max_pending = int(max_pending) if max_pending else 4 * self.workers
        if self.workers < 1 or self.max_pending < self.workers or not wait_s > 0 or not idle_s > 0:
            raise ValueError(f"a pool needs workers >= 1, max_pending >= workers and positive waits; got "
                             f"{self.workers}, {self.max_pending}, {wait_s!r}, {idle_s!r}")
        self.wait_s, self.idle_s, self.noun, self.nice = float(wait_s), float(idle_s), noun, int(nice)
        self._initializer = initializer
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._jobs: dict[Hashable, Future[Any]] = {}
        self._idle_timer: threading.Timer | None = None

    # ------------------------------------------------------------ what callers use

    def run(self, owner: Hashable, fn: Callable[..., R], *args: Any, budget_s: float | None = None) -> R:
        """``fn(*args)`` on a worker for ``owner``; waits for its result (at most ``wait_s`` plus the budget).

        Raises ``Busy`` when the job is refused or no worker takes it in time, the job's own errors as raised
        (``BudgetExceeded`` when it runs past ``budget_s``), and ``Busy`` when its worker dies (the pool restarts).
        """
        future = self.submit(owner, fn, *args, budget_s=budget_s)
        limit = None if budget_s is None else self.wait_s + budget_s + 10.0  # the worker enforces both itself
        try:
            return future.result(timeout=limit)
        except BrokenProcessPool:
            self._discard_broken()
            raise Busy(f"the worker running this {self.noun} stopped (out of memory?); try a smaller one") from None
        except FutureTimeout:
            raise Busy(f"this {self.noun} gave no answer within {limit:g} s; try again in a few seconds") from None

    def submit(self, owner: Hashable, fn: Callable[..., R], *args: Any, budget_s: float | None = None) -> Future[R]:
        """Queue ``fn(*args)`` for ``owner`` unless the owner has a job in flight or the pool is full (``Busy``)."""
        if budget_s is not None and not (budget_s > 0 and math.isfinite(budget_s)):
            raise ValueError(f"a job's budget must be a positive number of seconds, got {budget_s!r}")
        with self._lock:
            if owner in self._jobs:
                raise Busy(f"one {self.noun} at a time per session: your previous {self.noun} is still running "
                           f"(each stops at its time budget); try again when it has finished")
            if len(self._jobs) >= self.max_pending:
                raise Busy(f"the server is busy: {len(self._jobs)} {self.noun}s of other sessions are running or "
                           f"waiting for its {self.workers} worker{'s' if self.workers > 1 else ''} (at most "
                           f"{self.max_pending}); try again in a few seconds")
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            if self._executor is not None and getattr(self._executor, "_broken", False):
                self._executor.shutdown(wait=False, cancel_futures=True)  # a worker died since the last job
                self._executor = None
            if self._executor is None:
                import multiprocessing

                self._executor = ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"),
                                                     _start_worker, (self.nice, self._initializer))
            future = self._executor.submit(_job, fn, args, budget_s, time.monotonic() + self.wait_s, self.noun,
                                           self.wait_s)
            self._jobs[owner] = future
        future.add_done_callback(lambda done: self._finished(owner, done))
        return future

    def pending(self) -> int:
        """Jobs running or waiting for a worker."""
        with self._lock:
            return len(self._jobs)

    def owners(self) -> set[Hashable]:
        """The owners with a job in flight."""
        with self._lock:
            return set(self._jobs)

    def started(self) -> bool:
        """Whether worker processes are up (or starting)."""
        with self._lock:
            return self._executor is not None

    def close(self) -> None:
        """Stop the workers now; jobs not yet started are cancelled (the pool starts again on the next job)."""
        with self._lock:
            executor, self._executor = self._executor, None
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------ inside

    def _finished(self, owner: Hashable, future: Future[Any]) -> None:
        with self._lock:
            if self._jobs.get(owner) is future:
                del self._jobs[owner]
            if not self._jobs and self._executor is not None:
                if self._idle_timer is not None:
                    self._idle_timer.cancel()
                self._idle_timer = threading.Timer(self.idle_s, self._close_if_idle)
                self._idle_timer.daemon = True
                self._idle_timer.start()

    def _close_if_idle(self) -> None:
        with self._lock:
            if self._jobs or self._executor is None:
                return
            executor, self._executor, self._idle_timer = self._executor, None, None
        executor.shutdown(wait=True)

    def _discard_broken(self) -> None:
        with self._lock:
            executor = self._executor
            if executor is None or not getattr(executor, "_broken", False):
                return
            self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["Busy", "NICE", "WorkerPool", "default_workers"]
