"""Paged KV blocks: a pool of fixed-size blocks, a prefix cache, and the growth of decoding sequences.

Blocks are counted, not named: the simulator needs how many are free, cached or
held, never which. A sequence holding ``L`` tokens holds ``ceil(L / bs)`` blocks
(essay 000: 1,800 tokens -> 113 blocks of 16). The first ``h = floor(prefix / bs)``
of them (only full blocks are shareable) belong to its prefix and are stored once
for every request with that prefix (PagedAttention; vLLM automatic prefix caching).

Prefix entries are reference-counted; when the last request using a prefix leaves,
its blocks stay cached but become evictable, and allocation evicts unreferenced
blocks in least-recently-used order only when no free block is left.

KV offload (``cpu_blocks > 0``): evicted prefix blocks move to a CPU tier of that many
blocks instead of vanishing (vLLM's CPU offload, LMCache). A prefix's CPU run continues
its GPU blocks; when the CPU tier is full its least recently offloaded runs are dropped.
A request that finds its prefix's missing blocks on the CPU loads them back (``cpu_hits``)
instead of prefilling them again; the engine charges the transfer (``offload.reload_s``).

The compiled event loop (``compiled.py``) mirrors ``take``, ``offload``, ``cpu_hits``, ``room_for``, ``prefix_hits``,
``acquire_prefix`` and ``release_prefix`` step for step over arrays: a change here changes them there too
(``tests/simulator/test_compiled.py`` compares both loops bit for bit, the CPU tier included).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(slots=True)
class PrefixEntry:
    """One cached prefix: ``blocks`` of it are cached (from its start), ``refs`` running requests use it."""

    blocks: int = 0
    refs: int = 0


@dataclass(slots=True)
class BlockAllocator:
    """Free and cached block counts of one KV pool of ``pool_blocks`` blocks.

    Invariant: ``free + cached + private == pool_blocks`` where ``private`` are the blocks
    held by running requests outside their prefix; ``cached`` are prefix blocks, of which
    ``evictable`` have no reference.
    """

    pool_blocks: int
    caching: bool = True
    free: int = 0
    cached: int = 0
    evictable: int = 0
    prefixes: dict[int, PrefixEntry] = field(default_factory=dict)
    lru: OrderedDict[int, None] = field(default_factory=OrderedDict)
    hit_blocks: int = 0
    cpu_blocks: int = 0  # KV offload: blocks the CPU tier holds (0: evicted blocks are dropped)
    cpu: OrderedDict[int, int] = field(default_factory=OrderedDict)  # prefix -> blocks on the CPU, LRU order
    cpu_used: int = 0
    reloaded_blocks: int = 0
    peak_cpu_prefixes: int = 0  # most prefixes the CPU tier held at once

    def __post_init__(self) -> None:
        self.free = self.pool_blocks

    @property
    def available(self) -> int:
        """Blocks an allocation may take now: free plus evictable cached ones."""
        return self.free + self.evictable

    @property
    def used(self) -> int:
        """Blocks that hold live KV state of running requests (cached-but-unreferenced ones excluded)."""
        return self.pool_blocks - self.free - self.evictable

    def prefix_hits(self, prefix_id: int, prefix_blocks: int) -> int:
        """Blocks of this prefix already cached (a contiguous run from its start)."""
        if not self.caching or prefix_blocks <= 0:
            return 0
        entry = self.prefixes.get(prefix_id)
        return min(entry.blocks, prefix_blocks) if entry is not None else 0

    def room_for(self, prefix_id: int, prefix_blocks: int) -> tuple[int, int]:
        """``(hits, room)`` for a request with this prefix: its cached prefix blocks, and the blocks it may take.

        An unreferenced cached prefix counts as evictable; referencing it pins all its blocks,
        so they are not room for the request's other blocks.
        """
        entry = self.prefixes.get(prefix_id) if self.caching and prefix_blocks > 0 else None
        if entry is None:
            return 0, self.free + self.evictable
        pinned = entry.blocks if entry.refs == 0 else 0
        return min(entry.blocks, prefix_blocks), self.free + self.evictable - pinned

    def take(self, blocks: int) -> None:
        """Take ``blocks`` from the free list, evicting unreferenced cached blocks (LRU) when it runs out."""
        if blocks <= self.free:
            self.free -= blocks
            return
        short = blocks - self.free
        while short > 0 and self.lru:
            oldest = next(iter(self.lru))
            entry = self.prefixes[oldest]
            evict = min(short, entry.blocks)
            entry.blocks -= evict  # the tail of a prefix goes first, so what stays is still a prefix
            if self.cpu_blocks:
                self.offload(oldest, evict)
            self.cached -= evict
            self.evictable -= evict
            self.free += evict
            short -= evict
            if entry.blocks == 0:
                del self.lru[oldest]
                del self.prefixes[oldest]
        if blocks > self.free:
            raise RuntimeError(f"KV pool overdrawn: {blocks} blocks wanted, {self.free} free")
        self.free -= blocks

    def offload(self, prefix_id: int, blocks: int) -> None:
        """Move ``blocks`` evicted from the tail of a prefix's GPU blocks to the front of its CPU run."""
        run = self.cpu.pop(prefix_id, 0)
        self.cpu_used -= run
        run = min(run + blocks, self.cpu_blocks)
        while self.cpu_used + run > self.cpu_blocks:
            self.cpu_used -= self.cpu.popitem(last=False)[1]
        self.cpu[prefix_id] = run
        self.cpu_used += run
        if len(self.cpu) > self.peak_cpu_prefixes:
            self.peak_cpu_prefixes = len(self.cpu)

    def cpu_hits(self, prefix_id: int, prefix_blocks: int) -> int:
        """Blocks of this prefix a request would load back from the CPU: its CPU run, up to what the GPU lacks."""
        run = self.cpu.get(prefix_id, 0)
        if not run:
            return 0
        entry = self.prefixes.get(prefix_id)
        return max(0, min(run, prefix_blocks - (entry.blocks if entry is not None else 0)))

    def acquire_prefix(self, prefix_id: int, prefix_blocks: int) -> int:
        """Reference a prefix for one request; allocate its missing blocks. Returns the blocks newly taken.

        Callers check ``available`` first: they need ``prefix_blocks - prefix_hits`` plus their private blocks.
        """
        if prefix_blocks <= 0:
            return 0
        if not self.caching:
            self.take(prefix_blocks)
            return prefix_blocks
        entry = self.prefixes.get(prefix_id)
        if entry is None:
            entry = self.prefixes[prefix_id] = PrefixEntry()
        elif entry.refs == 0:
            del self.lru[prefix_id]
            self.evictable -= entry.blocks
        hits = min(entry.blocks, prefix_blocks)
        self.hit_blocks += hits
        missing = prefix_blocks - entry.blocks
        if missing > 0 and prefix_id in self.cpu:  # loaded back: the run returns to the GPU (what is past it goes)
            self.reloaded_blocks += min(self.cpu[prefix_id], missing)
            self.cpu_used -= self.cpu.pop(prefix_id)
        entry.refs += 1
        if missing > 0:
            entry.refs += 1  # pin while evicting so ``take`` cannot evict this very prefix
            self.take(missing)
            entry.refs -= 1
            entry.blocks += missing
            self.cached += missing
        return max(missing, 0)

    def release_prefix(self, prefix_id: int, prefix_blocks: int) -> None:
        """Drop one request's reference; an unreferenced prefix stays cached, most recently used last."""
        if prefix_blocks <= 0:
            return
        if not self.caching:
            self.free += prefix_blocks
            return
        entry = self.prefixes[prefix_id]
        entry.refs -= 1
        if entry.refs == 0:
            self.lru[prefix_id] = None
            self.evictable += entry.blocks

    def check(self) -> None:
        """Raise if the counts are inconsistent (used by tests and at the end of every run)."""
        if not (0 <= self.cpu_used <= self.cpu_blocks and self.cpu_used == sum(self.cpu.values())):
            raise RuntimeError(f"inconsistent CPU tier: {self.cpu_used} blocks used of {self.cpu_blocks}")
        if not (0 <= self.free <= self.pool_blocks and 0 <= self.evictable <= self.cached <= self.pool_blocks):
            raise RuntimeError(f"inconsistent KV pool: free {self.free}, cached {self.cached}, "
                               f"evictable {self.evictable}, pool {self.pool_blocks}")


#: Largest block [tokens] whose growth over ``k`` steps is summed from per-residue counts (above: Fenwick queries).
RESIDUE_SUM_LIMIT = 256


class GrowthTracker:
    """Blocks held by decoding sequences whose contexts all grow by one token per decode step.

    A sequence joining at decode step ``G0`` with ``L0`` tokens holds ``ceil((c + G) / bs)`` blocks at
    step ``G``, with ``c = L0 - G0`` constant. Writing ``c + bs - 1 = bs u + v`` and ``G = bs a + b``,
    ``sum ceil((c + G) / bs) = sum u + n a + #{v >= bs - b}``: the last count comes from a Fenwick
    tree over the ``bs`` residues, so ``total(G)`` costs O(log bs) whatever the batch.
    """

    __slots__ = ("block_size", "count", "u_sum", "tree", "residues")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.count = 0
        self.u_sum = 0
        self.tree = [0] * (block_size + 1)
        self.residues = [0] * block_size  # sequences per residue v, for next_step_blocks in O(1)

    def _update(self, residue: int, delta: int) -> None:
        i = residue + 1
        while i <= self.block_size:
            self.tree[i] += delta
            i += i & -i

    def _below(self, residue: int) -> int:
        """Sequences with residue ``v < residue``."""
        i, total = residue, 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total

    def add(self, c: int) -> None:
        bs = self.block_size
        u, v = divmod(c + bs - 1, bs)
        self.count += 1
        self.u_sum += u
        self.residues[v] += 1
        tree, i = self.tree, v + 1  # _update(v, 1), inline: once per request (bs 1: total never reads the tree)
        while i <= bs and bs > 1:
            tree[i] += 1
            i += i & -i

    def remove(self, c: int) -> None:
        bs = self.block_size
        u, v = divmod(c + bs - 1, bs)
        self.count -= 1
        self.u_sum -= u
        self.residues[v] -= 1
        tree, i = self.tree, v + 1  # _update(v, -1), inline
        while i <= bs and bs > 1:
            tree[i] -= 1
            i += i & -i

    def next_step_blocks(self, step: int) -> int:
        """``total(step + 1) - total(step)``: the sequences whose next token opens a block, ``(c + step) % bs == 0``.

        ``ceil((c + G) / bs)`` grows at ``G + 1`` exactly when ``bs`` divides ``c + G``; with ``c + bs - 1 = bs u + v``
        that is ``v = bs - 1 - (G mod bs)``.
        """
        return self.residues[-1 - step % self.block_size]

    def total(self, step: int) -> int:
        """Blocks held by all tracked sequences at decode step ``step``: ``sum ceil((c_i + step) / bs)``."""
        a, b = divmod(step, self.block_size)
        wrapped = self.count - self._below(self.block_size - b) if b else 0
        return self.u_sum + self.count * a + wrapped

    def grown(self, step: int, k: int) -> int:
        """``total(step + k) - total(step)``: blocks the tracked sequences open over ``k`` steps from ``step``.

        A sequence opens a block at each step ``j`` with ``bs | c + j``: ``k // bs`` whole turns, plus one if
        its residue is among the ``r = k mod bs`` residues ``bs - 1 - (step + t) mod bs``, ``t < r`` (a cyclic
        run of the per-residue counts, summed in C). Past ``RESIDUE_SUM_LIMIT`` tokens a block, two Fenwick
        queries instead.
        """
        bs = self.block_size
        if bs > RESIDUE_SUM_LIMIT:
            return self.total(step + k) - self.total(step)
        turns, r = divmod(k, bs)
        grow = self.count * turns
        if r:
            residues = self.residues
            start = (bs - step - r) % bs
            end = start + r
            grow += sum(residues[start:end]) if end <= bs else sum(residues[start:]) + sum(residues[:end - bs])
        return grow

    def steps_affordable(self, step: int, available: int, limit: int) -> tuple[int, int]:
        """Largest ``k <= limit`` with ``total(step + k) - total(step) <= available``, and those new blocks.

        ``total`` never shrinks with ``step``, so a bisection finds ``k`` when ``limit`` does not fit. With blocks of
        one token every sequence takes one block per step: ``count k`` blocks, so ``k = available // count``.
        """
        grow = self.grown(step, limit)
        if grow <= available:
            return limit, grow
        if self.block_size == 1:
            k = available // self.count
            return k, k * self.count
        lo, hi, grow_lo = 0, limit, 0  # total(step + lo) fits, total(step + hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            grow = self.grown(step, mid)
            if grow <= available:
                lo, grow_lo = mid, grow
            else:
                hi = mid
        return lo, grow_lo
