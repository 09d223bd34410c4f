"""The simulator's step-by-step reference: continuous batching advanced one iteration per loop turn.

The event-driven engine skips ahead over runs of decode steps in which the batch does not change; this loop
visits every iteration and every sequence, so it is slow on purpose and easy to check by eye. The simulator's
tests compare the engine with it (tests/simulator/test_simulator.py), and ``benchmarks/bench_simulator.py`` times both.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np


def naive_continuous(table, cost, slots: float, pool_blocks: int, block_size: int, budget: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Continuous batching one iteration at a time (KV reserved for prompt + answer, prefills alone, FCFS).

    ``slots``: most sequences in the batch (``math.inf``: no limit); ``cost.step_s(decoding, context tokens,
    prefill tokens)`` gives each step [s]. Returns per request (first-token time, finish time, worst gap
    between tokens) [s].
    """
    n = len(table.arrival_s)
    arrival, prompt, output = table.arrival_s.tolist(), table.prompt_tokens.tolist(), table.output_tokens.tolist()
    first, finish, worst = [math.nan] * n, [math.nan] * n, [math.nan] * n
    queue, running, free, now, nxt = deque(), [], pool_blocks, 0.0, 0
    last = {}
    while nxt < n or queue or running:
        while nxt < n and arrival[nxt] <= now:
            queue.append(nxt)
            nxt += 1
        admitted, tokens = [], 0
        while queue and len(running) + len(admitted) < slots:
            i = queue[0]
            need = -(-(prompt[i] + output[i]) // block_size)
            if need > free or (admitted and tokens + prompt[i] > budget):
                break
            queue.popleft()
            free -= need
            admitted.append(i)
            tokens += prompt[i]
        if admitted:
            now += cost.step_s(0, 0, tokens)
            for i in admitted:
                first[i] = last[i] = now
                if output[i] == 1:
                    finish[i] = now
                    free += -(-(prompt[i] + output[i]) // block_size)
                else:
                    running.append([i, 1])
        elif running:
            now += cost.step_s(len(running), sum(prompt[i] + g for i, g in running), 0)
            for seq in running:
                i = seq[0]
                seq[1] += 1
                worst[i] = max(worst[i], now - last[i]) if worst[i] == worst[i] else now - last[i]
                last[i] = now
                if seq[1] == output[i]:
                    finish[i] = now
                    free += -(-(prompt[i] + output[i]) // block_size)
            running = [seq for seq in running if seq[1] < output[seq[0]]]
        else:
            now = arrival[nxt]
    return np.array(first), np.array(finish), np.array(worst)
