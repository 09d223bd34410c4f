"""Client retries: how resending a refused or slow request lengthens the queue (essay 000, "Retrying makes a
queue longer").

A client sends a request again when the server refuses it (HTTP 503 from a full queue) or, with
``retry_timeout``, when no first token has come within the timeout; it waits ``retry_backoff`` before the
first retry and twice as long before each further one (exponential backoff; 0 retries at once), up to
``retries`` times. A timed-out request keeps running on the server (it does not see the client leave), so
every retry is one more request in the same queue.

Retries depend on what happened to earlier attempts, which depends on the retries: ``simulate_retries`` runs
the engine on the requests plus the retries its last run implies, until the set of retries no longer changes
(a fixed point; the engine is deterministic). The result has one row per attempt (``origin_id``,
``attempt``) and ``retry_summary`` says what the users saw.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from capacity.model.scenario import Scenario
from capacity.simulator.config import SimulationConfig
from capacity.simulator.metrics import SimulationResult
from capacity.simulator.workloads import RequestTable

#: Most engine runs before giving up on a fixed point (``converged`` False in the summary).
MAX_ROUNDS = 100


def _retry_times(frame: pd.DataFrame, attempt: np.ndarray, config: SimulationConfig) -> np.ndarray:
    """When each attempt's client sends the next one [s]; NaN where it does not retry."""
    arrival = frame["arrival_s"].to_numpy(float)
    rejected = (frame["status"] == "rejected").to_numpy()
    wait = config.retry_backoff_s * 2.0 ** attempt
    when = np.where(rejected, arrival + wait, np.nan)
    if config.retry_timeout_s is not None:
        ttft = frame["ttft_s"].to_numpy(float)
        slow = ~rejected & ~(ttft <= config.retry_timeout_s)  # no first token in time (NaN: never)
        when = np.where(slow, arrival + config.retry_timeout_s + wait, when)
    return np.where(attempt < config.retries, when, np.nan)


def _table(base: RequestTable, children: dict[tuple[int, int], float]) -> tuple[RequestTable, np.ndarray,
                                                                              np.ndarray]:
    """The base requests plus retries ``{(origin, attempt): time}`` in arrival order; (table, origin, attempt)."""
    n = len(base)
    keys = sorted(children)
    origin = np.concatenate([np.arange(n), np.array([k[0] for k in keys], dtype=np.int64)])
    attempt = np.concatenate([np.zeros(n, dtype=np.int64), np.array([k[1] for k in keys], dtype=np.int64)])
    arrival = np.concatenate([base.arrival_s, np.array([children[k] for k in keys], dtype=float)])
    order = np.lexsort((attempt, arrival))
    rows = base.take(origin[order])
    return replace(rows, arrival_s=arrival[order]), origin[order], attempt[order]


def simulate_retries(scenario: Scenario, config: SimulationConfig, base: RequestTable) -> SimulationResult:
    """Simulate ``base`` with the clients' retries of ``config`` (a fixed point of retries and outcomes).

    The result's ``requests`` has one row per attempt with ``origin_id`` and ``attempt`` columns; its
    ``counters`` carry ``retry_rounds`` and ``retry_converged``; see ``retry_summary``.
    """
    from capacity.simulator import simulate_table

    children: dict[tuple[int, int], float] = {}
    converged, rounds = False, 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        table, origin, attempt = _table(base, children)
        result = simulate_table(scenario, replace(config, retries=0), table)
        when = _retry_times(result.requests, attempt, config)
        wanted = {(int(o), int(a) + 1): float(t) for o, a, t in zip(origin, attempt, when, strict=True)
                  if not math.isnan(t)}
        if wanted == children:
            converged = True
            break
        children = wanted
    requests = result.requests.copy()
    requests["origin_id"] = origin
    requests["attempt"] = attempt
    counters = {**result.counters, "retry_rounds": rounds, "retry_converged": converged}
    return replace(result, config=config, requests=requests, counters=counters)


def retry_summary(result: SimulationResult) -> dict[str, Any]:
    """What the users saw: requests sent, attempts, share given up, user TTFT (from the first attempt), queue.

    ``user_ttft_s``: per original request, the earliest first token of an attempt the client was still
    waiting for (within the timeout), from the original's arrival; ``mean_queued``: time-average of requests
    waiting in the engine's queue; ``peak_queued``: its largest sampled value.
    """
    df, config = result.requests, result.config
    origin = df["origin_id"].to_numpy() if "origin_id" in df else df["request_id"].to_numpy()
    first = (df["arrival_s"] + df["ttft_s"]).to_numpy(float)
    if config.retry_timeout_s is not None:
        first = np.where(df["ttft_s"].to_numpy(float) <= config.retry_timeout_s, first, np.nan)
    seen = pd.Series(first).groupby(origin).min()
    start = df[df.get("attempt", 0) == 0].set_index("origin_id" if "origin_id" in df else "request_id")["arrival_s"] \
        if "attempt" in df else df.set_index("request_id")["arrival_s"]
    user = (seen - start.reindex(seen.index)).to_numpy(float)
    timeline = result.timeline
    times = timeline["time_s"].to_numpy(float)
    queued = timeline["queued"].to_numpy(float)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    mean_queued = float(np.sum(queued[:-1] * np.diff(times)) / span) if span > 0 else float(queued.mean())
    return {
        "requests": int(len(seen)), "attempts": int(len(df)), "retries": int(len(df) - len(seen)),
        "gave_up_share": float(np.mean(np.isnan(user))),
        "mean_user_ttft_s": float(np.nanmean(user)) if np.any(~np.isnan(user)) else math.nan,
        "p99_user_ttft_s": float(np.nanpercentile(user, 99)) if np.any(~np.isnan(user)) else math.nan,
        "rejected_attempts": int((df["status"] == "rejected").sum()),
        "mean_queued": mean_queued, "peak_queued": int(queued.max()),
        "rounds": int(result.counters.get("retry_rounds", 1)),
        "converged": bool(result.counters.get("retry_converged", True)),
    }


__all__ = ["MAX_ROUNDS", "retry_summary", "simulate_retries"]
