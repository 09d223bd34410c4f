"""Autoscaling view: a day of traffic with its bursts and the platform's delays, each policy's cost against the
promises kept, the answer's reserved/on-demand split and a day chart (load, replicas, p99 TTFT over time).

Renders ``capacity.planning.autoscaling.plan_autoscaling`` (docs/autoscaling.md); no formulas here. Every request of
the day is simulated, so the view runs on a button, not on every rerun.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from app_views.context import Context
from app_views.figures import Figures
from app_views.jobs import plan_day
from app_views.server import run_heavy
from app_views.text import plain
from capacity.errors import ScenarioError

#: Table columns shown, with headers in words and units.
SHOWN = {"policy": "policy", "gpu_hours_per_day": "GPU-hours per day", "cost_per_month": "$ per month",
         "share_ttft": "TTFT kept", "share_tpot": "TPOT kept", "worst_window_share": "worst 15 min",
         "p99_ttft_s": "p99 TTFT (s)", "max_ttft_s": "max TTFT (s)", "min_replicas": "min replicas",
         "max_replicas": "max replicas", "keeps_promises": "keeps promises", "chosen": "answer"}


#: Policies the view compares (the command line compares any): sized on throughput alone, with headroom, on the queue,
#: as (kind, target utilisation); made ``simulator.autoscale.Policy`` only when the day is simulated, so opening the
#: app imports neither the simulator nor numba (tests/simulator/test_estimate.py).
POLICIES = [("throughput", 1.0), ("queue", 0.8), ("throughput", 0.6)]
#: What the view may simulate within the app's time budget of a view (``app_views.main.BUDGET_S``, 5 s): seconds per
#: simulated request and policy (the benchmark's 1.35 us of CPU per request, x 7 for a shared machine and the
#: per-replica overhead of a small day) and fixed seconds (the sizing and the control loops).
S_PER_REQUEST, S_FIXED = 1e-5, 2.0


def expected_requests(peak_rps: float, peak_factor: float) -> float:
    """Requests of the view's day: the mean of ``daily.diurnal_rates`` x 86,400 s, ``peak (1 + 1/f) / 2 x 86400``."""
    return peak_rps * (1.0 + 1.0 / peak_factor) / 2.0 * 86400.0


@st.cache_data(show_spinner="Simulating every request of the day under each policy...", max_entries=8, ttl=3600)
def cached_plan(scenario_json: str, peak_rps: float, peak_factor: float, burst: tuple[float, float, float],
                delays: tuple[float, float, float, float], price_ratio: float) -> dict[str, Any]:
    """The plan's rows, summary and the day of the answer (or of the first policy) in 15-minute bins
    (``app_views.jobs.plan_day``), a heavy job of this session on the server's worker pool under the time left in
    the view's budget (``app_views.server.run_heavy``); each entry goes an hour after it was written."""
    return run_heavy(plan_day, scenario_json, peak_rps, peak_factor, burst, delays, price_ratio, POLICIES)


def day_chart(timeline: dict[str, list[float]], ttft_promise_s: float | None, title: str) -> dict:
    """Three stacked panels over the day: arrival rate, replicas (routable and paid), p99 TTFT with the promise."""
    hours = [t / 3600.0 for t in timeline["start_s"]]
    ttft = [v if v is not None and math.isfinite(v) else None for v in timeline["p99_ttft_s"]]
    data = [{"type": "scatter", "mode": "lines", "name": "load (requests/s)", "x": hours, "y": timeline["rate_rps"],
             "line": {"color": "#2563eb", "shape": "hv"}, "yaxis": "y3"},
            {"type": "scatter", "mode": "lines", "name": "replicas routable", "x": hours,
             "y": timeline["ready_replicas"], "line": {"color": "#16a34a", "shape": "hv"}, "yaxis": "y2"},
            {"type": "scatter", "mode": "lines", "name": "replicas paid", "x": hours, "y": timeline["paid_replicas"],
             "line": {"color": "#16a34a", "dash": "dot", "shape": "hv"}, "yaxis": "y2"},
            {"type": "scatter", "mode": "lines", "name": "p99 TTFT (s)", "x": hours, "y": ttft,
             "line": {"color": "#dc2626", "shape": "hv"}, "yaxis": "y"}]
    shapes = []
    if ttft_promise_s:
        shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": ttft_promise_s,
                       "y1": ttft_promise_s, "line": {"color": "#dc2626", "dash": "dash", "width": 1}})
    return {"data": data, "layout": {
        "title": {"text": title}, "height": 520, "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        "xaxis": {"title": {"text": "hour of the day"}},
        "yaxis": {"domain": [0.0, 0.3], "title": {"text": "p99 TTFT (s)"}, "type": "log"},
        "yaxis2": {"domain": [0.35, 0.65], "title": {"text": "replicas"}, "rangemode": "tozero"},
        "yaxis3": {"domain": [0.7, 1.0], "title": {"text": "requests/s"}, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.15}, "shapes": shapes}}


def table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The policies as shown: shares in %, money in $, the answer marked."""
    df = pd.DataFrame(rows)
    for key in ("share_ttft", "share_tpot", "worst_window_share"):
        if key in df:
            df[key] = [f"{v:.2%}" if isinstance(v, float) and math.isfinite(v) else "-" for v in df[key]]
    df["cost_per_month"] = [f"${v:,.0f}" if isinstance(v, float) and math.isfinite(v) else "-"
                            for v in df["cost_per_month"]]
    return df[[k for k in SHOWN if k in df]].rename(columns=SHOWN)


#: The app's time budget of one view [s] (``app_views.main.BUDGET_S``; not imported: main imports the views).
BUDGET_S = 5.0


def render(st_: Any, ctx: Context) -> dict[str, Any] | None:
    """The Autoscaling view; returns the plan shown (None before the day is simulated)."""
    st_.markdown("A day of traffic peaking at the load below, with a burst, run through autoscaling policies with "
                 "your platform's delays; every request is simulated on the replica it is routed to.")
    c = st_.columns(4)
    peak = c[0].number_input("peak load (requests/s)", 0.1, 1e6, float(ctx.load_rps or 10.0), key="as_peak")
    factor = c[1].number_input("peak over night", 1.0, 100.0, 3.0, key="as_factor")
    burst_factor = c[2].number_input("burst (x load)", 1.0, 20.0, 2.0, key="as_burst")
    burst_min = c[3].number_input("burst length (min)", 0.0, 600.0, 10.0, key="as_burst_min")
    d = st_.columns(5)
    burst_hour = d[0].number_input("burst at hour", 0.0, 23.9, 18.0, key="as_burst_hour")
    provision = d[1].number_input("node provisioning (s)", 0.0, 3600.0, 0.0, key="as_provision",
                                  help="not stated: 0 s (optimistic); a cloud node takes minutes")
    bandwidth = d[2].number_input("weight load bandwidth (GB/s)", 0.0, 1000.0, 0.0, key="as_bandwidth",
                                  help="0: not stated, the weights load in no time")
    warmup = d[3].number_input("warm-up (s)", 0.0, 3600.0, 0.0, key="as_warmup",
                               help="CUDA graph capture and compilation after loading")
    ratio = d[4].number_input("on-demand / reserved price", 1.0, 10.0, 1.0, key="as_ratio")
    n = expected_requests(float(peak), float(factor))
    seconds = n * S_PER_REQUEST * (len(POLICIES) + 1) + S_FIXED
    if seconds > BUDGET_S:
        burst = f' --burst "{burst_hour:g} h:{burst_min:g} min:{burst_factor:g}"' if burst_min > 0 else ""
        st_.info(f"A day at this load is about {n:,.0f} requests, more than the app simulates within its "
                 f"{BUDGET_S:g} s budget per view. Run it on the command line (a day of ten million requests takes "
                 f"about a minute):")
        st_.code(f"capacity autoscale scenario.yaml --peak-rps {peak:g} --peak-factor {factor:g}{burst} "
                 f"--provision {provision:g} --warmup {warmup:g}"
                 + (f' --load-bandwidth "{bandwidth:g} GB/s"' if bandwidth else "") + f" --price-ratio {ratio:g}")
        return None
    if not st_.button("Simulate the day", key="as_run"):
        st_.caption("Each policy simulates every request of the day: a day at tens of requests/s takes seconds, at "
                    "hundreds a minute or more. Method and assumptions: docs/autoscaling.md.")
        return None
    try:
        plan = cached_plan(ctx.scenario_json, float(peak), float(factor),
                           (float(burst_hour), float(burst_min), float(burst_factor)),
                           (float(provision), float(bandwidth) * 1e9, float(warmup), 300.0), float(ratio))
    except ScenarioError as exc:  # refused by the server's limits, or past the view's time budget
        st_.error(plain("; ".join(exc.problems)))
        return None
    except (ValueError, RuntimeError) as exc:
        st_.error(plain(exc))
        return None
    s = plan["summary"]
    m = Figures(st_)
    m.metric("Answer", s["chosen_policy"] or "none keeps the promises")
    chosen = next((r for r in plan["rows"] if r["chosen"]), None)
    if chosen is not None and chosen.get("cost_per_month") is not None:
        m.metric("Cost per month, on demand", f"${chosen['cost_per_month']:,.0f}")
    split = s["reserved_split"]
    if split and "cost_per_month" in split:
        m.metric("Reserved + on demand", f"${split['cost_per_month']:,.0f}",
                    help=f"{split['reserved_replicas']} replicas reserved (the base the day never drops below)")
    m.metric("Peak fleet all day", f"${s['peak']['cost_per_month']:,.0f}" if s["peak"]["cost_per_month"]
                is not None else f"{s['peak']['gpu_hours_per_day']:,.0f} GPU-h")
    m.draw()
    st_.plotly_chart(day_chart(plan["timeline"], ctx.results.scenario.slo.ttft_s, f"The day under {plan['shown']}"),
                     width="stretch")
    st_.dataframe(table(plan["rows"]), hide_index=True, width="stretch")
    for line in s["assumptions"] + s["notes"]:
        st_.caption(line)
    return plan


__all__ = ["POLICIES", "cached_plan", "day_chart", "expected_requests", "render", "table"]
