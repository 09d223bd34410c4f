"""Scheduling policies: what each engine iteration runs.

* Continuous (iteration-level) batching, Orca / vLLM: on every iteration finished
  sequences leave and waiting ones join, up to ``max_num_seqs`` and the KV pool.
  Without chunked prefill, admitted prompts are prefilled in an iteration of their own
  (up to ``max_batched_tokens`` tokens, at least one prompt) that pauses decoding, as the
  analytic model assumes. With chunked prefill every iteration carries all decodes plus
  prompt chunks up to the token budget ``max_batched_tokens``.
* Static batching: when the engine is idle it takes up to ``batch_size`` waiting requests,
  prefills them together and decodes until the longest has finished; finished sequences
  keep their slot as padding and arrivals wait for the whole batch.

Between events the batch is fixed and the continuous policy skips ahead: the next
window runs until the earliest of the next finish, the next arrival that could be
admitted, and (blocks on demand) the step at which the pool runs out.
"""

from __future__ import annotations

import math
import sys
import threading
from types import ModuleType

import numpy as np

from capacity.runtime import budget
from capacity.simulator.engine import Engine
from capacity.simulator.entities import Request

#: Iterations without progress before the engine gives up (a bug guard, never expected).
STALL_LIMIT = 1000


#: ``event_loop`` choices: "auto" (the compiled loop where it supports the engine and pays for its start), "compiled"
#: (the compiled loop wherever it supports the engine) or "python" (the reference loop below, always).
EVENT_LOOPS = ("auto", "compiled", "python")
#: "auto" runs smaller runs in Python while numba is not loaded yet: importing it and loading the cached kernel
#: takes about 0.5 s, what the Python loop needs for some 25,000 requests (benchmarks/bench_sim_variable.py).
#: Once the kernel is loaded in the process, "auto" runs the compiled loop whatever the size: from 10 to 100
#: requests the two loops take the same time within noise (the run's fixed costs dominate), from 300 up the
#: compiled one is 2x to 20x faster (benchmarks/bench_sim_small.py). A process that runs many simulations (a
#: search) loads it on purpose: ``capacity.planning.search.event_loop_for_search``, ``load_compiled_loop`` (the app).
AUTO_MIN_REQUESTS = 25_000
#: ... and, where the compiled functions cannot be cached on disk, while the kernel is not compiled in this
#: process yet (compiling takes seconds: the benchmark prints it). Under an active time budget (the app) "auto"
#: runs in Python until the kernel is loaded in the process: the deadline is checked between the kernel's
#: chunks, and importing numba and loading (or compiling) the kernel cannot be cut.
AUTO_MIN_REQUESTS_UNCACHED = 500_000


def run_continuous(e: Engine, event_loop: str = "auto") -> None:
    """Run the continuous-batching engine until every request has completed or been rejected.

    ``event_loop`` (``EVENT_LOOPS``): the compiled loop (``compiled.py``, bit-identical results) or the Python loop
    below, the reference; ``e.event_loop`` says which ran and why.
    """
    if event_loop not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {event_loop!r}")
    kernel = _compiled_loop(e, event_loop) if event_loop != "python" else None
    if kernel is not None:
        return kernel.run(e)
    if not e.config.chunked_prefill:
        return _run_unchunked(e)
    iteration = _chunked_iteration
    stalls = 0
    arrival, n = e.arrival, e.n
    while True:
        taken = e.next_arrival
        if e.next_arrival < n and arrival[e.next_arrival] <= e.now:
            e.ingest()
        progressed = iteration(e)
        _tick(e)
        if progressed:
            stalls = 0
        elif _idle(e, stalls := 0 if e.next_arrival != taken else stalls + 1):
            return


def compiled_loop_loaded() -> bool:
    """Whether the compiled loop's kernel is loaded in this process: "auto" then runs it at no start-up cost."""
    module = sys.modules.get("capacity.simulator.compiled")
    ready = getattr(module, "compiled_here", None)  # None while another thread is still importing it
    return ready is not None and ready()


_loader: threading.Thread | None = None
_loader_lock = threading.Lock()


def load_compiled_loop() -> bool:
    """Start loading the compiled loop's kernel in a daemon thread, once per process (import numba, load the
    cached kernel: about 0.6 s; compile it where there is no cache yet: 15 s or more). Whether it is loaded now.

    For a process that serves many simulations under time budgets (the app): "auto" keeps them in Python until
    the kernel is loaded, since a load cannot be cut off by a deadline; budgets are per thread, so this one has
    none. Where numba is missing the thread ends quietly and the Python loop keeps running everything.
    """
    global _loader
    if compiled_loop_loaded():
        return True
    with _loader_lock:
        if _loader is None:
            _loader = threading.Thread(target=_load_quietly, name="capacity-compiled-loop", daemon=True)
            _loader.start()
    return False


def _load_quietly() -> None:
    try:
        from capacity.simulator import compiled

        compiled.load()
    except Exception:  # noqa: BLE001 - numba missing or broken: the Python loop gives the same results
        pass


def _compiled_loop(e: Engine, event_loop: str) -> ModuleType | None:
    """The compiled loop's module when it should run ``e`` (None: the Python loop runs; ``e.event_loop`` says why)."""
    loaded = "capacity.simulator.compiled" in sys.modules
    if event_loop == "auto" and e.n < AUTO_MIN_REQUESTS and not loaded:
        e.event_loop = f"python (a small run: under {AUTO_MIN_REQUESTS:,} requests the Python loop starts sooner)"
        return None
    if event_loop == "auto" and budget.deadline() < math.inf and not compiled_loop_loaded():
        e.event_loop = "python (a time budget is active: importing numba and loading or compiling the loop cannot " \
                       "be interrupted)"
        return None
    try:
        from capacity.simulator import compiled  # imports numba (about 0.4 s): only here, only for a run that uses it
    except ImportError as exc:  # numba missing or broken: the Python loop gives the same results, slower
        e.event_loop = f"python (compiled loop unavailable: {exc})"
        return None
    why = compiled.unsupported(e)
    if why is not None:
        e.event_loop = f"python (the compiled loop does not support {why})"
        return None
    if event_loop == "auto" and not compiled.cached and not compiled.compiled_here() and \
            e.n < AUTO_MIN_REQUESTS_UNCACHED:
        e.event_loop = "python (no writable cache for the compiled loop: compiling it would take longer)"
        return None
    e.event_loop = "compiled (numba)"
    return compiled


def _tick(e: Engine) -> None:
    """After each iteration: count it, check the app's hard deadline (a no-op without an active budget) every
    1,024 iterations, and record the timeline every ``stride``."""
    timeline = e.timeline
    timeline.seen += 1
    if not timeline.seen & 1023:
        budget.check()
    if not timeline.seen % timeline.stride:
        e.record_now()


def _idle(e: Engine, stalls: int) -> bool:
    """After an iteration that did nothing: True when every request is done; otherwise move the clock to the
    next arrival (RuntimeError after ``STALL_LIMIT`` idle iterations in a row, or with nothing left to come)."""
    if e.next_arrival >= e.n and not (e.queue or e.decoding or e.prefilling):
        return True
    nxt = e.time_of_next_arrival()
    if stalls > STALL_LIMIT or (nxt == math.inf and not e.decoding):
        raise RuntimeError(f"scheduler made no progress at t={e.now:.3f} s with {len(e.queue)} waiting")
    e.now = max(e.now, nxt)
    return False


def _run_unchunked(e: Engine) -> None:
    """``run_continuous`` with whole prefills: the same loop, with the decode window of an idle queue inline.

    Between arrivals nothing waits, so most iterations are one decode window: ``_window`` and
    ``Engine.run_decode`` step by step, in the same order on the same numbers, without a call per event
    (the hot path of a million-request run; ``tests/simulator/test_pinned.py`` guards the equality).
    """
    cost, growth, alloc = e.cost, e.growth, e.alloc
    window, steps_to_reach = cost.window, cost.steps_to_reach
    heap, decoding, queue, prefilling = e.finish_heap, e.decoding, e.queue, e.prefilling
    arrival, n, slots, offered = e.arrival, e.n, e.slots, e.offered_slots
    w = e.windows
    first_end_s, max_step_s, gap_s = w.first_end_s.append, w.max_step_s.append, w.gap_s.append
    inline = e.tokens is None  # recording token times goes through run_decode (it keeps every step's end)
    stalls = 0
    while True:
        taken = e.next_arrival
        if e.next_arrival < n and arrival[e.next_arrival] <= e.now:
            e.ingest()
        if queue:
            progressed = _unchunked_iteration(e)
        elif not decoding:
            progressed = False
        else:  # _window with an empty queue, then run_decode
            progressed = True
            step = e.step
            top = heap[0]
            k = (top[0] if top[2] == top[3].epoch and top[3].rid in decoding else e.next_finish_step()) - step
            batch = len(decoding)
            context = e.ctx_const + batch * step
            now = e.now
            if batch + len(prefilling) < slots and e.next_arrival < e.next_issue:
                until = steps_to_reach(batch, context, arrival[e.next_arrival] - now)
                if until < k:
                    k = until
            new_blocks = 0
            if growth is not None:
                k, new_blocks = growth.steps_affordable(step, alloc.free + alloc.evictable, k)
            if k == 0:  # (blocks on demand only: otherwise k >= 1) the pool cannot take one step
                e.preempt_one()
            elif not inline:
                e.run_decode(k, new_blocks)
            else:
                duration, first, longest = window(batch, context, k)
                first_end = now + first
                first_end_s(first_end)
                max_step_s(longest)
                gap = first_end - e.last_decode_end
                gap_s(gap if gap > longest else longest)
                if new_blocks:
                    alloc.take(new_blocks)
                    used = alloc.pool_blocks - alloc.free - alloc.evictable
                    if used > e.peak_blocks:
                        e.peak_blocks = used
                e.now = e.last_decode_end = now + duration
                e.step = step = step + k
                e.useful_slot_steps += batch * k
                e.offered_slot_steps += offered * k
                e.decode_steps += k
                if heap[0][0] <= step:
                    e.finish_due()
        _tick(e)
        if progressed:
            stalls = 0
        elif _idle(e, stalls := 0 if e.next_arrival != taken else stalls + 1):  # arrivals taken in are progress
            return


def _window(e: Engine) -> bool:
    """Fast-forward the decoding batch to its next event; preempt first if the pool cannot take one step."""
    if not e.decoding:
        return False
    top = e.finish_heap[0]
    k = (top[0] if top[2] == top[3].epoch and top[3].rid in e.decoding else e.next_finish_step()) - e.step
    if not e.queue and len(e.decoding) + len(e.prefilling) < e.slots and e.next_arrival < e.next_issue:
        batch = len(e.decoding)
        until = e.cost.steps_to_reach(batch, e.ctx_const + batch * e.step, e.arrival[e.next_arrival] - e.now)
        if until < k:
            k = until
    new_blocks = 0
    if e.growth is not None:
        k, new_blocks = e.growth.steps_affordable(e.step, e.alloc.available, k)
        if k == 0:
            e.preempt_one()
            return True
    e.run_decode(k, new_blocks)
    return True


def _unchunked_iteration(e: Engine) -> bool:
    """Admit what fits and prefill it alone (decode pauses); else run a decode window."""
    if not e.queue:  # nothing waits: the common case between arrivals goes straight to the window
        return _window(e)
    admitted: list[Request] = []
    tokens = 0
    budget = e.config.max_batched_tokens
    if e.growth is not None and e.decoding and e.queue:  # admission leaves the next decode step its blocks
        e.reserved_growth = e.growth.next_step_blocks(e.step)
    while e.queue and len(e.decoding) + len(admitted) < e.slots:
        r = e.queue[0][2]
        if admitted and tokens + (e.prefill_need(r) if r.prefix_blocks else r.prompt_tokens + r.generated) > budget:
            break
        if not e.try_admit(r):
            break
        e.pop_queue()
        admitted.append(r)
        tokens += r.to_prefill
    if not admitted:
        return _window(e)
    e.now += e.cost.step_s(0, 0, tokens)
    if e.pending_reload_s:
        e.charge_reload()
    for r in admitted:
        r.to_prefill = 0
        e.prefill_done(r)
    return True


def _chunked_iteration(e: Engine) -> bool:
    """One iteration of all decodes plus prompt chunks within the token budget; a decode window if no chunk."""
    if e.growth is not None:
        while e.decoding and e.growth.next_step_blocks(e.step) > e.alloc.available:  # one step does not fit
            e.preempt_one()
        e.reserved_growth = e.growth.next_step_blocks(e.step)
    room = e.config.max_batched_tokens - len(e.decoding)
    chunks: list[tuple[Request, int]] = []
    for r in e.prefilling:
        if room <= 0:
            break
        n = min(r.to_prefill, room)
        chunks.append((r, n))
        room -= n
    while room > 0 and e.queue and len(e.decoding) + len(e.prefilling) < e.slots:
        r = e.queue[0][2]
        if not e.try_admit(r):
            break
        e.pop_queue()
        e.prefilling.append(r)
        n = min(r.to_prefill, room)
        chunks.append((r, n))
        room -= n
    if not chunks:
        e.reserved_growth = 0
        return _window(e)
    tokens = sum(n for _, n in chunks)
    if e.decoding:
        e.run_decode(1, e.reserved_growth, extra_prefill_tokens=tokens)
        e.reserved_growth = 0
    else:
        e.now += e.cost.step_s(0, 0, tokens)
    if e.pending_reload_s:
        e.charge_reload()
    for r, n in chunks:
        r.to_prefill -= n
        if r.to_prefill == 0:
            e.prefilling.remove(r)
            e.prefill_done(r)
    return True


def run_static(e: Engine) -> None:
    """Static batching: prefill a batch together, decode it until its longest member finishes, repeat."""
    e.event_loop = "python (static batching: a few events per batch)"
    cost = e.cost
    while True:
        budget.check()  # once per batch: the app's hard deadline (a no-op without an active budget)
        e.ingest()
        if not e.queue:
            if e.next_arrival >= e.n:
                return
            e.now = max(e.now, e.time_of_next_arrival())
            continue
        members: list[Request] = []
        while e.queue and len(members) < e.slots and e.try_admit(e.queue[0][2]):
            members.append(e.pop_queue())
        if not members:
            raise RuntimeError(f"static batch could not admit anyone at t={e.now:.3f} s")
        e.now += cost.step_s(0, 0, sum(r.to_prefill for r in members))
        if e.pending_reload_s:
            e.charge_reload()
        start, n = e.now, len(members)
        context = sum(r.prompt_tokens + 1 for r in members)
        steps = max(r.output_tokens for r in members) - 1
        e.record(running=n)
        for r in members:
            e.first_token[r.rid] = start
            own = r.output_tokens - 1
            e.finish[r.rid] = start + cost.decode_run_s(n, context, own)
            if own > 0:
                e.max_itl[r.rid] = cost.last_step_s(n, context, own)
            if e.tokens is not None:
                ends = [start + cost.decode_run_s(n, context, j) for j in range(1, own + 1)]
                e.tokens[r.rid] = [np.array([start]), np.array(ends)]
            e.useful_slot_steps += own
        e.now = start + cost.decode_run_s(n, context, steps)
        e.offered_slot_steps += e.offered_slots * steps
        e.decode_steps += steps
        e.record(running=n)
        for r in members:
            e.release(r)
        e.record(running=0)
