"""Several identical replicas behind a router: split the arrivals, simulate each replica, merge the results.

``round_robin`` sends request ``i`` to replica ``i mod N``; ``random`` picks a replica uniformly
(its own stream of the seed, so the workload does not change); ``prefix_affinity`` sends every turn of a
multi-turn session to the replica that served its first turn (sessions round-robin over replicas, other
requests round-robin), so the conversation's cached blocks are found (essay 001: "send the next turn of a
conversation to the replica that holds its blocks, or the cache sits unused on another machine").
The replicas share nothing, so each is simulated alone. Merged: requests keep their ids and gain a
``replica`` column; the timeline sums the replicas (running, queued, KV blocks of the whole fleet); counters add up;
``kv_pool_blocks`` and ``peak_kv_blocks_used`` stay per replica (the busiest replica's peak).
"""

from __future__ import annotations

import numpy as np

from capacity.model.scenario import Scenario
from capacity.simulator.config import SimulationConfig
from capacity.simulator.metrics import TIMELINE_COLUMNS, Books, SimulationResult, timeline_frame
from capacity.simulator.workloads import RequestTable

#: Most rows a merged timeline keeps.
TIMELINE_ROWS = 4000


def assign(table: RequestTable, config: SimulationConfig) -> np.ndarray:
    """The replica [0, N) each request is routed to."""
    n, replicas = len(table), config.replicas
    if config.router == "random":
        return np.random.default_rng([config.seed, 1]).integers(0, replicas, size=n)
    if config.router == "prefix_affinity" and table.session is not None:
        first = np.unique(table.session, return_index=True)[1]  # sessions in order of their first turn
        replica_of = np.empty(int(table.session.max()) + 1, dtype=np.int64)
        replica_of[table.session[np.sort(first)]] = np.arange(len(first)) % replicas
        return replica_of[table.session]
    return np.arange(n) % replicas


def subset(table: RequestTable, index: np.ndarray) -> RequestTable:
    return table.take(index)


def merge(parts: list[tuple[np.ndarray, Books]], scenario: Scenario, config: SimulationConfig) -> SimulationResult:
    """One SimulationResult for the fleet from (request indices, books) per replica.

    Requests keep their ids (ordered by id) and gain ``replica``; the fleet's timeline at each time any replica
    recorded is the sum over replicas of each one's last row at or before it (0 before its first); counters add
    up, except the pool and the peak (per replica, the busiest's).
    """
    import pandas as pd

    columns: dict[str, np.ndarray] = {}
    for name in parts[0][1].columns:
        columns[name] = np.concatenate([b.columns[name] for _, b in parts])
    columns["request_id"] = np.concatenate([index[b.columns["request_id"]] for index, b in parts])
    columns["replica"] = np.concatenate([np.full(len(b.columns["request_id"]), replica, dtype=np.int64)
                                         for replica, (_, b) in enumerate(parts)])
    order = np.argsort(columns["request_id"], kind="stable")
    requests = pd.DataFrame({name: values[order] for name, values in columns.items()})
    tokens = {int(index[rid]): times for index, b in parts for rid, times in (b.token_times or {}).items()}
    kept = []  # each replica's timeline, of its rows the last at each time
    for _, b in parts:
        t = b.timeline_s
        last = np.append(t[1:] != t[:-1], True)
        kept.append((t[last], b.timeline_values[last]))
    times = np.unique(np.concatenate([t for t, _ in kept]))
    total = np.zeros((len(times), len(TIMELINE_COLUMNS) - 1))
    for t, values in kept:
        at = np.searchsorted(t, times, side="right") - 1
        total += np.where((at >= 0)[:, None], values[np.maximum(at, 0)], 0)
    if len(times) > TIMELINE_ROWS:
        pick = np.linspace(0, len(times) - 1, TIMELINE_ROWS).round().astype(int)
        times, total = times[pick], total[pick]
    timeline = timeline_frame(times, total.astype(np.int64))
    counters = {key: sum(b.counters[key] for _, b in parts) for key in parts[0][1].counters}
    counters["pool_blocks"] = parts[0][1].counters["pool_blocks"]
    counters["peak_blocks"] = max(b.counters["peak_blocks"] for _, b in parts)
    first = parts[0][1]
    return SimulationResult(scenario, config, requests, timeline, counters,
                            tokens if first.token_times is not None else None, first.event_loop)
