"""The compiled event loop: continuous batching over plain arrays, compiled with numba.

``scheduler.run_continuous`` (``_run_unchunked``, ``_chunked_iteration``) is the reference: this module runs the
same iterations in the same order on the same numbers (issue 17: a million requests with variable lengths and
blocks on demand in seconds, not tens of seconds). Requests are rows of integer and float arrays instead of
objects; the waiting queue and the finish heap are binary heaps over ``(priority rank, request)`` and
``(finish step, admission)`` keys, which pop in the order of the reference's ``heapq`` tuples; the decoding set
is a dense list with positions, the prefilling set (chunked prefill) a FIFO; the KV pool is the count of free
blocks plus the prefix cache (``allocator.BlockAllocator``: one row per prefix id with its cached blocks and
references, the unreferenced prefixes in a doubly linked LRU list, eviction from the tail of the least recently
used prefix) and its CPU tier (KV offload: each prefix's run of blocks on the CPU, the runs in a second LRU list);
the growth tracker keeps the same per-residue counts and Fenwick tree. Step times come from the
cost model's own functions (``cost_models.dense_window``, ``roofline_step_s``, ``teaching_window`` ...), compiled
here from the very same Python functions, so there is one home for every formula and the floating-point
operations happen in the same order. The allocator's methods work on a dict and an OrderedDict, which numba
cannot compile: their arithmetic is mirrored step for step, each function naming the method it mirrors.
Results are bit-identical to the Python loop (``tests/simulator/test_compiled.py``), the end state of the prefix
cache and of the CPU tier (entries, LRU orders, counts) included.

What it runs (``config.compiled_loop_problem`` on the settings, the one home shared with the estimate's
``config.compiled_loop_runs``, then ``unsupported`` on the engine; where they object the Python loop runs): the
continuous policy, with whole or chunked prefills; the teaching cost model or a dense roofline without sliding
windows; shared prefixes with or without prefix caching (system prompts, workload classes, multi-turn sessions,
traces with prefix ids) and KV offload to a CPU tier; no recorded token times. Priorities, bounded queues, blocks
on demand with preemption and reserved blocks are all supported.

The kernel runs ``CHUNK_ITERATIONS`` iterations per call and returns; between calls ``budget.check()`` enforces
the app's deadline and growing buffers are enlarged. Compiled functions are cached on disk (``cache=True``,
beside this file or in numba's user-wide cache); where no cache location is writable they compile once per
process instead (``cached`` is False).

Importing this module imports numba (about 0.4 s): only ``scheduler.run_continuous`` imports it, and only when
the compiled loop can run the engine.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from capacity.formulas import roofline
from capacity.runtime import budget
from capacity.simulator import cost_models
from capacity.simulator.allocator import PrefixEntry
from capacity.simulator.config import compiled_loop_problem
from capacity.simulator.cost_models import PrefilledCost, TeachingCost
from capacity.simulator.engine import Engine

#: Iterations per kernel call: the deadline is checked between calls (tens of milliseconds apart).
CHUNK_ITERATIONS = 1 << 16
#: Iterations without progress before the engine gives up (``scheduler.STALL_LIMIT``, the same guard).
STALL_LIMIT = 1000

# kernel return codes
DONE, MORE, GROW, STALL = 0, 1, 2, 3

# engine scalars (one int64 array ``st``)
S_STEP, S_NEXT, S_QLEN, S_QTOK, S_NDEC, S_HLEN, S_CTX, S_RESV, S_ADM, S_FREE, S_PEAK = range(11)
S_USEFUL, S_OFFERED, S_DSTEPS, S_PREFILL, S_PREEMPT, S_NWIN, S_NSEG, S_SEEN, S_STRIDE, S_NROWS = range(11, 21)
S_STALLS, S_GCOUNT, S_USUM = range(21, 24)
# settings (same array)
C_SLOTS, C_OFFERED_SLOTS, C_POOL, C_BS, C_GROWTH, C_WATERMARK, C_BUDGET, C_RESERVE = range(24, 32)
C_LIMIT_N, C_LIMIT_T, C_MIXED, C_TL_LIMIT, C_KIND, C_CHUNKED = range(32, 38)
S_PHEAD, S_NPF = range(38, 40)  # the prefilling FIFO (chunked prefill): its head and length
# the prefix cache (``allocator.BlockAllocator``): evictable and cached blocks, hit blocks, cached prompt tokens,
# the LRU list's ends (-1: empty) and whether caching is on
S_EVICT, S_CACHED, S_HITS, S_CTOK, S_LHEAD, S_LTAIL, C_CACHING = range(40, 47)
# the CPU tier (KV offload, ``BlockAllocator.cpu``): its LRU list's ends (-1: empty), blocks used, prefixes held and
# their peak, blocks loaded back, and its size in blocks (0: no tier)
S_CHEAD, S_CTAIL, S_CUSED, S_CCOUNT, S_CPEAK, S_RELOADED, C_CPU = range(47, 54)
# prompts arrive prefilled (a decode-only replica of separate pools, ``cost_models.PrefilledCost``)
C_PREFILLED = 54
N_STATE = 55
# float scalars (``fs``): the clock, the last decode step's end, the reload the next pass waits for
# (``Engine.pending_reload_s``) [s] and the reload time of one block (``Engine.reload_s_per_block``) [s]
F_NOW, F_LAST_END, F_PENDING, F_RELOAD_BLOCK = range(4)
# per-request integer state (columns of ``ri``); R_RELOAD: tokens loaded back from the CPU tier (``Engine.reloaded``)
R_GEN, R_PRIV, R_GROWC, R_SEQ, R_EPOCH, R_SEGW, R_NPRE, R_DECPOS, R_TOPF, R_PID, R_PBLK, R_RELOAD = range(12)
N_RI = 12
# per-prefix state (columns of ``pc``, one row per distinct prefix id): ``PrefixEntry.blocks`` and ``refs``, the
# neighbours in the LRU list of unreferenced prefixes (``BlockAllocator.lru``; -1: none), the prefix's run of blocks
# on the CPU (``BlockAllocator.cpu``; 0: none) and its neighbours in the CPU tier's LRU list
P_BLOCKS, P_REFS, P_PREV, P_NEXT, P_CPU, P_CPREV, P_CNEXT = range(7)
N_PC = 7
# per-request float state (columns of ``rf``)
R_SEGF, R_LAST, R_ITLX = range(3)
# per-request results (rows of ``out``)
O_SCHED, O_FIRST, O_FINISH, O_ITL = range(4)
# cost models (``st[C_KIND]``) and their coefficients (``coef``)
KIND_ROOFLINE, KIND_TEACHING = 0, 1
#: Largest block [tokens] whose growth is summed from per-residue counts (``allocator.RESIDUE_SUM_LIMIT``).
RESIDUE_SUM_LIMIT = 256


def _jit(fn: Callable, **callees: Any) -> Any:
    """``numba.njit(cache=True)`` of ``fn`` with the globals named in ``callees`` replaced by compiled ones.

    A compiled function calls compiled functions only: the cost model's plain functions call
    ``_sum_max_linear`` and ``roofline.pass_s``, which are rebound here to their compiled twins (the same code).
    Without a writable cache location numba refuses ``cache=True``; the function is then compiled per process.
    """
    if callees:
        scope = dict(fn.__globals__)
        scope.update(callees)
        rebound = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        rebound.__qualname__, rebound.__module__ = fn.__qualname__, fn.__module__
        fn = rebound
    global cached
    try:
        return numba.njit(cache=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available" (read-only install, no home cache)
        cached = False
        return numba.njit(fn)


#: Whether the compiled functions are cached on disk (False: each process compiles them on first use).
cached = True

_pass_s = _jit(roofline.pass_s)
_sum_max_linear = _jit(cost_models._sum_max_linear)
_roofline_step_s = _jit(cost_models.roofline_step_s, _pass_s=_pass_s)
_dense_window = _jit(cost_models.dense_window, _pass_s=_pass_s, _sum_max_linear=_sum_max_linear)
_linear_steps = _jit(cost_models.linear_steps_to_reach)
_dense_steps = _jit(cost_models.dense_steps_to_reach, linear_steps_to_reach=_linear_steps)
_teaching_step_s = _jit(cost_models.teaching_step_s)
_teaching_window = _jit(cost_models.teaching_window)
_teaching_steps = _jit(cost_models.teaching_steps_to_reach)


def compiled_here() -> bool:
    """Whether the kernel has been compiled (or loaded from the cache) in this process."""
    return bool(_run.signatures)


def on_disk() -> bool:
    """Whether the kernel's compiled code for this source is in the disk cache, so that ``load`` reads it (about
    0.6 s) rather than compiling it (15 s or more). False where that cannot be told (numba's cache index is
    read through its private API)."""
    try:
        return bool(_run._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - no cache, or another numba: assume it must be compiled
        return False


def unsupported(e: Engine) -> str | None:
    """Why the compiled loop cannot run engine ``e`` (None: it can): its settings (``config.compiled_loop_problem``,
    the part ``config.compiled_loop_runs`` judges before an engine exists), then what only the engine knows."""
    why = compiled_loop_problem(e.config.policy, e.tokens is not None, e.cost)
    if why is not None:
        return why
    if e.slots >= 1 << 62:
        return "slots beyond int64"
    if e.closed:
        return "a closed loop (arrivals follow answers)"
    return None


def load() -> None:
    """Load the kernel in this process (from the disk cache; compiled the first time) by running it on an engine
    of one request, so that later runs start at once (``scheduler.load_compiled_loop``)."""
    if compiled_here():
        return
    from capacity.simulator.config import SimulationConfig
    from capacity.simulator.workloads import RequestTable

    def one(value: float, dtype: type) -> np.ndarray:
        return np.array([value], dtype=dtype)

    config = SimulationConfig(cost_model="teaching")
    table = RequestTable(one(0.0, np.float64), one(2, np.int64), one(2, np.int64), one(-1, np.int64),
                         one(0, np.int64), one(0, np.int64))
    cost = TeachingCost(config.decode_base_s, config.decode_per_seq_s, config.prefill_per_token_s)
    run(Engine(table, config, cost, 16, 16, None, 1, 1))


# --- the kernel ---------------------------------------------------------------------------------------------


@_jit
def _qpush(st, heap, key):
    i = st[S_QLEN]
    st[S_QLEN] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= key:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = key


@_jit
def _qpop(st, heap):
    top = heap[0]
    size = st[S_QLEN] - 1
    st[S_QLEN] = size
    if size == 0:
        return top
    key = heap[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if key <= heap[child]:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = key
    return top


@_jit
def _fless(a0, a1, b0, b1):
    return a0 < b0 or (a0 == b0 and a1 < b1)


@_jit
def _fmove(heap, dst, src):
    """Copy the finish heap's row ``src`` (when, seq, epoch, request) over row ``dst``."""
    heap[dst, 0], heap[dst, 1], heap[dst, 2], heap[dst, 3] = heap[src, 0], heap[src, 1], heap[src, 2], heap[src, 3]


@_jit
def _fpush(st, heap, when, seq, epoch, rid):
    i = st[S_HLEN]
    st[S_HLEN] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _fless(when, seq, heap[parent, 0], heap[parent, 1]):
            break
        _fmove(heap, i, parent)
        i = parent
    heap[i, 0], heap[i, 1], heap[i, 2], heap[i, 3] = when, seq, epoch, rid


@_jit
def _fpop(st, heap):
    """Remove the top entry (the caller has read it)."""
    size = st[S_HLEN] - 1
    st[S_HLEN] = size
    if size == 0:
        return
    w, s, ep, r = heap[size, 0], heap[size, 1], heap[size, 2], heap[size, 3]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _fless(heap[child + 1, 0], heap[child + 1, 1], heap[child, 0], heap[child, 1]):
            child += 1
        if not _fless(heap[child, 0], heap[child, 1], w, s):
            break
        _fmove(heap, i, child)
        i = child
    heap[i, 0], heap[i, 1], heap[i, 2], heap[i, 3] = w, s, ep, r


@_jit
def _gupdate(tree, bs, v, delta):
    i = v + 1
    while i <= bs and bs > 1:
        tree[i] += delta
        i += i & -i


@_jit
def _gadd(st, residues, tree, c, sign):
    """``GrowthTracker.add`` (sign 1) or ``remove`` (sign -1) of a sequence with ``growth_c = c``."""
    bs = st[C_BS]
    u, v = (c + bs - 1) // bs, (c + bs - 1) % bs
    st[S_GCOUNT] += sign
    st[S_USUM] += sign * u
    residues[v] += sign
    _gupdate(tree, bs, v, sign)


@_jit
def _gtotal(st, tree, step):
    bs = st[C_BS]
    a, b = step // bs, step % bs
    wrapped = 0
    if b:
        i, below = bs - b, 0
        while i > 0:
            below += tree[i]
            i -= i & -i
        wrapped = st[S_GCOUNT] - below
    return st[S_USUM] + st[S_GCOUNT] * a + wrapped


@_jit
def _grown(st, residues, tree, step, k):
    """``GrowthTracker.grown``: blocks the decoding sequences open over ``k`` steps from ``step``."""
    bs = st[C_BS]
    if bs > RESIDUE_SUM_LIMIT:
        return _gtotal(st, tree, step + k) - _gtotal(st, tree, step)
    turns, r = k // bs, k % bs
    grow = st[S_GCOUNT] * turns
    if r:
        start = (bs - step - r) % bs
        for j in range(start, start + r):
            grow += residues[j if j < bs else j - bs]
    return grow


@_jit
def _affordable(st, residues, tree, step, available, limit):
    """``GrowthTracker.steps_affordable``: largest ``k <= limit`` whose growth fits ``available``, and that growth."""
    grow = _grown(st, residues, tree, step, limit)
    if grow <= available:
        return limit, grow
    if st[C_BS] == 1:
        k = available // st[S_GCOUNT]
        return k, k * st[S_GCOUNT]
    lo, hi, grow_lo = 0, limit, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        grow = _grown(st, residues, tree, step, mid)
        if grow <= available:
            lo, grow_lo = mid, grow
        else:
            hi = mid
    return lo, grow_lo


@_jit
def _step_s(st, coef, batch, context, prefill_tokens):
    if st[C_PREFILLED]:  # cost_models.PrefilledCost.step_s
        if batch == 0:
            return 0.0
        prefill_tokens = 0
    if st[C_KIND] == KIND_TEACHING:
        return _teaching_step_s(coef[0], coef[1], coef[2], batch, prefill_tokens)
    return _roofline_step_s(coef[0], coef[1], context, coef[2], coef[6], coef[3], coef[4], coef[5], batch,
                            prefill_tokens)


@_jit
def _window(st, coef, batch, context, steps):
    if st[C_KIND] == KIND_TEACHING:
        return _teaching_window(coef[0], coef[1], batch, steps)
    return _dense_window(coef[0], coef[1], coef[2], coef[3], coef[4], coef[5], batch, context, steps)


@_jit
def _steps_to_reach(st, coef, batch, context, duration):
    if st[C_KIND] == KIND_TEACHING:
        return _teaching_steps(coef[0], coef[1], batch, duration)
    return _dense_steps(coef[0], coef[1], coef[2], coef[3], coef[4], coef[5], batch, context, duration)


@_jit
def _dec_remove(st, ri, dec, r):
    pos = ri[r, R_DECPOS]
    last = dec[st[S_NDEC] - 1]
    dec[pos] = last
    ri[last, R_DECPOS] = pos
    st[S_NDEC] -= 1
    ri[r, R_DECPOS] = -1


@_jit
def _close_segment(st, ri, rf, seg_i, seg_f, r):
    k = st[S_NSEG]
    seg_i[0, k], seg_i[1, k], seg_i[2, k] = r, ri[r, R_SEGW], st[S_NWIN]
    seg_f[k] = rf[r, R_SEGF]
    st[S_NSEG] = k + 1


@_jit
def _complete(fs, ri, rf, out, out_pre, r):
    out[O_FINISH, r] = fs[F_NOW]
    out_pre[r] = ri[r, R_NPRE]
    if rf[r, R_ITLX] > 0:
        out[O_ITL, r] = rf[r, R_ITLX]


# The prefix cache: ``allocator.BlockAllocator``'s arithmetic over arrays instead of its dicts and OrderedDicts
# (those cannot be compiled). Each function mirrors the method it names, step for step. Two doubly linked lists
# over the prefix rows, oldest first: the LRU list holds the prefixes with cached blocks and no reference (a prefix
# is in it exactly when ``blocks > 0`` and ``refs == 0``, the entries of ``BlockAllocator.lru``), the CPU tier's the
# prefixes with a run of blocks on the CPU (exactly when ``P_CPU > 0``, the entries of ``BlockAllocator.cpu``). A
# prefix id absent from ``BlockAllocator.prefixes`` is a row with no blocks and no references here: ``room_for``,
# ``prefix_hits``, ``cpu_hits`` and ``acquire_prefix`` read both the same.


@_jit
def _push(st, pc, p, ends, links):
    """Append prefix ``p`` to a list, most recently used last (``lru[p] = None``): the list's head is ``st[ends]``
    and its tail ``st[ends + 1]``, a row's neighbours ``pc[p, links]`` (previous) and ``pc[p, links + 1]`` (next)."""
    tail = st[ends + 1]
    pc[p, links], pc[p, links + 1] = tail, -1
    if tail >= 0:
        pc[tail, links + 1] = p
    else:
        st[ends] = p
    st[ends + 1] = p


@_jit
def _unlink(st, pc, p, ends, links):
    """Unlink prefix ``p`` from the list of ``_push`` (``del lru[p]``)."""
    prev, nxt = pc[p, links], pc[p, links + 1]
    if prev >= 0:
        pc[prev, links + 1] = nxt
    else:
        st[ends] = nxt
    if nxt >= 0:
        pc[nxt, links] = prev
    else:
        st[ends + 1] = prev
    pc[p, links], pc[p, links + 1] = -1, -1


@_jit
def _cpu_drop(st, pc, p):
    """Remove prefix ``p``'s run from the CPU tier (``cpu_used -= cpu.pop(p)``)."""
    st[S_CUSED] -= pc[p, P_CPU]
    st[S_CCOUNT] -= 1
    pc[p, P_CPU] = 0
    _unlink(st, pc, p, S_CHEAD, P_CPREV)


@_jit
def _offload(st, pc, p, blocks):
    """``BlockAllocator.offload``: ``blocks`` evicted from the tail of prefix ``p``'s GPU blocks join the front of its
    CPU run, which moves to the list's end; the least recently offloaded runs go while the tier overflows."""
    run = pc[p, P_CPU]
    if run:
        _cpu_drop(st, pc, p)
    run = min(run + blocks, st[C_CPU])
    while st[S_CUSED] + run > st[C_CPU]:
        _cpu_drop(st, pc, st[S_CHEAD])
    pc[p, P_CPU] = run
    _push(st, pc, p, S_CHEAD, P_CPREV)
    st[S_CUSED] += run
    st[S_CCOUNT] += 1
    if st[S_CCOUNT] > st[S_CPEAK]:
        st[S_CPEAK] = st[S_CCOUNT]


@_jit
def _cpu_hits(pc, p, prefix_blocks):
    """``BlockAllocator.cpu_hits``: blocks of prefix ``p`` a request loads back (its CPU run, up to what the GPU
    lacks)."""
    run = pc[p, P_CPU]
    if not run:
        return 0
    return max(0, min(run, prefix_blocks - pc[p, P_BLOCKS]))


@_jit
def _take(st, pc, blocks):
    """``BlockAllocator.take``: take ``blocks`` free blocks, evicting unreferenced prefix blocks from the tail of the
    least recently used prefix first when the free ones run out (to the CPU tier, where there is one)."""
    if blocks <= st[S_FREE]:
        st[S_FREE] -= blocks
        return
    short = blocks - st[S_FREE]
    while short > 0 and st[S_LHEAD] >= 0:
        oldest = st[S_LHEAD]
        evict = min(short, pc[oldest, P_BLOCKS])
        pc[oldest, P_BLOCKS] -= evict  # the tail of a prefix goes first, so what stays is still a prefix
        if st[C_CPU]:
            _offload(st, pc, oldest, evict)
        st[S_CACHED] -= evict
        st[S_EVICT] -= evict
        st[S_FREE] += evict
        short -= evict
        if pc[oldest, P_BLOCKS] == 0:
            _unlink(st, pc, oldest, S_LHEAD, P_PREV)
    if blocks > st[S_FREE]:
        raise RuntimeError("KV pool overdrawn")
    st[S_FREE] -= blocks


@_jit
def _prefix_hits(st, pc, p, prefix_blocks):
    """``BlockAllocator.prefix_hits``: blocks of this prefix already cached."""
    if not st[C_CACHING] or prefix_blocks <= 0:
        return 0
    return min(pc[p, P_BLOCKS], prefix_blocks)


@_jit
def _acquire_prefix(st, pc, p, prefix_blocks):
    """``BlockAllocator.acquire_prefix``: reference prefix ``p`` for one request; its CPU run comes back, its missing
    blocks are taken. The prefix is out of the LRU list while referenced, so ``_take`` cannot evict it (the
    reference's pin)."""
    if prefix_blocks <= 0:
        return
    if not st[C_CACHING]:
        _take(st, pc, prefix_blocks)
        return
    blocks = pc[p, P_BLOCKS]
    if blocks > 0 and pc[p, P_REFS] == 0:  # cached, unreferenced: it leaves the LRU list
        _unlink(st, pc, p, S_LHEAD, P_PREV)
        st[S_EVICT] -= blocks
    st[S_HITS] += min(blocks, prefix_blocks)
    missing = prefix_blocks - blocks
    if missing > 0 and pc[p, P_CPU]:  # loaded back: the run returns to the GPU (what is past it goes)
        st[S_RELOADED] += min(pc[p, P_CPU], missing)
        _cpu_drop(st, pc, p)
    pc[p, P_REFS] += 1
    if missing > 0:
        _take(st, pc, missing)
        pc[p, P_BLOCKS] += missing
        st[S_CACHED] += missing


@_jit
def _release_prefix(st, pc, p, prefix_blocks):
    """``BlockAllocator.release_prefix``: drop one reference; an unreferenced prefix stays cached, LRU last."""
    if prefix_blocks <= 0:
        return
    if not st[C_CACHING]:
        st[S_FREE] += prefix_blocks
        return
    pc[p, P_REFS] -= 1
    if pc[p, P_REFS] == 0:
        _push(st, pc, p, S_LHEAD, P_PREV)
        st[S_EVICT] += pc[p, P_BLOCKS]


@_jit
def _used(st):
    """``BlockAllocator.used``: blocks holding live KV state (cached-but-unreferenced ones excluded)."""
    return st[C_POOL] - st[S_FREE] - st[S_EVICT]


@_jit
def _held_private(st, ri, r):
    """``Engine.held_private``: the private blocks ``r`` holds now (its prefix blocks are the cache's)."""
    if st[C_GROWTH] and ri[r, R_DECPOS] >= 0:
        return -(-(ri[r, R_GROWC] + st[S_STEP]) // st[C_BS]) - ri[r, R_PBLK]
    return ri[r, R_PRIV]


@_jit
def _release(st, ri, pc, r):
    """``Engine.release``: ``r``'s private blocks return to the pool, its prefix loses a reference."""
    st[S_FREE] += _held_private(st, ri, r)
    _release_prefix(st, pc, ri[r, R_PID], ri[r, R_PBLK])


@_jit
def _prefill_done(st, fs, prompt, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree, seg_i, seg_f, r):
    """``Engine.prefill_done``: ``r``'s prefill ended at ``now``; it finishes or starts decoding."""
    generated = ri[r, R_GEN] + 1
    ri[r, R_GEN] = generated
    now = fs[F_NOW]
    if out[O_FIRST, r] != out[O_FIRST, r]:
        out[O_FIRST, r] = now
    else:
        rf[r, R_ITLX] = max(rf[r, R_ITLX], now - rf[r, R_LAST])
    ri[r, R_SEGW] = st[S_NWIN]
    rf[r, R_SEGF] = now
    if generated >= output[r]:
        _close_segment(st, ri, rf, seg_i, seg_f, r)
        _release(st, ri, pc, r)
        _complete(fs, ri, rf, out, out_pre, r)
        return
    step = st[S_STEP]
    c = prompt[r] + generated - step
    ri[r, R_GROWC] = c
    st[S_CTX] += c
    if st[C_GROWTH]:
        _gadd(st, residues, tree, c, 1)
    ri[r, R_DECPOS] = st[S_NDEC]
    dec[st[S_NDEC]] = r
    st[S_NDEC] += 1
    _fpush(st, fheap, step + output[r] - generated, ri[r, R_SEQ], ri[r, R_EPOCH], r)


@_jit
def _finish_due(st, fs, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree, seg_i, seg_f):
    """``Engine.finish_due``: complete every decoding request whose last token came at the current step."""
    step, bs, now = st[S_STEP], st[C_BS], fs[F_NOW]
    while st[S_HLEN] > 0 and fheap[0, 0] <= step:
        epoch, r = fheap[0, 2], fheap[0, 3]
        _fpop(st, fheap)
        if epoch != ri[r, R_EPOCH] or ri[r, R_DECPOS] < 0:
            continue
        ri[r, R_GEN] = output[r]
        _close_segment(st, ri, rf, seg_i, seg_f, r)
        c = ri[r, R_GROWC]
        if st[C_GROWTH]:
            st[S_FREE] += -(-(c + step) // bs) - ri[r, R_PBLK]
            _gadd(st, residues, tree, c, -1)
        else:
            st[S_FREE] += ri[r, R_PRIV]
        if ri[r, R_PBLK]:
            _release_prefix(st, pc, ri[r, R_PID], ri[r, R_PBLK])
        _dec_remove(st, ri, dec, r)
        st[S_CTX] -= c
        out[O_FINISH, r] = now
        if ri[r, R_NPRE]:
            _complete(fs, ri, rf, out, out_pre, r)


@_jit
def _preempt_one(st, fs, prompt, rank, ri, pc, rf, qheap, dec, residues, tree, seg_i, seg_f, n):
    """``Engine.preempt_one``: the lowest-priority, most recently admitted decoding request goes back to the queue."""
    victim = dec[0]
    for j in range(1, st[S_NDEC]):
        r = dec[j]
        if st[C_MIXED]:
            if rank[r] > rank[victim] or (rank[r] == rank[victim] and ri[r, R_SEQ] > ri[victim, R_SEQ]):
                victim = r
        elif ri[r, R_SEQ] > ri[victim, R_SEQ]:
            victim = r
    step = st[S_STEP]
    ri[victim, R_GEN] = ri[victim, R_GROWC] + step - prompt[victim]
    _close_segment(st, ri, rf, seg_i, seg_f, victim)
    rf[victim, R_LAST] = fs[F_LAST_END] if st[S_NWIN] > ri[victim, R_SEGW] else rf[victim, R_SEGF]
    _release(st, ri, pc, victim)  # Engine.leave_decoding: release while still decoding, then leave
    _dec_remove(st, ri, dec, victim)
    c = ri[victim, R_GROWC]
    st[S_CTX] -= c
    if st[C_GROWTH]:
        _gadd(st, residues, tree, c, -1)
    ri[victim, R_EPOCH] += 1
    ri[victim, R_NPRE] += 1
    st[S_PREEMPT] += 1
    _qpush(st, qheap, rank[victim] * n + victim)
    st[S_QTOK] += prompt[victim]


@_jit
def _decode_window(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre, qheap, fheap, dec,
                   residues, tree, win, seg_i, seg_f, n):
    """``scheduler._window`` and ``Engine.run_decode``: fast-forward the batch to its next event (or preempt)."""
    while fheap[0, 2] != ri[fheap[0, 3], R_EPOCH] or ri[fheap[0, 3], R_DECPOS] < 0:  # stale tops
        _fpop(st, fheap)
    step = st[S_STEP]
    k = fheap[0, 0] - step
    batch = st[S_NDEC]
    context = st[S_CTX] + batch * step
    now = fs[F_NOW]
    if st[S_QLEN] == 0 and batch + st[S_NPF] < st[C_SLOTS] and st[S_NEXT] < n:
        until = _steps_to_reach(st, coef, batch, context, arrival[st[S_NEXT]] - now)
        if until < k:
            k = until
    new_blocks = 0
    if st[C_GROWTH]:
        k, new_blocks = _affordable(st, residues, tree, step, st[S_FREE] + st[S_EVICT], k)
        if k == 0:
            _preempt_one(st, fs, prompt, rank, ri, pc, rf, qheap, dec, residues, tree, seg_i, seg_f, n)
            return
    duration, first, longest = _window(st, coef, batch, context, k)
    w = st[S_NWIN]
    first_end = now + first
    win[0, w] = first_end
    win[1, w] = longest
    gap = first_end - fs[F_LAST_END]
    win[2, w] = gap if gap > longest else longest
    st[S_NWIN] = w + 1
    if new_blocks:
        _take(st, pc, new_blocks)
        used = _used(st)
        if used > st[S_PEAK]:
            st[S_PEAK] = used
    fs[F_NOW] = fs[F_LAST_END] = now + duration
    step += k
    st[S_STEP] = step
    st[S_USEFUL] += batch * k
    st[S_OFFERED] += st[C_OFFERED_SLOTS] * k
    st[S_DSTEPS] += k
    if fheap[0, 0] <= step:
        _finish_due(st, fs, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree, seg_i, seg_f)


@_jit
def _try_admit(st, fs, prompt, output, ri, pc, out, r):
    """``Engine.try_admit``: take ``r``'s blocks if the pool allows (False: it waits); its cached prefix blocks are
    not prefilled, nor those it loads back from the CPU tier (the next pass waits for them: ``_charge_reload``)."""
    bs, p, prefix_blocks = st[C_BS], ri[r, R_PID], ri[r, R_PBLK]
    tokens = prompt[r] + output[r] if st[C_RESERVE] else prompt[r] + ri[r, R_GEN] + 1
    total = -(-tokens // bs)
    hits, room = 0, st[S_FREE] + st[S_EVICT]
    if prefix_blocks and st[C_CACHING]:  # BlockAllocator.room_for: referencing an unreferenced prefix pins it
        hits = min(pc[p, P_BLOCKS], prefix_blocks)
        if pc[p, P_REFS] == 0:
            room -= pc[p, P_BLOCKS]
    spare = st[C_WATERMARK] + st[S_RESV] if st[S_NDEC] > 0 or st[S_NPF] > 0 else 0
    if room - (total - hits) < spare:
        return False
    reload = 0
    if prefix_blocks:
        if st[C_CPU]:
            reload = _cpu_hits(pc, p, prefix_blocks)
            fs[F_PENDING] += reload * fs[F_RELOAD_BLOCK]
            ri[r, R_RELOAD] += reload * bs
        _acquire_prefix(st, pc, p, prefix_blocks)
    private = total - prefix_blocks
    ri[r, R_PRIV] = private
    _take(st, pc, private)
    asked = prompt[r] + ri[r, R_GEN]
    st[S_PREFILL] += asked
    if hits:
        st[S_CTOK] += hits * bs
    ri[r, R_TOPF] = asked - (hits + reload) * bs
    st[S_ADM] += 1
    ri[r, R_SEQ] = st[S_ADM]
    if ri[r, R_GEN] == 0 and ri[r, R_NPRE] == 0:
        out[O_SCHED, r] = fs[F_NOW]
    used = _used(st)
    if used > st[S_PEAK]:
        st[S_PEAK] = used
    return True


@_jit
def _charge_reload(fs):
    """``Engine.charge_reload``: the pass just run waited for the blocks its prompts load back from the CPU."""
    if fs[F_PENDING] != 0.0:
        fs[F_NOW] += fs[F_PENDING]
        fs[F_PENDING] = 0.0


@_jit
def _ingest(st, fs, arrival, prompt, rank, reject, qheap, rejected, n):
    """``Engine.ingest``: queue what has arrived by ``now``; mark what is refused (the reasons are worded later)."""
    i, now, limit_n, limit_t = st[S_NEXT], fs[F_NOW], st[C_LIMIT_N], st[C_LIMIT_T]
    while i < n and arrival[i] <= now:
        if reject[i]:
            pass
        elif limit_n >= 0 and st[S_QLEN] >= limit_n:
            rejected[0, i], rejected[1, i] = 1, limit_n
        elif limit_t >= 0 and st[S_QTOK] + prompt[i] > limit_t:
            rejected[0, i], rejected[1, i] = 2, st[S_QTOK]
        else:
            _qpush(st, qheap, rank[i] * n + i)
            st[S_QTOK] += prompt[i]
        i += 1
    st[S_NEXT] = i


@_jit
def _record(st, fs, tl_f, tl_i):
    """``Engine.record_now`` and ``Timeline.add``: one sampled row; halve the rows at twice the limit."""
    j = st[S_NROWS]
    tl_f[j] = fs[F_NOW]
    tl_i[0, j], tl_i[1, j], tl_i[2, j] = st[S_NDEC] + st[S_NPF], st[S_QLEN], _used(st)
    j += 1
    if j >= 2 * st[C_TL_LIMIT]:
        half = j // 2
        for t in range(half):
            tl_f[t] = tl_f[2 * t + 1]
            tl_i[0, t], tl_i[1, t], tl_i[2, t] = tl_i[0, 2 * t + 1], tl_i[1, 2 * t + 1], tl_i[2, 2 * t + 1]
        j = half
        st[S_STRIDE] *= 2
    st[S_NROWS] = j


@_jit
def _chunked_iteration(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre, qheap, fheap, dec,
                       pre, residues, tree, win, seg_i, seg_f, scratch, n):
    """``scheduler._chunked_iteration``: all decodes plus prompt chunks within the token budget; else a window.

    The prefilling requests form a FIFO (``pre``, a ring): chunks go to its first entries, and only the last
    chunk can be partial (it used up the budget), so the prefills that complete are a prefix of it.
    """
    if st[C_GROWTH]:
        bs = st[C_BS]
        while st[S_NDEC] > 0 and residues[bs - 1 - st[S_STEP] % bs] > st[S_FREE] + st[S_EVICT]:  # one step does not fit
            _preempt_one(st, fs, prompt, rank, ri, pc, rf, qheap, dec, residues, tree, seg_i, seg_f, n)
        st[S_RESV] = residues[bs - 1 - st[S_STEP] % bs]
    room = st[C_BUDGET] - st[S_NDEC]
    chunks, tokens, head = 0, 0, st[S_PHEAD]
    while chunks < st[S_NPF] and room > 0:
        r = pre[(head + chunks) % n]
        take = min(ri[r, R_TOPF], room)
        scratch[chunks] = take
        chunks += 1
        room -= take
        tokens += take
    while room > 0 and st[S_QLEN] > 0 and st[S_NDEC] + st[S_NPF] < st[C_SLOTS]:
        r = qheap[0] % n
        if not _try_admit(st, fs, prompt, output, ri, pc, out, r):
            break
        _qpop(st, qheap)
        st[S_QTOK] -= prompt[r]
        pre[(head + st[S_NPF]) % n] = r
        st[S_NPF] += 1
        take = min(ri[r, R_TOPF], room)
        scratch[chunks] = take
        chunks += 1
        room -= take
        tokens += take
    if chunks == 0:
        st[S_RESV] = 0
        if st[S_NDEC] == 0:
            return False
        _decode_window(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre, qheap, fheap, dec,
                       residues, tree, win, seg_i, seg_f, n)
        return True
    if st[S_NDEC] > 0:  # Engine.run_decode(1, reserved, extra_prefill_tokens=tokens)
        batch, step, now = st[S_NDEC], st[S_STEP], fs[F_NOW]
        duration = _step_s(st, coef, batch, st[S_CTX] + batch * step, tokens)
        w = st[S_NWIN]
        first_end = now + duration
        win[0, w] = first_end
        win[1, w] = duration
        gap = first_end - fs[F_LAST_END]
        win[2, w] = gap if gap > duration else duration
        st[S_NWIN] = w + 1
        if st[S_RESV]:
            _take(st, pc, st[S_RESV])
            used = _used(st)
            if used > st[S_PEAK]:
                st[S_PEAK] = used
        fs[F_NOW] = fs[F_LAST_END] = now + duration
        step += 1
        st[S_STEP] = step
        st[S_USEFUL] += batch
        st[S_OFFERED] += st[C_OFFERED_SLOTS]
        st[S_DSTEPS] += 1
        if fheap[0, 0] <= step:
            _finish_due(st, fs, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree, seg_i, seg_f)
        st[S_RESV] = 0
    else:
        fs[F_NOW] += _step_s(st, coef, 0, 0, tokens)
    _charge_reload(fs)
    for j in range(chunks):
        r = pre[(head + j) % n]
        ri[r, R_TOPF] -= scratch[j]
        if ri[r, R_TOPF] == 0:  # a prefix of the FIFO completes: pop its head
            st[S_PHEAD] = (st[S_PHEAD] + 1) % n
            st[S_NPF] -= 1
            _prefill_done(st, fs, prompt, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree, seg_i, seg_f,
                          r)
    return True


@_jit
def _run(st, fs, coef, arrival, prompt, output, rank, reject, ri, pc, rf, out, out_pre, rejected, qheap, fheap,
         dec, pre, residues, tree, win, seg_i, seg_f, tl_f, tl_i, scratch, max_iterations):
    """``scheduler.run_continuous`` for at most ``max_iterations`` iterations: DONE, MORE, GROW (buffers) or STALL."""
    n = arrival.shape[0]
    for _ in range(max_iterations):
        taken = st[S_NEXT]
        if st[S_NEXT] < n and arrival[st[S_NEXT]] <= fs[F_NOW]:
            _ingest(st, fs, arrival, prompt, rank, reject, qheap, rejected, n)
        pending = st[S_QLEN] + 2 * st[S_NDEC] + st[S_NPF] + 1  # most segments or heap entries an iteration adds
        if st[S_NWIN] + 1 > win.shape[1] or st[S_NSEG] + pending > seg_f.shape[0] or \
                st[S_HLEN] + pending > fheap.shape[0]:
            return GROW
        progressed = True
        if st[C_CHUNKED]:
            progressed = _chunked_iteration(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre,
                                            qheap, fheap, dec, pre, residues, tree, win, seg_i, seg_f, scratch, n)
        elif st[S_QLEN] > 0:  # _unchunked_iteration: admit what fits and prefill it alone, else a decode window
            if st[C_GROWTH] and st[S_NDEC] > 0:
                st[S_RESV] = residues[st[C_BS] - 1 - st[S_STEP] % st[C_BS]]  # next_step_blocks
            admitted, tokens = 0, 0
            while st[S_QLEN] > 0 and st[S_NDEC] + admitted < st[C_SLOTS]:
                r = qheap[0] % n
                if admitted:  # the budget counts what the prefill computes (Engine.prefill_need)
                    need = prompt[r] + ri[r, R_GEN]
                    if ri[r, R_PBLK]:
                        need -= _prefix_hits(st, pc, ri[r, R_PID], ri[r, R_PBLK]) * st[C_BS]
                    if tokens + need > st[C_BUDGET]:
                        break
                if not _try_admit(st, fs, prompt, output, ri, pc, out, r):
                    break
                _qpop(st, qheap)
                st[S_QTOK] -= prompt[r]
                scratch[admitted] = r
                admitted += 1
                tokens += ri[r, R_TOPF]
            if admitted:
                fs[F_NOW] += _step_s(st, coef, 0, 0, tokens)
                _charge_reload(fs)
                for j in range(admitted):
                    _prefill_done(st, fs, prompt, output, ri, pc, rf, out, out_pre, fheap, dec, residues, tree,
                                  seg_i, seg_f, scratch[j])
            elif st[S_NDEC] > 0:
                _decode_window(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre, qheap, fheap,
                               dec, residues, tree, win, seg_i, seg_f, n)
            else:
                progressed = False
        elif st[S_NDEC] > 0:
            _decode_window(st, fs, coef, arrival, prompt, output, rank, ri, pc, rf, out, out_pre, qheap, fheap, dec,
                           residues, tree, win, seg_i, seg_f, n)
        else:
            progressed = False
        st[S_SEEN] += 1  # _tick (the deadline is checked between calls)
        if st[S_SEEN] % st[S_STRIDE] == 0:
            _record(st, fs, tl_f, tl_i)
        if progressed:
            st[S_STALLS] = 0
            continue
        # _idle; arrivals taken in (queued or turned away) are progress too
        st[S_STALLS] = 0 if st[S_NEXT] != taken else st[S_STALLS] + 1
        if st[S_NEXT] >= n and st[S_QLEN] == 0 and st[S_NDEC] == 0 and st[S_NPF] == 0:
            return DONE
        nxt = arrival[st[S_NEXT]] if st[S_NEXT] < n else math.inf
        if st[S_STALLS] > STALL_LIMIT or (nxt == math.inf and st[S_NDEC] == 0):
            return STALL
        fs[F_NOW] = max(fs[F_NOW], nxt)
    return MORE


# --- the Python side ----------------------------------------------------------------------------------------


#: Initial room for decode windows per request (a run with variable lengths has two to four); grown when full.
WINDOWS_PER_REQUEST = 4
#: Smallest initial buffer [rows].
MIN_ROWS = 16


def _initial_rows(n: int, per_request: int) -> int:
    return max(n * per_request, MIN_ROWS)


def _grown_to(a: np.ndarray, need: int, axis: int) -> np.ndarray:
    """``a`` with room for ``need`` entries along ``axis`` (at least doubled), its contents kept."""
    size = a.shape[axis]
    if need <= size:
        return a
    shape = list(a.shape)
    shape[axis] = max(2 * size, need)
    b = np.zeros(shape, dtype=a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = slice(0, size)
    b[tuple(index)] = a
    return b


def run(e: Engine) -> None:
    """Run engine ``e`` (``unsupported(e)`` is None) to the end with the compiled kernel; fill its books."""
    n, config, cost = e.n, e.config, e.cost
    st = np.zeros(N_STATE, dtype=np.int64)
    fs = np.zeros(4, dtype=np.float64)
    fs[F_NOW], fs[F_LAST_END], fs[F_PENDING], fs[F_RELOAD_BLOCK] = e.now, e.last_decode_end, e.pending_reload_s, \
        e.reload_s_per_block
    st[C_PREFILLED] = isinstance(cost, PrefilledCost)
    if st[C_PREFILLED]:
        cost = cost.inner
    if isinstance(cost, TeachingCost):
        kind = KIND_TEACHING
        coef = np.array([cost.decode_base_s, cost.decode_per_seq_s, cost.prefill_per_token_s], dtype=np.float64)
    else:
        kind = KIND_ROOFLINE
        coef = np.array([cost.weights_s, cost.kv_s_per_token, cost.decode_compute_s, cost.compute_fixed_s,
                         cost.comm_s_per_token, cost.fixed_s, cost.prefill_compute_s], dtype=np.float64)
    st[C_SLOTS], st[C_OFFERED_SLOTS], st[C_POOL], st[C_BS] = e.slots, e.offered_slots, e.alloc.pool_blocks, \
        e.block_size
    st[C_GROWTH], st[C_WATERMARK], st[C_BUDGET], st[C_RESERVE] = e.growth is not None, e.watermark, \
        config.max_batched_tokens, e.reserve
    st[C_LIMIT_N] = -1 if config.max_queued_requests is None else config.max_queued_requests
    st[C_LIMIT_T] = -1 if config.max_queued_tokens is None else config.max_queued_tokens
    st[C_MIXED], st[C_TL_LIMIT], st[C_KIND], st[C_CHUNKED] = e.mixed_priorities, e.timeline.limit, kind, \
        config.chunked_prefill
    st[S_FREE], st[S_STRIDE], st[S_SEEN] = e.alloc.free, e.timeline.stride, e.timeline.seen
    table = e.table
    ids, pc = _prefix_state(e, st)
    arrival = np.ascontiguousarray(table.arrival_s, dtype=np.float64)
    prompt = np.ascontiguousarray(table.prompt_tokens, dtype=np.int64)
    output = np.ascontiguousarray(table.output_tokens, dtype=np.int64)
    rank = np.unique(np.asarray(table.priority, dtype=np.int64), return_inverse=True)[1].astype(np.int64).reshape(-1)
    reject = np.zeros(n, dtype=np.bool_)
    reject[list(e.reject_at_arrival)] = True
    ri = np.zeros((n, N_RI), dtype=np.int64)
    ri[:, R_DECPOS] = -1
    ri[:, R_PID] = np.searchsorted(ids, table.prefix_id)  # dense prefix rows (no prefix: prefix blocks 0)
    ri[:, R_PBLK] = e.prefix_blocks
    if e.reloaded is not None:
        ri[:, R_RELOAD] = e.reloaded
    rf = np.zeros((n, 3), dtype=np.float64)
    out = np.full((4, n), np.nan)
    out_pre = np.zeros(n, dtype=np.int64)
    rejected = np.zeros((2, n), dtype=np.int64)
    qheap = np.zeros(max(n, 1), dtype=np.int64)
    dec = np.zeros(max(n, 1), dtype=np.int64)
    pre = np.zeros(max(n, 1), dtype=np.int64)
    scratch = np.zeros(max(n, 1), dtype=np.int64)
    residues = np.zeros(e.block_size, dtype=np.int64)
    tree = np.zeros(e.block_size + 1, dtype=np.int64)
    fheap = np.zeros((_initial_rows(n, 1), 4), dtype=np.int64)
    win = np.zeros((3, _initial_rows(n, WINDOWS_PER_REQUEST)), dtype=np.float64)
    seg_i = np.zeros((3, _initial_rows(n, 1) + n // 8), dtype=np.int64)  # one per request and per preemption
    seg_f = np.zeros(seg_i.shape[1], dtype=np.float64)
    tl_f = np.zeros(2 * e.timeline.limit, dtype=np.float64)
    tl_i = np.zeros((3, 2 * e.timeline.limit), dtype=np.int64)
    for t, running, queued, used in e.timeline.rows:
        j = st[S_NROWS]
        tl_f[j], tl_i[0, j], tl_i[1, j], tl_i[2, j] = t, running, queued, used
        st[S_NROWS] += 1
    while True:
        code = _run(st, fs, coef, arrival, prompt, output, rank, reject, ri, pc, rf, out, out_pre, rejected, qheap,
                    fheap, dec, pre, residues, tree, win, seg_i, seg_f, tl_f, tl_i, scratch, CHUNK_ITERATIONS)
        if code == DONE:
            break
        if code == STALL:
            raise RuntimeError(f"scheduler made no progress at t={fs[F_NOW]:.3f} s with {st[S_QLEN]} waiting")
        if code == GROW:
            pending = int(st[S_QLEN] + 2 * st[S_NDEC] + st[S_NPF] + 1)
            win = _grown_to(win, int(st[S_NWIN]) + 1, 1)
            seg_i = _grown_to(seg_i, int(st[S_NSEG]) + pending, 1)
            seg_f = _grown_to(seg_f, int(st[S_NSEG]) + pending, 0)
            fheap = _grown_to(fheap, int(st[S_HLEN]) + pending, 0)
        budget.check()  # the app's hard deadline, between chunks of iterations
    _write_back(e, st, fs, out, out_pre, rejected, win, seg_i, seg_f, tl_f, tl_i)
    _write_back_prefixes(e, st, ids, pc)
    if e.reloaded is not None:
        e.reloaded = np.ascontiguousarray(ri[:, R_RELOAD])


def _prefix_state(e: Engine, st: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prefix cache as arrays: the sorted prefix ids (row ``i`` of ``pc`` is ``ids[i]``) and ``pc`` filled from
    ``e.alloc`` (its entries, the CPU tier's runs and both LRU orders; empty for a new engine); the counts and the
    CPU tier's size go into ``st``."""
    alloc = e.alloc
    ids = np.unique(np.concatenate([np.asarray(e.table.prefix_id, dtype=np.int64),
                                    np.fromiter(alloc.prefixes, dtype=np.int64, count=len(alloc.prefixes)),
                                    np.fromiter(alloc.cpu, dtype=np.int64, count=len(alloc.cpu))]))
    pc = np.zeros((max(len(ids), 1), N_PC), dtype=np.int64)
    pc[:, P_PREV] = pc[:, P_NEXT] = pc[:, P_CPREV] = pc[:, P_CNEXT] = -1
    for pid, entry in alloc.prefixes.items():
        row = int(np.searchsorted(ids, pid))
        pc[row, P_BLOCKS], pc[row, P_REFS] = entry.blocks, entry.refs
    st[S_EVICT], st[S_CACHED], st[S_HITS], st[S_CTOK] = alloc.evictable, alloc.cached, alloc.hit_blocks, \
        e.cached_tokens
    st[S_LHEAD] = st[S_LTAIL] = st[S_CHEAD] = st[S_CTAIL] = -1
    st[C_CACHING] = alloc.caching
    for pid in alloc.lru:
        _push(st, pc, int(np.searchsorted(ids, pid)), S_LHEAD, P_PREV)
    st[S_CUSED], st[S_CCOUNT], st[S_CPEAK], st[S_RELOADED], st[C_CPU] = alloc.cpu_used, len(alloc.cpu), \
        alloc.peak_cpu_prefixes, alloc.reloaded_blocks, alloc.cpu_blocks
    for pid, run in alloc.cpu.items():
        row = int(np.searchsorted(ids, pid))
        pc[row, P_CPU] = run
        _push(st, pc, row, S_CHEAD, P_CPREV)
    return ids, pc


def _write_back_prefixes(e: Engine, st: np.ndarray, ids: np.ndarray, pc: np.ndarray) -> None:
    """Put the kernel's prefix cache back into ``e.alloc`` (entries with cached blocks, the CPU tier's runs, both
    LRU orders) and ``e``."""
    alloc = e.alloc
    alloc.evictable, alloc.cached, alloc.hit_blocks = int(st[S_EVICT]), int(st[S_CACHED]), int(st[S_HITS])
    e.cached_tokens = int(st[S_CTOK])
    alloc.prefixes = {int(ids[row]): PrefixEntry(int(pc[row, P_BLOCKS]), int(pc[row, P_REFS]))
                      for row in np.flatnonzero(pc[:len(ids), P_BLOCKS] > 0).tolist()}
    alloc.lru.clear()
    row = int(st[S_LHEAD])
    while row >= 0:
        alloc.lru[int(ids[row])] = None
        row = int(pc[row, P_NEXT])
    alloc.cpu.clear()
    row = int(st[S_CHEAD])
    while row >= 0:
        alloc.cpu[int(ids[row])] = int(pc[row, P_CPU])
        row = int(pc[row, P_CNEXT])
    alloc.cpu_used, alloc.peak_cpu_prefixes, alloc.reloaded_blocks = int(st[S_CUSED]), int(st[S_CPEAK]), \
        int(st[S_RELOADED])


def _write_back(e: Engine, st: np.ndarray, fs: np.ndarray, out: np.ndarray, out_pre: np.ndarray,
                rejected: np.ndarray, win: np.ndarray, seg_i: np.ndarray, seg_f: np.ndarray, tl_f: np.ndarray,
                tl_i: np.ndarray) -> None:
    """Put the kernel's results where the Python loop keeps them (``metrics.collect`` reads the engine)."""
    e.now, e.last_decode_end, e.pending_reload_s = float(fs[F_NOW]), float(fs[F_LAST_END]), float(fs[F_PENDING])
    e.step, e.next_arrival, e.ctx_const, e.admissions = int(st[S_STEP]), int(st[S_NEXT]), int(st[S_CTX]), \
        int(st[S_ADM])
    e.alloc.free, e.peak_blocks = int(st[S_FREE]), int(st[S_PEAK])
    e.useful_slot_steps, e.offered_slot_steps, e.decode_steps = int(st[S_USEFUL]), int(st[S_OFFERED]), \
        int(st[S_DSTEPS])
    e.prefill_tokens, e.preempt_count = int(st[S_PREFILL]), int(st[S_PREEMPT])
    e.first_scheduled, e.first_token, e.finish, e.max_itl = out[O_SCHED], out[O_FIRST], out[O_FINISH], out[O_ITL]
    e.preemptions = out_pre
    for i, why in e.reject_at_arrival.items():
        if i < e.next_arrival:
            e.reason[i] = why
    limit_n, limit_t = e.config.max_queued_requests, e.config.max_queued_tokens
    for i in np.flatnonzero(rejected[0]).tolist():
        if rejected[0, i] == 1:
            e.reason[i] = f"queue full ({limit_n} requests waiting; max_queued_requests)"
        else:
            e.reason[i] = f"queue full ({int(rejected[1, i]):,} prompt tokens waiting; max_queued_tokens {limit_t:,})"
    nwin, nseg = int(st[S_NWIN]), int(st[S_NSEG])
    w = e.windows
    w.first_end_s, w.max_step_s, w.gap_s = win[0, :nwin], win[1, :nwin], win[2, :nwin]
    s = e.segments
    s.rid, s.lo, s.hi, s.first_s = seg_i[0, :nseg], seg_i[1, :nseg], seg_i[2, :nseg], seg_f[:nseg]
    t = e.timeline
    t.seen, t.stride = int(st[S_SEEN]), int(st[S_STRIDE])
    rows = int(st[S_NROWS])
    t.rows = list(zip(tl_f[:rows].tolist(), tl_i[0, :rows].tolist(), tl_i[1, :rows].tolist(),
                      tl_i[2, :rows].tolist(), strict=True))
