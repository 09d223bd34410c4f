"""Time budgets: a deadline on one thread's work, so one request cannot hold a core for long.

Two halves, both cheap:

* **Before the work**, an estimate: the simulator's ``work_problems`` (and any other bounded-work check)
  refuses a run whose estimated time exceeds ``limit_s(default)``, the smaller of its own limit and the time
  left in the active budget. A request that cannot finish in time is refused before anything is allocated.
* **During the work**, a hard deadline: long loops call ``check()`` (a thread-local read and a clock read,
  about 0.1 us), which raises ``BudgetExceeded`` once the budget has run out. The app runs every evaluation,
  view and simulation inside ``time_budget(seconds)``; the command line sets none (a user's own run may take
  as long as the CLI's plausibility limits allow).

The deadline is per thread (Streamlit runs each session's script in its own thread), so one session's budget
never cuts another's work. ``BudgetExceeded`` is a ``ScenarioError``: every caller that shows a ScenarioError
as one line shows this one too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from capacity.errors import ScenarioError

_LOCAL = threading.local()


class BudgetExceeded(ScenarioError):
    """The work ran past its time budget [s] and was stopped."""


def deadline() -> float:
    """The active deadline on ``time.monotonic()`` [s]; inf when no budget is active on this thread."""
    return getattr(_LOCAL, "deadline", math.inf)


def remaining_s() -> float:
    """Seconds left in the active budget [s] (inf without one; may be negative once it has run out)."""
    return deadline() - time.monotonic()


def active_seconds() -> float:
    """The length of the active budget [s] (inf without one)."""
    return float(getattr(_LOCAL, "seconds", math.inf)) if deadline() < math.inf else math.inf


def limit_s(default: float) -> float:
    """The work limit [s] a bounded-work estimate must respect: ``min(default, time left in the budget)``."""
    return min(float(default), remaining_s())


def check() -> None:
    """Raise ``BudgetExceeded`` when the active budget has run out (a no-op without one)."""
    if time.monotonic() > getattr(_LOCAL, "deadline", math.inf):
        seconds = getattr(_LOCAL, "seconds", 0.0)
        raise BudgetExceeded(f"this request ran past its time budget of {seconds:g} s and was stopped; "
                             f"ask for less work (fewer requests, replicas or steps)")


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Run the block with a deadline ``seconds`` from now (a nested budget never extends an outer one)."""
    if not seconds > 0:
        raise ValueError(f"a time budget must be positive, got {seconds!r}")
    outer = (getattr(_LOCAL, "deadline", math.inf), getattr(_LOCAL, "seconds", 0.0))
    new = time.monotonic() + float(seconds)
    if new < outer[0]:
        _LOCAL.deadline, _LOCAL.seconds = new, float(seconds)
    try:
        yield
    finally:
        _LOCAL.deadline, _LOCAL.seconds = outer


__all__ = ["BudgetExceeded", "active_seconds", "check", "deadline", "limit_s", "remaining_s", "time_budget"]
