"""The app as a server for many sessions at once (issue 32): heavy jobs on one shared pool of worker processes, and
memory handed back when sessions end.

* **Heavy jobs** (``run_heavy``): the Simulator view's runs and the Autoscaling view's day go to ``pool()``, a
  ``capacity.runtime.pool.WorkerPool``: at most ``WORKERS`` run at once (half the CPUs, at least one), in processes
  of lower CPU priority, outside the server's GIL, so that a session opening the page is answered while others
  simulate; at most ``MAX_PENDING`` run or wait in all, one per session; each runs under its view's time budget
  and waits at most ``WAIT_S`` for a worker. A job refused or stopped comes back as a message naming the limit
  (``ScenarioError``). ``CAPACITY_APP_WORKERS=0`` runs them on the session's own thread instead (one process).
* **Warnings** never reach the server's log (``capacity.runtime.quiet``), unless its operator asks for them
  (``python -W``, ``PYTHONWARNINGS``); the workers keep them out of theirs.
* **Memory** (``note_session``, called on every run of the page): the server remembers the ids of its sessions
  (ids only, dropped when the session ends); a daemon thread looks every ``SWEEP_S`` seconds for sessions that have
  ended and, when one has, collects garbage and hands free heap pages back to the system
  (``capacity.runtime.memory.release``). Without it the server's resident memory stays at its peak after a crowd
  has gone: every session's thread leaves its freed pages in the C allocator.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from capacity.errors import ScenarioError
from capacity.runtime import budget, memory
from capacity.runtime.pool import WorkerPool, default_workers

R = TypeVar("R")

#: Worker processes for heavy jobs: ``CAPACITY_APP_WORKERS`` where set (0: on the session's thread), else half the
#: CPUs (at least one).
WORKERS_ENV = "CAPACITY_APP_WORKERS"
#: Heavy jobs running or waiting, in all, per worker (a fifth is refused with the limit in its message).
PENDING_PER_WORKER = 4
#: Longest wait of a heavy job for a free worker [s].
WAIT_S = 20.0
#: Workers exit after this long without a job [s] (their memory goes back; the next job starts them in ~1 s).
IDLE_S = 60.0
#: How often ended sessions are looked for [s].
SWEEP_S = 2.0

_pool: WorkerPool | None = None
_pool_lock = threading.Lock()
_sessions: set[str] = set()
_sessions_lock = threading.Lock()
_sweeper: threading.Thread | None = None


def workers() -> int:
    """Worker processes for heavy jobs (0: jobs run on the session's own thread); ``ScenarioError`` for a bad
    ``CAPACITY_APP_WORKERS``."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return default_workers()
    if not (text.isascii() and text.isdigit()) or len(text) > 3:
        raise ScenarioError(f"{WORKERS_ENV} must be a whole number of worker processes, 0 to 999; got {text!r}")
    return int(text)


def pool() -> WorkerPool:
    """The server's one pool of heavy-job workers (made on first use; its processes start with the first job)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from app_views.jobs import start_worker

            count = max(1, workers())
            _pool = WorkerPool(count, PENDING_PER_WORKER * count, wait_s=WAIT_S, idle_s=IDLE_S, noun="simulation",
                               initializer=start_worker)
        return _pool


def _owner() -> Hashable:
    """The session a job is for: its Streamlit session id (one owner for code run outside a session)."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx(suppress_warning=True)
    except ImportError:
        ctx = None
    return ctx.session_id if ctx is not None else "outside a session"


def run_heavy(fn: Callable[..., R], *args: Any, budget_s: float | None = None) -> R:
    """``fn(*args)`` as a heavy job of this session: on the worker pool under ``budget_s`` (and never past the time
    left in the calling thread's own budget), or on this thread where ``CAPACITY_APP_WORKERS=0``. ``fn`` is a plain
    function of picklable arguments (``app_views.jobs``). Raises ``capacity.runtime.pool.Busy`` (a ScenarioError)
    when refused, ``BudgetExceeded`` when it ran out of time, and the job's own errors."""
    left = budget.limit_s(budget_s if budget_s is not None else math.inf)
    seconds = left if math.isfinite(left) else None
    if seconds is not None and seconds <= 0:
        budget.check()  # the caller's budget is spent: raises BudgetExceeded
    if workers() == 0:
        if seconds is None:
            return fn(*args)
        with budget.time_budget(seconds):
            return fn(*args)
    return pool().run(_owner(), fn, *args, budget_s=seconds)


# ---------------------------------------------------------------- memory back when sessions end


def note_session() -> None:
    """Remember this run's session, so that its end is noticed; once per server process, start the sweeping thread
    and keep warnings out of the server's log (``capacity.runtime.quiet``: the workers quiet their own). A no-op
    outside a Streamlit server (a script run without a runtime, e.g. AppTest in the tests)."""
    try:
        from streamlit import runtime
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:
        return
    ctx = get_script_run_ctx(suppress_warning=True)
    # AppTest runs the page under a mock of the Runtime (a MagicMock with its spec): no server, so no sweeper thread
    # and no process-wide warnings policy left behind in the test process.
    if ctx is None or not runtime.exists() or type(runtime.get_instance()) is not Runtime:
        return
    remember(ctx.session_id)
    global _sweeper
    with _sessions_lock:
        if _sweeper is not None:
            return
        from capacity.runtime.quiet import quiet_warnings

        quiet_warnings(children=False)
        _sweeper = threading.Thread(target=_sweep_forever, args=(runtime.get_instance().is_active_session,),
                                    name="capacity-memory-sweeper", daemon=True)
        _sweeper.start()


def remember(session_id: str) -> None:
    """Remember ``session_id`` as running (until a ``sweep`` finds it ended)."""
    with _sessions_lock:
        _sessions.add(session_id)


def sweep(is_active: Callable[[str], bool]) -> int:
    """Forget the remembered sessions that ``is_active`` says have ended and, when any has, hand memory back
    (``capacity.runtime.memory.release``); how many had ended."""
    with _sessions_lock:
        ended = [s for s in _sessions if not is_active(s)]
        _sessions.difference_update(ended)
    if ended:
        memory.release()
    return len(ended)


def remembered() -> int:
    """Sessions remembered as running."""
    with _sessions_lock:
        return len(_sessions)


def _sweep_forever(is_active: Callable[[str], bool]) -> None:
    while True:
        time.sleep(SWEEP_S)
        try:
            sweep(is_active)
        except Exception:  # noqa: BLE001 - housekeeping must never end the server; the next sweep tries again
            pass


__all__ = ["IDLE_S", "PENDING_PER_WORKER", "SWEEP_S", "WAIT_S", "WORKERS_ENV", "note_session", "pool", "remember",
           "remembered", "run_heavy", "sweep", "workers"]
