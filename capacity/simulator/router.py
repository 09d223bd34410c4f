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

from dataclasses import replace

import numpy as np
import pandas as pd

from .config import SimulationConfig
from .metrics import TIMELINE_COLUMNS, SimulationResult
from .workloads import RequestTable

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


def merge(parts: list[tuple[np.ndarray, SimulationResult]]) -> SimulationResult:
    """One SimulationResult for the fleet from (request indices, result) per replica."""
    frames, timelines, tokens = [], [], {}
    for replica, (index, result) in enumerate(parts):
        df = result.requests.copy()
        df["request_id"] = index[df["request_id"].to_numpy()]
        df["replica"] = replica
        frames.append(df)
        timelines.append(result.timeline.drop_duplicates("time_s", keep="last").set_index("time_s"))
        for rid, times in (result.token_times or {}).items():
            tokens[int(index[rid])] = times
    requests = pd.concat(frames).sort_values("request_id", kind="stable").reset_index(drop=True)
    times = np.unique(np.concatenate([t.index.to_numpy() for t in timelines]))
    total = sum(t.reindex(times, method="ffill").fillna(0) for t in timelines)
    timeline = total.reset_index().rename(columns={"index": "time_s"})[list(TIMELINE_COLUMNS)]
    if len(timeline) > TIMELINE_ROWS:
        timeline = timeline.iloc[np.linspace(0, len(timeline) - 1, TIMELINE_ROWS).round().astype(int)]
    timeline = timeline.astype({c: "int64" for c in TIMELINE_COLUMNS[1:]}).reset_index(drop=True)
    counters = {key: sum(r.counters[key] for _, r in parts) for key in parts[0][1].counters}
    counters["pool_blocks"] = parts[0][1].counters["pool_blocks"]
    counters["peak_blocks"] = max(r.counters["peak_blocks"] for _, r in parts)
    first = parts[0][1]
    return replace(first, requests=requests, timeline=timeline, counters=counters,
                   token_times=tokens if first.token_times is not None else None)
