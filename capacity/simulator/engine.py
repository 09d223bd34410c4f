"""The engine's state and the mechanics every policy shares: arrivals, admission, tokens, finishes.

Time advances only at iteration boundaries. The policies in ``scheduler.py`` decide what
each iteration runs; this module keeps the books: the waiting queue (a heap ordered by
priority then arrival, so a preempted request returns to the front), the KV pool, the
decoding set and the per-request results.

A decoding request joins with ``growth_c = prompt + generated - G`` where ``G`` counts decode
steps; while the batch is fixed its length is ``growth_c + G`` and the batch's total context
is ``ctx_const + B G``, so many steps can be skipped at once (the fast-forward).
"""

from __future__ import annotations

import heapq
import math
import random
from array import array

import numpy as np

from capacity.simulator.allocator import BlockAllocator, GrowthTracker
from capacity.simulator.config import SimulationConfig
from capacity.simulator.cost_models import CostModel
from capacity.simulator.entities import Request, Segments, Timeline, Windows
from capacity.simulator.workloads import RequestTable

NAN = math.nan


class Engine:
    """One serving engine (one replica) over a KV pool of ``pool_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, table: RequestTable, config: SimulationConfig, cost: CostModel, pool_blocks: int,
                 block_size: int, max_model_len: int | None, slots: int, offered_slots: int) -> None:
        self.config, self.cost, self.block_size = config, cost, block_size
        self.slots = slots  # max running sequences (continuous) or the fixed batch size (static)
        self.offered_slots = offered_slots  # the slots slot utilisation is measured against
        self.reserve = config.kv_allocation == "reserve" or config.policy == "static"
        self.alloc = BlockAllocator(pool_blocks, caching=config.prefix_caching)
        self.growth = None if self.reserve else GrowthTracker(block_size)
        self.watermark = math.ceil(config.watermark * pool_blocks) if not self.reserve else 0
        n = len(table)
        self.n = n
        self.table = table  # the request arrays, as numpy (the compiled loop reads them without the lists below)
        self.arrival = table.arrival_s.tolist()
        # Closed loop (``concurrency`` clients): request i is sent when a client is free, so its arrival is known
        # only then. The first ``concurrency`` go at t = 0; a freed client's next send time goes on the heap
        # ``ready``; ``arrival[committed]`` mirrors the heap's earliest (it may still move earlier), later entries
        # are inf. ``next_issue``: the first request with no send time yet (every request in an open loop).
        self.closed = config.arrival == "closed"
        self.next_issue = n
        if self.closed:
            self.committed = self.next_issue = min(config.concurrency, n)
            self.arrival = [0.0] * self.next_issue + [math.inf] * (n - self.next_issue)
            self.ready: list[float] = []
            rng = random.Random(config.seed)
            mean = config.client_think_s
            self.think = (lambda: rng.expovariate(1.0 / mean)) if mean > 0 and config.client_think == "exponential" \
                else (lambda: mean)
        self.prompt = table.prompt_tokens.tolist()
        self.output = table.output_tokens.tolist()
        self.prefix_id = table.prefix_id.tolist()
        self.priority = table.priority.tolist()
        usable_prefix = np.minimum(table.prefix_tokens, table.prompt_tokens - 1)
        self.prefix_blocks = np.where(table.prefix_id >= 0, usable_prefix // block_size, 0).tolist()
        total = table.prompt_tokens + table.output_tokens
        self.mixed_priorities = len(set(self.priority)) > 1
        self.reject_at_arrival: dict[int, str] = {}
        if max_model_len is not None:
            for i in np.flatnonzero(total > max_model_len).tolist():
                self.reject_at_arrival[i] = f"prompt + output ({total[i]:,} tokens) exceeds max_model_len " \
                                            f"({max_model_len:,})"
        needed = -(-total // block_size)
        for i in np.flatnonzero(needed > pool_blocks).tolist():
            self.reject_at_arrival.setdefault(i, f"needs {needed[i]:,} KV blocks; the pool holds {pool_blocks:,}")
        # clock and queues
        self.now = 0.0
        self.step = 0  # G: decode steps run so far
        self.next_arrival = 0
        self.queue: list[tuple[int, int, Request]] = []
        self.queued_tokens = 0
        self.decoding: dict[int, Request] = {}
        self.prefilling: list[Request] = []
        self.finish_heap: list[tuple[int, int, int, Request]] = []
        self.ctx_const = 0
        self.reserved_growth = 0  # blocks the next decode step needs, kept out of admission's reach
        self.admissions = 0
        self.last_decode_end = 0.0
        # results, one entry per request
        self.first_scheduled = array("d", [NAN]) * n  # compact float64 storage, read by numpy without a copy
        self.first_token = array("d", [NAN]) * n
        self.finish = array("d", [NAN]) * n
        self.max_itl = array("d", [NAN]) * n
        self.preemptions = array("q", [0]) * n
        self.reason: list[str] = [""] * n
        # counters
        self.useful_slot_steps = 0  # decode tokens produced, one per sequence per step
        self.offered_slot_steps = 0  # slots x decode steps (static: the fixed batch; continuous: max seqs)
        self.decode_steps = 0
        self.prefill_tokens = 0  # prompt tokens asked for, cached or not
        self.cached_tokens = 0
        self.preempt_count = 0
        self.peak_blocks = 0
        self.windows = Windows()
        self.segments = Segments()
        self.timeline = Timeline()
        self.tokens: dict[int, list[np.ndarray]] | None = {} if config.record_tokens else None
        self.reload_s_per_block = 0.0  # KV offload (``enable_offload``): transfer time of one block back [s]
        self.pending_reload_s = 0.0  # transfers the next pass waits for [s]
        self.reloaded: array | None = None  # tokens each request loaded back from the CPU tier
        self.event_loop = "python"  # which loop ran it: the compiled one (compiled.py) or the Python reference

    def enable_offload(self, cpu_blocks: int, reload_s_per_block: float) -> None:
        """Give the pool a CPU tier of ``cpu_blocks`` blocks that load back at ``reload_s_per_block`` each."""
        self.alloc.cpu_blocks = cpu_blocks
        self.reload_s_per_block = reload_s_per_block
        self.reloaded = array("q", [0]) * self.n

    def charge_reload(self) -> None:
        """The pass just run waited for the blocks its prompts load back from the CPU (not overlapped)."""
        self.now += self.pending_reload_s
        self.pending_reload_s = 0.0

    # --- arrivals ---------------------------------------------------------------------------------------

    def ingest(self) -> None:
        """Queue every request that has arrived by ``now``; reject what can never run or finds the queue full."""
        arrival, limit_n, limit_t = self.arrival, self.config.max_queued_requests, self.config.max_queued_tokens
        i, n, now, queue, reject = self.next_arrival, self.n, self.now, self.queue, self.reject_at_arrival
        prompt, output, prefix_id, prefix_blocks, priority = (self.prompt, self.output, self.prefix_id,
                                                              self.prefix_blocks, self.priority)
        closed = self.closed
        while i < n and arrival[i] <= now:
            if closed and i >= self.committed:
                self._sent()
            why = reject.get(i) if reject else None
            if why is None and limit_n is not None and len(queue) >= limit_n:
                why = f"queue full ({limit_n} requests waiting; max_queued_requests)"
            if why is None and limit_t is not None and self.queued_tokens + prompt[i] > limit_t:
                why = f"queue full ({self.queued_tokens:,} prompt tokens waiting; max_queued_tokens {limit_t:,})"
            if why is not None:
                self.reason[i] = why
                i += 1
                if self.closed:
                    self.client_free(now)
                continue
            p = priority[i]
            heapq.heappush(queue, (p, i, Request(i, arrival[i], prompt[i], output[i], prefix_id[i], prefix_blocks[i],
                                                 p)))
            self.queued_tokens += prompt[i]
            i += 1
        self.next_arrival = i

    def enqueue(self, r: Request) -> None:
        heapq.heappush(self.queue, (r.priority, r.rid, r))
        self.queued_tokens += r.prompt_tokens

    def client_free(self, now: float) -> None:
        """Closed loop: a client got its answer (or a refusal) at ``now``; it sends its next request a think time
        later (``client_think``: exponential of mean ``client_think_time``, or that time exactly), which reaches the
        engine the request latency after (``request_latency_s``: the answer's way out and the request's way in,
        outside the engine, as ``analysis.closed_loop`` counts it in every cycle)."""
        ready = self.ready
        heapq.heappush(ready, now + self.think() + self.config.request_latency_s)
        j = self.committed
        if j < self.n:
            self.arrival[j] = ready[0]
            self.next_issue = j + 1

    def _sent(self) -> None:
        """Closed loop: request ``committed`` arrived: its send time leaves the heap; the next takes the earliest."""
        ready = self.ready
        heapq.heappop(ready)
        self.committed = j = self.committed + 1
        if ready and j < self.n:
            self.arrival[j] = ready[0]
            self.next_issue = j + 1

    def time_of_next_arrival(self) -> float:
        return self.arrival[self.next_arrival] if self.next_arrival < self.n else math.inf

    # --- admission and KV -------------------------------------------------------------------------------

    def try_admit(self, r: Request) -> bool:
        """Allocate ``r``'s blocks if the pool allows; set what its prefill computes. False if it must wait.

        On demand it needs blocks for ``prompt + generated + 1`` tokens (its prompt, what it generated
        before a preemption, and the token this prefill produces), keeping ``watermark`` blocks spare
        unless nothing runs; reserving it needs ``prompt + output`` at once.
        """
        bs, alloc, prefix_blocks = self.block_size, self.alloc, r.prefix_blocks
        tokens = r.prompt_tokens + r.output_tokens if self.reserve else r.prompt_tokens + r.generated + 1
        total = -(-tokens // bs)
        if prefix_blocks:
            hits, room = alloc.room_for(r.prefix_id, prefix_blocks)
        else:
            hits, room = 0, alloc.free + alloc.evictable
        spare = self.watermark + self.reserved_growth if (self.decoding or self.prefilling) else 0
        if room - (total - hits) < spare:
            return False
        reload = 0
        if prefix_blocks:
            if alloc.cpu_blocks:  # loaded back, not prefilled: the pass waits for the transfer
                reload = alloc.cpu_hits(r.prefix_id, prefix_blocks)
                self.pending_reload_s += reload * self.reload_s_per_block
                self.reloaded[r.rid] += reload * bs  # type: ignore[index]
            alloc.acquire_prefix(r.prefix_id, prefix_blocks)
        r.private_blocks = private = total - prefix_blocks
        if private <= alloc.free:  # alloc.take without eviction, inline
            alloc.free -= private
        else:
            alloc.take(private)
        asked = r.prompt_tokens + r.generated
        self.prefill_tokens += asked
        if hits:
            self.cached_tokens += hits * bs
        r.to_prefill = asked - (hits + reload) * bs
        self.admissions += 1
        r.seq = self.admissions
        if r.generated == 0 and r.preemptions == 0:
            self.first_scheduled[r.rid] = self.now
        used = alloc.pool_blocks - alloc.free - alloc.evictable
        if used > self.peak_blocks:
            self.peak_blocks = used
        return True

    def prefill_need(self, r: Request) -> int:
        """Tokens ``r``'s prefill would compute now: prompt plus earlier output, less cached prefix blocks."""
        hits = self.alloc.prefix_hits(r.prefix_id, r.prefix_blocks)
        return r.prompt_tokens + r.generated - hits * self.block_size

    def pop_queue(self) -> Request:
        r = heapq.heappop(self.queue)[2]
        self.queued_tokens -= r.prompt_tokens
        return r

    def _note_blocks(self) -> None:
        """Track the peak of blocks in use (``take`` already refuses to overdraw the pool)."""
        used = self.alloc.used
        if used > self.peak_blocks:
            self.peak_blocks = used

    def held_private(self, r: Request) -> int:
        """Private blocks ``r`` holds now (its prefix blocks are the cache's)."""
        if self.growth is None or r.rid not in self.decoding:
            return r.private_blocks
        return -(-(r.growth_c + self.step) // self.block_size) - r.prefix_blocks

    def release(self, r: Request) -> None:
        self.alloc.free += self.held_private(r)
        self.alloc.release_prefix(r.prefix_id, r.prefix_blocks)

    # --- tokens -----------------------------------------------------------------------------------------

    def prefill_done(self, r: Request) -> None:
        """``r``'s prefill ended at ``now``: it produced its next token; it finishes or starts decoding."""
        r.generated = generated = r.generated + 1
        rid, now, first_token = r.rid, self.now, self.first_token
        if first_token[rid] != first_token[rid]:
            first_token[rid] = now
        else:  # recomputed after a preemption: the gap since its last token is a stall the user saw
            r.itl_extra_s = max(r.itl_extra_s, now - r.last_token_s)
        r.seg_window = len(self.windows.gap_s)
        r.seg_first_s = now
        if generated >= r.output_tokens:
            self.close_segment(r)
            self.release(r)
            self.complete(r)
            if self.closed:
                self.client_free(now)
            return
        step = self.step
        r.growth_c = c = r.prompt_tokens + generated - step
        self.ctx_const += c
        if self.growth is not None:  # from now on the tracker counts its blocks: ceil((growth_c + G) / bs)
            self.growth.add(c)
        self.decoding[rid] = r
        heapq.heappush(self.finish_heap, (step + r.output_tokens - generated, r.seq, r.epoch, r))

    def leave_decoding(self, r: Request) -> None:
        self.release(r)
        del self.decoding[r.rid]
        self.ctx_const -= r.growth_c
        if self.growth is not None:
            self.growth.remove(r.growth_c)

    def close_segment(self, r: Request) -> None:
        seg, hi = self.segments, len(self.windows.gap_s)
        seg.rid.append(r.rid)
        seg.lo.append(r.seg_window)
        seg.hi.append(hi)
        seg.first_s.append(r.seg_first_s)
        if self.tokens is not None:
            parts = self.tokens.setdefault(r.rid, [])
            parts.append(np.array([r.seg_first_s]))
            parts.extend(self.windows.step_ends[r.seg_window:hi])  # type: ignore[arg-type]

    def complete(self, r: Request) -> None:
        self.finish[r.rid] = self.now
        self.preemptions[r.rid] = r.preemptions
        if r.itl_extra_s > 0:
            self.max_itl[r.rid] = r.itl_extra_s

    def finish_due(self) -> None:
        """Complete every decoding request whose last token came at step ``G`` (the hot path, kept inline)."""
        heap, decoding, step, alloc, growth = self.finish_heap, self.decoding, self.step, self.alloc, self.growth
        bs, now, hi, seg = self.block_size, self.now, len(self.windows.gap_s), self.segments
        ctx_const = self.ctx_const
        while heap and heap[0][0] <= step:  # usually one finish per call: few names bound before the loop
            _, _, epoch, r = heapq.heappop(heap)
            rid = r.rid
            if epoch != r.epoch or rid not in decoding:
                continue
            r.generated = r.output_tokens
            if self.tokens is None:
                seg.rid.append(rid)
                seg.lo.append(r.seg_window)
                seg.hi.append(hi)
                seg.first_s.append(r.seg_first_s)
            else:
                self.close_segment(r)
            c = r.growth_c
            if growth is None:
                alloc.free += r.private_blocks
            else:
                alloc.free += -(-(c + step) // bs) - r.prefix_blocks
                growth.remove(c)
            if r.prefix_blocks:
                alloc.release_prefix(r.prefix_id, r.prefix_blocks)
            del decoding[rid]
            ctx_const -= c
            self.finish[rid] = now
            if r.preemptions:
                self.complete(r)
            if self.closed:
                self.client_free(now)
        self.ctx_const = ctx_const

    def next_finish_step(self) -> int:
        heap = self.finish_heap
        while heap and (heap[0][2] != heap[0][3].epoch or heap[0][3].rid not in self.decoding):
            heapq.heappop(heap)
        return heap[0][0] if heap else self.step

    def preempt_one(self) -> None:
        """Free the blocks of the lowest-priority, most recently admitted decoding request (vLLM's recompute)."""
        if self.mixed_priorities:
            victim = max(self.decoding.values(), key=lambda q: (q.priority, q.seq))
        else:
            victim = next(reversed(self.decoding.values()))
        victim.generated = victim.growth_c + self.step - victim.prompt_tokens
        self.close_segment(victim)
        victim.last_token_s = self.last_decode_end if len(self.windows.gap_s) > victim.seg_window \
            else victim.seg_first_s
        self.leave_decoding(victim)
        victim.epoch += 1
        victim.preemptions += 1
        self.preempt_count += 1
        self.enqueue(victim)

    # --- decode windows ---------------------------------------------------------------------------------

    def run_decode(self, k: int, new_blocks: int, extra_prefill_tokens: int = 0) -> None:
        """Run ``k`` decode steps of the current batch (one step when prefill tokens ride along).

        ``new_blocks``: what the growing sequences take from the pool over those steps (blocks on demand).
        """
        cost, batch = self.cost, len(self.decoding)
        context = self.ctx_const + batch * self.step
        if extra_prefill_tokens:
            duration = first = longest = cost.step_s(batch, context, extra_prefill_tokens)
        else:
            duration, first, longest = cost.window(batch, context, k)
        now = self.now
        w = self.windows
        first_end = now + first
        w.first_end_s.append(first_end)
        w.max_step_s.append(longest)
        gap = first_end - self.last_decode_end
        w.gap_s.append(gap if gap > longest else longest)
        if self.tokens is not None:
            if extra_prefill_tokens:
                w.step_ends.append(np.array([now + duration]))
            else:
                w.step_ends.append(now + np.cumsum([cost.step_s(batch, context + batch * j, 0) for j in range(k)]))
        if new_blocks:
            self.alloc.take(new_blocks)
            self._note_blocks()
        self.now = self.last_decode_end = now + duration
        self.step += k
        self.useful_slot_steps += batch * k
        self.offered_slot_steps += self.offered_slots * k
        self.decode_steps += k
        if self.finish_heap[0][0] <= self.step:
            self.finish_due()

    def record(self, running: int | None = None) -> None:
        """Offer the current state to the timeline (which keeps one event in ``stride``)."""
        t = self.timeline
        t.seen += 1
        if not t.seen % t.stride:
            self.record_now(running)

    def record_now(self, running: int | None = None) -> None:
        if running is None:
            running = len(self.decoding) + len(self.prefilling)
        self.timeline.add(self.now, running, len(self.queue), self.alloc.used)
