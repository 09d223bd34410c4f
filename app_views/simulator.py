"""Simulator view: static vs continuous batching side by side on the sizing, under its ``simulation:`` block.

Renders ``capacity.simulator.simulate`` outputs: headline latencies, rejected requests (503s), timelines of
the running batch, the requests waiting and the KV blocks, and the TTFT / TPOT distributions. The
controls start from the scenario's ``simulation:`` block (a preset's) and override it; no formulas here.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app_views.context import Context
from app_views.jobs import simulate_pair
from app_views.server import run_heavy, workers
from app_views.text import plain
from capacity.errors import ScenarioError
from capacity.render.formatting import format_value

#: Arrival patterns offered, in words -> the simulator's ``arrival`` and what it means.
ARRIVALS = {"Poisson (steady random)": "poisson", "bursty (gamma, burstiness x)": "gamma",
            "all at once (instant)": "instant", "on/off bursts": "on_off", "replay a trace (CSV / JSONL)": "trace"}
ROWS = [("mean_ttft_s", "mean TTFT"), ("p99_ttft_s", "p99 TTFT"), ("mean_tpot_s", "mean TPOT"),
        ("p99_tpot_s", "p99 TPOT"), ("max_itl_s", "worst gap between tokens"), ("throughput_rps", "throughput"),
        ("output_tokens_per_s", "output tokens/s"), ("goodput_rps", "goodput under the promises"),
        ("slot_utilization", "slot utilisation"), ("preemptions", "preemptions"),
        ("requests_rejected", "rejected (503)"), ("prefix_cache_hit_rate", "prefix-cache hit rate")]
UNITS = {"throughput_rps": "requests/s", "goodput_rps": "requests/s", "output_tokens_per_s": "tokens/s",
         "slot_utilization": "%", "preemptions": "", "requests_rejected": "", "prefix_cache_hit_rate": "%"}
#: Time budget of one simulation pair in the app [s] (``capacity.runtime.budget``; nested in the view's, so the smaller
#: applies): a run estimated to take longer is refused up front, one that runs past it is stopped.
SIMULATION_BUDGET_S = 4.0
#: Largest trace accepted from an upload [bytes].
MAX_TRACE_UPLOAD = 20_000_000


def run_pair(scenario_json: str, settings_json: str) -> dict[str, Any] | str:
    """Both policies simulated as one heavy job of this session (``app_views.server.run_heavy``: on the server's
    worker pool, under ``SIMULATION_BUDGET_S``): what the view draws (``app_views.jobs.simulate_pair``), or the error
    text of a sizing or setting the simulator refuses. A run refused by the server's limits or stopped at its budget
    raises (a ScenarioError: not an answer to cache)."""
    return run_heavy(simulate_pair, scenario_json, settings_json, budget_s=SIMULATION_BUDGET_S)


#: Simulations cached by sizing and settings. What a worker returns (summaries, timelines, binned distributions) is
#: tens of kB whatever the number of requests, so 32 entries stay small; each goes an hour after it was written.
cached_run = st.cache_data(show_spinner=False, max_entries=32, ttl=3600)(run_pair)


def fmt(key: str, value: float) -> str:
    """A summary value with its unit: times as ms or s, rates per second, shares as %."""
    unit = UNITS.get(key)
    if value is None or value != value:
        return "n/a"
    if unit == "%":
        return f"{value * 100:,.1f}%"
    if unit == "":
        return f"{value:,.0f}"
    if unit is not None:
        return f"{value:,.2f} {unit}"
    return format_value("decode_step_s", value)


def _timeline_figure(series: dict[str, tuple[Any, Any]], title: str, unit: str) -> dict:
    data = [{"type": "scatter", "x": x, "y": y, "name": policy, "mode": "lines", "line": {"shape": "hv"}}
            for policy, (x, y) in series.items()]
    return {"data": data, "layout": {"title": {"text": title}, "xaxis": {"title": {"text": "time (s)"}},
                                     "yaxis": {"title": {"text": unit}, "rangemode": "tozero"}, "height": 280,
                                     "margin": {"l": 10, "r": 10, "t": 40, "b": 10}}}


def _histogram(binned: dict[str, dict[str, list[float]]], title: str) -> dict:
    """The policies' distributions of one request time, each as counts in its own bins (``app_views.jobs.histogram``),
    overlaid."""
    data = []
    for policy, one in binned.items():
        edges = np.asarray(one["edges_ms"], dtype=float)
        data.append({"type": "bar", "x": (edges[:-1] + edges[1:]) / 2.0, "y": one["counts"], "width": np.diff(edges),
                     "name": policy, "opacity": 0.6})
    return {"data": data, "layout": {"title": {"text": title}, "barmode": "overlay", "bargap": 0, "height": 300,
                                     "xaxis": {"title": {"text": "ms"}}, "yaxis": {"title": {"text": "requests"}},
                                     "margin": {"l": 10, "r": 10, "t": 40, "b": 10}}}


def _trace_path(upload: Any) -> str | None:
    """Keep an uploaded trace in a temporary file named by its content (the simulator reads a path)."""
    data = upload.getvalue()
    if len(data) > MAX_TRACE_UPLOAD:
        raise ScenarioError(f"{upload.name} is {len(data):,} bytes; traces are limited to {MAX_TRACE_UPLOAD:,}")
    suffix = ".jsonl" if upload.name.lower().endswith((".jsonl", ".json")) else ".csv"
    folder = Path(tempfile.gettempdir()) / "capacity-app-traces"
    folder.mkdir(exist_ok=True)
    path = folder / (hashlib.sha256(data).hexdigest()[:32] + suffix)
    if not path.exists():
        path.write_bytes(data)
    return str(path)


def _control(block: dict[str, Any], key: str, default: float, lo: float, hi: float, kind: type = float) -> Any:
    """A control's starting value from the block, clamped to the control's range; the default where the block's
    value is not a finite number (the simulator itself names a bad block value when it runs)."""
    value = block.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        value = default
    return kind(min(max(value, lo), hi))


def settings_from(block: dict[str, Any], default_rate: float) -> dict[str, Any]:
    """The controls' starting values from a ``simulation:`` block (the library's defaults where it is silent)."""
    arrival = block.get("arrival", "poisson")
    cost_model = block.get("cost_model", "roofline")
    rate = default_rate if math.isfinite(default_rate) else 1.0
    return {"cost_model": cost_model if cost_model in ("roofline", "teaching") else "roofline",
            "requests": _control(block, "requests", 500, 10, 100_000, int),
            "rate": _control(block, "rate", rate, 0.01, 1e6), "seed": _control(block, "seed", 0, 0, 2**31 - 1, int),
            "arrival": arrival if arrival in ARRIVALS.values() else "poisson",
            "burstiness": _control(block, "burstiness", 2.0, 0.01, 1000.0),
            "max_queued_requests": _control(block, "max_queued_requests", 0, 0, 10_000_000, int),
            "chunked_prefill": bool(block.get("chunked_prefill", False))}


def render(st_: Any, ctx: Context) -> None:
    """Controls (from the scenario's simulation block), then static vs continuous side by side. The simulations run
    on the server's worker pool, whose workers load the compiled event loop; where they run on this process instead
    (``CAPACITY_APP_WORKERS=0``), the loop starts loading here once per process, after this view's first answer so
    that it does not compete with it (``scheduler.load_compiled_loop``)."""
    try:
        _render(st_, ctx)
    finally:
        if workers() == 0:
            from capacity.simulator.scheduler import load_compiled_loop

            load_compiled_loop()


def _render(st_: Any, ctx: Context) -> None:
    block = ctx.doc.get("simulation") if isinstance(ctx.doc.get("simulation"), dict) else {}
    # The simulator runs one replica of the stated layout: without a simulation block of its own it starts from the
    # load one such replica carries in the answer's fleet (the whole load spread over its replicas), not the whole
    # load on one replica.
    per_replica = None if block else ctx.sizing.stated_load_per_replica_rps
    default_rate = per_replica or ctx.load_rps or ctx.results["goodput_rps"] * 0.8 or 1.0
    if per_replica is not None and ctx.load_rps and per_replica < ctx.load_rps:
        gpu = ctx.results.scenario.gpu
        st_.caption(f"One replica of {gpu.gpus_per_replica} x {plain(gpu.name)} at its share of your load: "
                    f"{per_replica:,.2f} of {ctx.load_rps:,.2f} requests/s.")
    start = settings_from(block, default_rate)
    marker = (ctx.scenario_json, "sim")
    if st.session_state.get("sim_for") != marker:  # a new sizing: the controls start from its simulation block
        st.session_state["sim_for"] = marker
        for key, value in start.items():
            st.session_state[f"sim_{key}"] = value
        st.session_state["sim_arrival_label"] = next(k for k, v in ARRIVALS.items() if v == start["arrival"])
    if block:
        st_.caption("Starting from the scenario's simulation block: " + plain(json.dumps(block, sort_keys=True)))
    c = st_.columns(4)
    c[0].selectbox("arrivals", list(ARRIVALS), key="sim_arrival_label")
    arrival = ARRIVALS[st.session_state["sim_arrival_label"]]
    c[1].number_input("arrival rate (requests/s)", 0.01, 1e6, key="sim_rate", format="%.2f",
                      disabled=arrival in ("instant", "trace"))
    c[2].number_input("requests", 10, 100_000, key="sim_requests")
    c[3].number_input("queue limit (requests, 0 = none)", 0, 10_000_000, key="sim_max_queued_requests",
                      help="requests beyond it are turned away (HTTP 503) and counted")
    c = st_.columns(4)
    c[0].selectbox("cost model", ["roofline", "teaching"], key="sim_cost_model",
                   help="roofline: the analytic core's step times; teaching: essay 000's "
                        "18 ms + 0.12 ms per sequence, 0.03 ms per prompt token")
    c[1].number_input("burstiness (gamma: 1 = Poisson)", 0.01, 1000.0, key="sim_burstiness",
                      disabled=arrival != "gamma")
    c[2].number_input("seed", 0, 2**31 - 1, key="sim_seed")
    c[3].toggle("chunked prefill", key="sim_chunked_prefill")
    # The rest of the simulation block (length distributions, token budgets) reaches the simulator with the scenario.
    settings = {**{k: st.session_state[f"sim_{k}"] for k in start}, "arrival": arrival}
    if not settings["max_queued_requests"]:
        settings.pop("max_queued_requests")
    if arrival == "trace":
        upload = st_.file_uploader("trace (CSV or JSONL: arrival_s, prompt_tokens, output_tokens)",
                                   type=["csv", "jsonl", "json"], key="sim_trace")
        if upload is None:
            st_.info("Upload a trace to replay it.")
            return
        try:
            settings["trace"] = _trace_path(upload)
        except ScenarioError as exc:
            st_.error(plain("; ".join(exc.problems)))
            return
        settings.pop("requests", None)
    if arrival in ("instant", "trace"):
        settings.pop("rate", None)
    with st_.spinner(f"Simulating {settings.get('requests', 0):,} requests under both policies..."):
        try:
            runs = cached_run(ctx.scenario_json, json.dumps(settings, sort_keys=True))
        except ScenarioError as exc:  # past its time budget, or refused by the server's limits (app_views.server)
            runs = "; ".join(exc.problems)
    if isinstance(runs, str):
        st_.error(plain(runs))
        return
    summaries = runs["summaries"]
    shown = tuple(summaries)  # both policies, or continuous batching alone for separate pools (jobs.policies_for)
    table = pd.DataFrame([{"quantity": label, **{policy: fmt(key, summaries[policy][key]) for policy in shown}}
                          for key, label in ROWS])
    left, right = st_.columns([1, 1])
    left.dataframe(table, hide_index=True, width="stretch")
    left.caption(f"{st.session_state['sim_arrival_label']}, seed {settings['seed']}. Static batching pads finished "
                 "sequences until the longest in its batch ends; continuous batching admits a request as soon as a "
                 "slot and KV blocks free up.")
    if len(shown) == 1:
        left.caption("Separate prefill and decode pools run under continuous batching only; static batching has no "
                     "hand-off of a prefilled request to another pool.")
    timelines, waiting = runs["timelines"], runs["waiting"]
    right.plotly_chart(_timeline_figure({p: (t["time_s"], t["running"]) for p, t in timelines.items()},
                                        "Running batch", "sequences"), width="stretch")
    c1, c2 = st_.columns(2)
    c1.plotly_chart(_timeline_figure({p: (w["time_s"], w["waiting"]) for p, w in waiting.items()},
                                     "Requests waiting for a slot", "requests"), width="stretch")
    c2.plotly_chart(_timeline_figure({p: (t["time_s"], t["kv_blocks_used"]) for p, t in timelines.items()},
                                     "KV blocks in use", "blocks"), width="stretch")
    c1, c2 = st_.columns(2)
    c1.plotly_chart(_histogram(runs["histograms"]["ttft_s"], "TTFT distribution"), width="stretch")
    c2.plotly_chart(_histogram(runs["histograms"]["tpot_s"], "TPOT distribution"), width="stretch")
