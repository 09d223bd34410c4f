"""Simulator view: static vs continuous batching side by side on the sidebar's scenario.

Renders ``capacity.simulator.simulate`` outputs: headline latencies, timelines of the running batch,
the queue and KV blocks, and the TTFT / TPOT distributions. No formulas here.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from capacity import Scenario, ScenarioError
from capacity.formatting import format_value
from capacity.simulator import simulate

POLICIES = ("static", "continuous")
ROWS = [("mean_ttft_s", "mean TTFT"), ("p99_ttft_s", "p99 TTFT"), ("mean_tpot_s", "mean TPOT"),
        ("p99_tpot_s", "p99 TPOT"), ("max_itl_s", "worst gap between tokens"), ("throughput_rps", "throughput"),
        ("output_tokens_per_s", "output tokens/s"), ("goodput_rps", "goodput under the promises"),
        ("slot_utilization", "slot utilisation"), ("preemptions", "preemptions"),
        ("requests_rejected", "rejected (503)"), ("prefix_cache_hit_rate", "prefix-cache hit rate")]
UNITS = {"throughput_rps": "requests/s", "goodput_rps": "requests/s", "output_tokens_per_s": "tokens/s",
         "slot_utilization": "-", "preemptions": "", "requests_rejected": "", "prefix_cache_hit_rate": "-"}


def run_pair(scenario_json: str, settings_json: str) -> dict[str, tuple[dict, pd.DataFrame, pd.DataFrame]] | str:
    """Simulate both policies; returns {policy: (summary, requests, timeline)} or the error text."""
    try:
        scenario = Scenario.from_dict(json.loads(scenario_json))
        settings = json.loads(settings_json)
        out = {}
        for policy in POLICIES:
            result = simulate(scenario, policy=policy, **settings)
            out[policy] = (result.summary(), result.requests, result.timeline)
        return out
    except ScenarioError as exc:
        return "; ".join(exc.problems)


def _fmt(key: str, value: float) -> str:
    if key.endswith("_s"):
        return format_value("decode_step_s", value)
    if key in ("preemptions", "requests_rejected"):
        return f"{value:,.0f}"
    if UNITS.get(key) == "-":
        return f"{value * 100:,.1f}%"
    return f"{value:,.2f} {UNITS.get(key, '')}".strip()


def _timeline_figure(timelines: dict[str, pd.DataFrame], column: str, title: str, unit: str) -> dict:
    data = [{"type": "scatter", "x": t["time_s"], "y": t[column], "name": policy, "mode": "lines",
             "line": {"shape": "hv"}} for policy, t in timelines.items()]
    return {"data": data, "layout": {"title": {"text": title}, "xaxis": {"title": {"text": "time (s)"}},
                                     "yaxis": {"title": {"text": unit}}, "height": 280,
                                     "margin": {"l": 10, "r": 10, "t": 40, "b": 10}}}


def _histogram(requests: dict[str, pd.DataFrame], column: str, title: str) -> dict:
    data = []
    for policy, table in requests.items():
        values = table[column].to_numpy(dtype=float)
        values = values[np.isfinite(values)] * 1e3
        data.append({"type": "histogram", "x": values, "name": policy, "opacity": 0.6, "nbinsx": 40})
    return {"data": data, "layout": {"title": {"text": title}, "barmode": "overlay", "height": 300,
                                     "xaxis": {"title": {"text": "ms"}}, "yaxis": {"title": {"text": "requests"}},
                                     "margin": {"l": 10, "r": 10, "t": 40, "b": 10}}}


def render_simulator(st, scenario_json: str, default_rate: float, cached_run) -> None:
    """Controls, then static vs continuous side by side. ``cached_run`` is ``run_pair`` wrapped in a cache."""
    c = st.columns(5)
    cost_model = c[0].selectbox("cost model", ["roofline", "teaching"], key="sim_cost_model",
                                help="roofline: the analytic core's step times; teaching: essay 000's "
                                     "18 ms + 0.12 ms per sequence, 0.03 ms per prompt token")
    requests = int(c[1].number_input("requests", 10, 100_000, 500, key="sim_requests"))
    rate = float(c[2].number_input("arrival rate (requests/s)", 0.01, 1e5, max(default_rate, 0.01),
                                   key="sim_rate"))
    seed = int(c[3].number_input("seed", 0, 2**31 - 1, 0, key="sim_seed"))
    chunked = c[4].toggle("chunked prefill", key="sim_chunked")
    settings = {"cost_model": cost_model, "requests": requests, "rate": rate, "seed": seed,
                "chunked_prefill": chunked, "arrival": "poisson"}
    with st.spinner(f"Simulating {requests:,} requests under both policies..."):
        runs = cached_run(scenario_json, json.dumps(settings, sort_keys=True))
    if isinstance(runs, str):
        st.error(runs)
        return
    summaries = {policy: runs[policy][0] for policy in POLICIES}
    table = pd.DataFrame([{"quantity": label, **{policy: _fmt(key, summaries[policy][key]) for policy in POLICIES}}
                          for key, label in ROWS])
    left, right = st.columns([2, 3])
    left.dataframe(table, hide_index=True, width="stretch")
    ratio = summaries["static"]["mean_ttft_s"] / max(summaries["continuous"]["mean_ttft_s"], 1e-12)
    left.caption(f"Continuous batching cuts mean TTFT {ratio:,.1f}x here; Poisson arrivals, seed {seed}. "
                 "Static batching pads finished sequences until the longest in its batch ends.")
    timelines = {policy: runs[policy][2] for policy in POLICIES}
    right.plotly_chart(_timeline_figure(timelines, "running", "Running batch", "sequences"), width="stretch")
    c1, c2 = st.columns(2)
    c1.plotly_chart(_timeline_figure(timelines, "queued", "Queue", "requests waiting"), width="stretch")
    c2.plotly_chart(_timeline_figure(timelines, "kv_blocks_used", "KV blocks in use", "blocks"), width="stretch")
    tables = {policy: runs[policy][1] for policy in POLICIES}
    c1, c2 = st.columns(2)
    c1.plotly_chart(_histogram(tables, "ttft_s", "TTFT distribution"), width="stretch")
    c2.plotly_chart(_histogram(tables, "tpot_s", "TPOT distribution"), width="stretch")
