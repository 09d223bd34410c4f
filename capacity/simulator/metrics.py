"""Results of a simulation: one row per request, the engine over time, and the aggregates.

Per request: queue time = first scheduled - arrival; TTFT = first token - arrival;
TPOT = (finish - first token) / (output - 1) (undefined for one-token answers);
worst inter-token gap (ITL); end-to-end = finish - arrival. Aggregates are means and
percentiles over completed requests; throughput counts completions over the span from
the first arrival to the last finish; goodput counts only the completions that kept the
scenario's promises (TTFT and TPOT, each where set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from capacity.model.scenario import Scenario
from capacity.simulator.config import SimulationConfig
from capacity.simulator.engine import Engine
from capacity.simulator.workloads import RequestTable

if TYPE_CHECKING:  # pandas is imported where a DataFrame is built: a search's simulations build none
    import pandas as pd

REQUEST_COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "priority", "status",
                   "reject_reason", "queue_s", "ttft_s", "tpot_s", "max_itl_s", "e2e_s", "finish_s", "preemptions")
TIMELINE_COLUMNS = ("time_s", "running", "queued", "kv_blocks_used")


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo:hi])`` for many ranges at once (``hi > lo``), a sparse table built level by level.

    Level ``j`` holds ``max(values[i : i + 2**j])``; a range of length ``n`` is covered by two
    windows of level ``floor(log2 n)``. O((len(values) + len(lo)) log len(values)) time, O(len) memory.
    """
    out = np.full(len(lo), -np.inf)
    if len(lo) == 0:
        return out
    length = hi - lo
    level = np.floor(np.log2(np.maximum(length, 1))).astype(int)
    table = np.asarray(values, dtype=float).copy()
    width = 1
    for j in range(int(level.max()) + 1):
        pick = np.flatnonzero(level == j)
        if len(pick):
            out[pick] = np.maximum(table[lo[pick]], table[hi[pick] - width])
        table[: len(table) - width] = np.maximum(table[: len(table) - width], table[width:])
        width *= 2
    return out


def worst_gaps(e: Engine) -> np.ndarray:
    """Worst inter-token gap of each request [s]: over its decode segments, plus stalls across preemptions.

    A segment through windows ``[lo, hi)`` sees ``first_end[lo] - first token``, the steps of window
    ``lo``, and each later window's gap (which includes prefill iterations that paused decoding).
    """
    gaps = np.asarray(e.max_itl, dtype=float)
    seg = e.segments
    if len(seg.rid) == 0:
        return gaps
    rid, lo, hi = np.asarray(seg.rid), np.asarray(seg.lo), np.asarray(seg.hi)
    keep = hi > lo
    rid, lo, hi, first_s = rid[keep], lo[keep], hi[keep], np.asarray(seg.first_s)[keep]
    if len(rid) == 0:
        return gaps
    w = e.windows
    first_end, max_step, gap = (np.asarray(x, dtype=float) for x in (w.first_end_s, w.max_step_s, w.gap_s))
    worst = np.maximum(first_end[lo] - first_s, max_step[lo])
    later = hi - lo > 1
    worst[later] = np.maximum(worst[later], range_max(gap, lo[later] + 1, hi[later]))
    merged = np.where(np.isnan(gaps), -np.inf, gaps)
    np.maximum.at(merged, rid, worst)
    return np.where(np.isinf(merged), np.nan, merged)


def _stat(values: np.ndarray, how: str) -> float:
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return math.nan
    if how == "mean":
        return float(values.mean())
    if how == "max":
        return float(values.max())
    return float(np.percentile(values, float(how[1:])))


def span_s(arrival_s: np.ndarray, done_finish_s: np.ndarray) -> float:
    """From the first arrival (of every request) to the last completion (``done_finish_s``: the completed
    requests' finish times) [s]; 0 when nothing completed."""
    return float(np.max(done_finish_s) - np.min(arrival_s)) if len(done_finish_s) else 0.0


def throughput_of(arrival_s: np.ndarray, done_finish_s: np.ndarray) -> float:
    """Completions per second over ``span_s`` [requests/s]; NaN for an empty span."""
    return _per_s(len(done_finish_s), span_s(arrival_s, done_finish_s))


def _per_s(count: float, span_s: float) -> float:
    """A count over the run's span [1/s]; NaN for an empty span."""
    return count / span_s if span_s > 0 else math.nan


@dataclass(slots=True)
class SimulationResult:
    """What one simulation produced. ``requests`` and ``timeline`` are DataFrames; ``summary()`` a flat dict."""

    scenario: Scenario
    config: SimulationConfig
    requests: pd.DataFrame
    timeline: pd.DataFrame
    counters: dict[str, float]
    token_times: dict[int, np.ndarray] | None = field(default=None, repr=False)
    event_loop: str = "python"  # which event loop ran: "compiled (numba)" or "python (why)" (scheduler.py)

    def summary(self) -> dict[str, Any]:
        """Aggregates in base units (seconds, requests/s, tokens/s); NaN where undefined (e.g. nothing completed)."""
        df, c = self.requests, self.counters
        done = df[df["status"] == "completed"]
        span = self._span_s(done)
        met = self.met_promise(done)

        def rate(count: float) -> float:
            return _per_s(count, span)

        out: dict[str, Any] = {
            "policy": self.config.policy,
            "cost_model": self.config.cost_model,
            "requests_submitted": int(len(df)),
            "requests_completed": int(len(done)),
            "requests_rejected": int((df["status"] == "rejected").sum()),
        }
        for name in ("ttft", "tpot", "queue", "e2e"):
            values = done[f"{name}_s"].to_numpy(dtype=float)
            for how in ("mean", "p50", "p90", "p99"):
                out[f"{how}_{name}_s"] = _stat(values, how)
        itl = done["max_itl_s"].to_numpy(dtype=float)
        out["max_itl_s"] = _stat(itl, "max")
        out["p99_max_itl_s"] = _stat(itl, "p99")
        out["throughput_rps"] = rate(len(done))
        out["output_tokens_per_s"] = rate(float(done["output_tokens"].sum()))
        out["goodput_rps"] = rate(int(met.sum()))
        out["slo_attainment"] = float(met.mean()) if len(done) else math.nan
        out["makespan_s"] = span
        out["padding_slot_steps"] = int(c["offered_slot_steps"] - c["useful_slot_steps"]) \
            if self.config.policy == "static" else 0
        out["slot_utilization"] = c["useful_slot_steps"] / c["offered_slot_steps"] if c["offered_slot_steps"] \
            else math.nan
        out["mean_decode_batch"] = c["useful_slot_steps"] / c["decode_steps"] if c["decode_steps"] else math.nan
        out["decode_steps"] = int(c["decode_steps"])
        out["preemptions"] = int(c["preemptions"])
        out["prefix_cache_hit_rate"] = c["cached_tokens"] / c["prefill_tokens"] if c["prefill_tokens"] else 0.0
        if "reloaded_tokens" in c:  # KV offload: the share of prompt tokens loaded back from the CPU tier
            out["cpu_reload_rate"] = c["reloaded_tokens"] / c["prefill_tokens"] if c["prefill_tokens"] else 0.0
            out["peak_cpu_prefixes"] = int(c["peak_cpu_prefixes"])
        out["kv_pool_blocks"] = int(c["pool_blocks"])
        out["peak_kv_blocks_used"] = int(c["peak_blocks"])
        out["slots"] = int(c["slots"])
        if self.config.prefill_replicas:  # separate pools (simulator/pools.py): the prefill pool's busy share
            out["prefill_replicas"] = int(self.config.prefill_replicas)
            out["prefill_utilization"] = c["prefill_busy_s"] / (self.config.prefill_replicas * span) if span > 0 \
                else math.nan
        if self.config.retries:  # what the users saw when clients resend (simulator/retries.py)
            from capacity.simulator.retries import retry_summary

            out.update({("retries_sent" if k == "retries" else f"retry_{k}"): v
                        for k, v in retry_summary(self).items() if k != "requests"})
        return out

    def _span_s(self, done: pd.DataFrame) -> float:
        """From the first arrival to the last completion [s] (0 when nothing completed; ``span_s``)."""
        return span_s(self.requests["arrival_s"].to_numpy(), done["finish_s"].to_numpy())

    def throughput_rps(self) -> float:
        """``summary()["throughput_rps"]`` alone: completions / span [requests/s] (``throughput_of``)."""
        done = self.requests[self.requests["status"] == "completed"]
        return throughput_of(self.requests["arrival_s"].to_numpy(), done["finish_s"].to_numpy())

    def met_promise(self, done: pd.DataFrame) -> np.ndarray:
        """Whether each completed request kept its promises: its class's (workload classes), else the scenario's."""
        promises = [(c.name, c.ttft_s, c.tpot_s) for c in self.config.classes] if self.config.classes and \
            "workload_class" in done else [(None, self.scenario.slo.ttft_s, self.scenario.slo.tpot_s)]
        met = np.ones(len(done), dtype=bool)
        for name, ttft_s, tpot_s in promises:
            mine = np.ones(len(done), dtype=bool) if name is None else (done["workload_class"] == name).to_numpy()
            if ttft_s is not None:
                met &= ~mine | (done["ttft_s"].to_numpy() <= ttft_s)
            if tpot_s is not None:
                tpot = done["tpot_s"].to_numpy()
                met &= ~mine | np.isnan(tpot) | (tpot <= tpot_s)
        return met

    def class_summary(self, warmup: float = 0.0) -> pd.DataFrame:
        """Per workload class: requests, mean/p50/p90/p99 TTFT and TPOT [s], and the share that kept its promise.

        ``warmup``: leave out requests that arrived in the first share of the run (steady state). One row
        ``all`` when the scenario has no classes.
        """
        df = self.requests
        df = df[(df["status"] == "completed") & (df["arrival_s"] >= warmup * df["arrival_s"].max())]
        met = self.met_promise(df)
        groups = df.groupby("workload_class", sort=False) if "workload_class" in df else [("all", df)]
        rows = []
        for name, part in groups:
            row: dict[str, Any] = {"workload_class": name, "requests": len(part)}
            for metric in ("ttft", "tpot"):
                values = part[f"{metric}_s"].to_numpy(dtype=float)
                for how in ("mean", "p50", "p90", "p99"):
                    row[f"{how}_{metric}_s"] = _stat(values, how)
            row["slo_attainment"] = float(met[df.index.get_indexer(part.index)].mean()) if len(part) else math.nan
            rows.append(row)
        import pandas as pd

        return pd.DataFrame(rows)

    def to_json_dict(self) -> dict[str, Any]:
        """``summary()`` with NaN and infinities as None (JSON has no NaN)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.summary().items()}


@dataclass(slots=True)
class Books:
    """A finished engine's books as plain arrays: the request columns (``REQUEST_COLUMNS`` and extras), the
    timeline (``TIMELINE_COLUMNS``: times [s] and an int64 row per time), the counters, the recorded token times.
    ``collect`` turns one into a SimulationResult; ``router.merge`` joins several replicas' without a DataFrame
    per replica."""

    columns: dict[str, np.ndarray]
    timeline_s: np.ndarray
    timeline_values: np.ndarray
    counters: dict[str, float]
    token_times: dict[int, np.ndarray] | None
    event_loop: str


def request_times(e: Engine, table: RequestTable) -> dict[str, np.ndarray]:
    """A finished engine's per-request times [s]: ``arrival_s`` (at the engine), ``ttft_s`` (the engine's first
    token less the arrival, plus the request latency: ``analysis.delayed_ttft``), ``tpot_s`` (NaN for one-token
    answers), ``finish_s`` (NaN: not completed). ``books`` builds on them; a search needs only these."""
    arrival = table.arrival_s
    first_token, finish = np.asarray(e.first_token), np.asarray(e.finish)
    return {"arrival_s": arrival, "ttft_s": first_token - arrival + e.config.request_latency_s,
            "tpot_s": tpot_of(first_token, finish, table.output_tokens), "finish_s": finish}


def tpot_of(first_token_s: np.ndarray, finish_s: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """Time per output token after the first: ``(finish - first token) / (A - 1)`` [s]; NaN for one-token answers
    and requests that did not finish."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(output_tokens > 1, (finish_s - first_token_s) / (output_tokens - 1), np.nan)


def books(e: Engine, table: RequestTable, config: SimulationConfig) -> Books:
    """A finished engine's books (see ``Books``)."""
    times = request_times(e, table)
    arrival, finish, outputs, tpot = times["arrival_s"], times["finish_s"], table.output_tokens, times["tpot_s"]
    completed = ~np.isnan(finish)
    reason = np.asarray(e.reason, dtype=object)
    status = np.where(completed, "completed", np.where(reason != "", "rejected", "unfinished"))
    columns = {
        "request_id": np.arange(len(table)), "arrival_s": arrival, "prompt_tokens": table.prompt_tokens,
        "output_tokens": outputs, "prefix_id": table.prefix_id, "priority": table.priority, "status": status,
        "reject_reason": reason, "queue_s": np.asarray(e.first_scheduled) - arrival, "ttft_s": times["ttft_s"],
        "tpot_s": tpot, "max_itl_s": worst_gaps(e), "e2e_s": finish - arrival + e.config.request_latency_s,
        "finish_s": finish,
        "preemptions": np.asarray(e.preemptions, dtype=np.int64)}
    if e.reloaded is not None:  # KV offload: what each request loaded back, and what the CPU tier held
        columns["reloaded_tokens"] = np.asarray(e.reloaded, dtype=np.int64)
    if table.workload_class is not None and config.classes:
        names = np.array([c.name for c in config.classes], dtype=object)
        columns["workload_class"] = names[table.workload_class]
    rows = e.timeline.rows
    if not rows or rows[-1][0] != e.now:
        rows = [*rows, (e.now, 0, len(e.queue), e.alloc.used)]
    timeline_s = np.array([row[0] for row in rows], dtype=np.float64)
    timeline_values = np.array([row[1:] for row in rows], dtype=np.int64).reshape(len(rows), 3)
    counters = {"useful_slot_steps": e.useful_slot_steps, "offered_slot_steps": e.offered_slot_steps,
                "decode_steps": e.decode_steps, "preemptions": e.preempt_count, "prefill_tokens": e.prefill_tokens,
                "cached_tokens": e.cached_tokens, "pool_blocks": e.alloc.pool_blocks, "peak_blocks": e.peak_blocks,
                "slots": e.slots}
    if e.reloaded is not None:
        counters.update({"reloaded_tokens": e.alloc.reloaded_blocks * e.block_size,
                         "peak_cpu_prefixes": e.alloc.peak_cpu_prefixes})
    tokens = None
    if e.tokens is not None:
        tokens = {rid: np.concatenate(parts) for rid, parts in e.tokens.items()}
    return Books(columns, timeline_s, timeline_values, counters, tokens, e.event_loop)


def timeline_frame(times_s: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """The timeline DataFrame (``TIMELINE_COLUMNS``) of times [s] and their (running, queued, blocks) rows."""
    import pandas as pd

    return pd.DataFrame({"time_s": times_s, **{name: values[:, j] for j, name in enumerate(TIMELINE_COLUMNS[1:])}})


def collect(e: Engine, table: RequestTable, scenario: Scenario, config: SimulationConfig) -> SimulationResult:
    """Turn a finished engine's books into a SimulationResult."""
    return result_of(books(e, table, config), scenario, config)


def result_of(b: Books, scenario: Scenario, config: SimulationConfig) -> SimulationResult:
    """One engine's books as a SimulationResult."""
    import pandas as pd

    return SimulationResult(scenario, config, pd.DataFrame(b.columns), timeline_frame(b.timeline_s, b.timeline_values),
                            b.counters, b.token_times, b.event_loop)


def waiting_timeline(requests: pd.DataFrame, points: int = 400) -> pd.DataFrame:
    """Requests that have arrived and wait for their first scheduling, over time [requests].

    ``waiting(t) = #{i : arrival_i <= t < arrival_i + queue_s_i}`` over admitted requests, at every arrival and
    admission instant (at most ``points`` of them, evenly thinned). The engine's own ``timeline.queued`` counts
    its queue after each step's admissions, so it misses requests that arrive during a step (a static batch
    reads 0 while they wait seconds); this counts them. Columns: time_s, waiting.
    """
    admitted = requests[np.isfinite(requests["queue_s"].to_numpy(dtype=float))]
    start = admitted["arrival_s"].to_numpy(dtype=float)
    end = start + admitted["queue_s"].to_numpy(dtype=float)
    times = np.unique(np.concatenate([start, end]))
    if times.size > points:
        times = times[np.linspace(0, times.size - 1, points).round().astype(int)]
    import pandas as pd

    waiting = np.searchsorted(np.sort(start), times, side="right") - np.searchsorted(np.sort(end), times,
                                                                                       side="right")
    return pd.DataFrame({"time_s": times, "waiting": waiting})
