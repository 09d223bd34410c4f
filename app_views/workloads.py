"""Workloads view: the sizing's workload mix per class, its curves, its day, and the operating guidance.

Renders the library's answers for the sizing in the sidebar (its ``workloads:`` classes, or its one shape):
``percentiles.sizing`` (goodput per class at its percentile, and the mean-based goodput beside it),
``workload_curves`` (concurrency against context; throughput against latency and its knee), ``daily``
(GPUs per hour over a day, the peak, the cost of following the profile against provisioning for the peak)
and ``guidance`` (queue limit, what to inspect first). No formulas here.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import streamlit as st

from app_views.charts import _figure
from app_views.context import Context
from app_views.figures import Figures
from app_views.tables import fit_table
from app_views.text import plain
from capacity import Scenario
from capacity.answers.guidance import inspect_first, queue_limits, ttft_target_s
from capacity.model.mix import mix_model
from capacity.model.mix_curves import concurrency_curve, knee, load_curve
from capacity.model.percentiles import sizing
from capacity.planning.daily import DailyPlan, diurnal_rates, plan_scenario_day
from capacity.render.ticks import linear_ticks

#: Loads of the throughput-latency curve, as shares of the mix's ceiling (fewer than the library's default 32:
#: each point solves every class's quantiles).
LOAD_FRACTIONS = tuple(round(0.05 + i * (0.95 - 0.05) / 15, 4) for i in range(16))
DEFAULT_DAY_FACTOR = 10.0  # "10x more traffic at noon than at night" (issue 15)


def _scenario(scenario_json: str) -> Scenario:
    return Scenario.from_dict(json.loads(scenario_json))


@st.cache_data(show_spinner=False, max_entries=64)
def class_table(scenario_json: str) -> pd.DataFrame:
    """``percentiles.sizing`` of the sizing: one row per class and one for the mix."""
    return sizing(_scenario(scenario_json))


@st.cache_data(show_spinner=False, max_entries=64)
def curves(scenario_json: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(concurrency against context, throughput and latency over loads) of the sizing."""
    scenario = _scenario(scenario_json)
    return concurrency_curve(scenario), load_curve(scenario, LOAD_FRACTIONS)


@st.cache_data(show_spinner=False, max_entries=64)
def day(scenario_json: str, peak_rps: float, factor: float, headroom: float) -> tuple[DailyPlan, DailyPlan]:
    """The day planned on the goodput at the classes' percentiles, and on the mean-based goodput."""
    scenario, rates = _scenario(scenario_json), diurnal_rates(peak_rps, factor)
    return (plan_scenario_day(scenario, rates, headroom), plan_scenario_day(scenario, rates, headroom,
                                                                              mean_based=True))


@st.cache_data(show_spinner=False, max_entries=64)
def guidance(scenario_json: str) -> tuple[pd.DataFrame, dict[str, float] | None]:
    """The "what to inspect first" table and the recommended queue limit (None without a TTFT promise)."""
    scenario = _scenario(scenario_json)
    mix = mix_model(scenario)
    try:
        limits = queue_limits(mix, ttft_target_s(mix))
    except ValueError:
        limits = None
    return inspect_first(scenario), limits


def _ms(value: Any) -> str:
    return f"{value * 1e3:,.1f} ms" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _rps(value: Any) -> str:
    return f"{value:,.2f} req/s" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _promise(row: pd.Series) -> str:
    at = f"p{row['percentile']:g}" if pd.notna(row.get("percentile")) else "mean"
    parts = [f"TPOT <= {_ms(row['tpot_promise_s'])}" if pd.notna(row.get("tpot_promise_s")) else "",
             f"TTFT <= {_ms(row['ttft_promise_s'])}" if pd.notna(row.get("ttft_promise_s")) else ""]
    shown = ", ".join(p for p in parts if p)
    return f"{shown} at {at}" if shown else "none"


def shown_classes(table: pd.DataFrame) -> pd.DataFrame:
    """The per-class table as the view shows it: words and units in the headers, units in the cells."""
    rows = []
    for i, (_, row) in enumerate(table.iterrows()):
        whole = i == len(table) - 1  # the last row is the whole mix (a single shape's one class is named "all" too)
        rows.append({"class": "whole mix" if whole else row["class"], "share of arrivals": f"{row['share']:.0%}",
                     "promise": "" if whole else _promise(row),
                     "goodput at its percentile": _rps(row["goodput_rps"]),
                     "mean-based goodput": _rps(row["mean_goodput_rps"]),
                     "arrivals at the mix goodput": _rps(row["class_rps"]),
                     **{f"{p} {m} at the mix goodput": "" if whole else _ms(row.get(f"{p}_{m.lower()}_s"))
                        for p in ("p50", "p99") for m in ("TTFT", "TPOT")}})
    return pd.DataFrame(rows)


def concurrency_chart(curve: pd.DataFrame) -> dict:
    lines = (("paged blocks", "max_requests_paged"), ("with the shared prefix", "max_requests_shared_prefix"))
    data = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": curve["context_tokens"].tolist(),
             "y": curve[column].tolist()} for name, column in lines]
    ticks = curve["context_tokens"].tolist()
    return _figure(data, "Conversations that fit against context", "tokens per request", "conversations per replica",
                   xaxis={"type": "log", "title": {"text": "tokens per request (log scale)"}, "tickvals": ticks,
                          "ticktext": [f"{t:,}" for t in ticks]},
                   yaxis={"type": "log", "title": {"text": "conversations per replica (log scale)"}, "dtick": 1,
                          "tickformat": ","})


def knee_chart(curve: pd.DataFrame, at: pd.Series, classes: list[str]) -> dict:
    data = [{"type": "scatter", "mode": "lines", "name": f"{c} p99 TPOT", "x": curve["output_tokens_per_s"].tolist(),
             "y": (curve[f"{c}_p99_tpot_s"] * 1e3).tolist()} for c in classes]
    data.append({"type": "scatter", "mode": "lines", "name": "mean end-to-end (right axis)", "line": {"dash": "dot"},
                 "x": curve["output_tokens_per_s"].tolist(), "y": (curve["mean_e2e_s"] * 1e3).tolist(), "yaxis": "y2"})
    marks = [("x", float(at["output_tokens_per_s"]), "#dc2626", "dash",
              f"knee: {at['rate_rps']:,.2f} req/s ({at['load_fraction']:.0%} of the ceiling)", "y")]
    return _figure(data, "Throughput against latency", "output tokens/s per replica", "p99 TPOT (ms)", marks,
                   yaxis2={"title": {"text": "mean end-to-end"}, "overlaying": "y", "side": "right",
                           **linear_ticks(curve["mean_e2e_s"] * 1e3, "ms")})


def daily_chart(plan: DailyPlan, mean_plan: DailyPlan) -> dict:
    hours = plan.hours
    data = [{"type": "bar", "name": "GPUs (goodput at the percentiles)", "x": hours["hour"].tolist(),
             "y": hours["gpus"].tolist()},
            {"type": "scatter", "mode": "lines", "name": "GPUs (mean-based goodput)", "x": hours["hour"].tolist(),
             "y": mean_plan.hours["gpus"].tolist(), "line": {"dash": "dot"}},
            {"type": "scatter", "mode": "lines", "name": "requests/s", "x": hours["hour"].tolist(),
             "y": hours["rate_rps"].tolist(), "yaxis": "y2"}]
    return _figure(data, "GPUs needed hour by hour", "hour of the day", "GPUs",
                   [("y", plan.peak_gpus, "#dc2626", "dash", f"peak: {plan.peak_gpus:,.0f} GPUs", "y")],
                   yaxis2={"title": {"text": "requests/s"}, "overlaying": "y", "side": "right",
                           **linear_ticks(hours["rate_rps"], "rate")})


def render(st_: Any, ctx: Context) -> None:
    scenario = ctx.results.scenario
    table = class_table(ctx.scenario_json)
    whole = table.iloc[-1]  # the whole mix
    classes = [str(c) for c in table["class"].iloc[:-1]]
    c = Figures(st_)
    c.metric("Goodput at the promised percentile", _rps(whole["goodput_rps"]),
                help="largest load at which every class keeps its promise for the share of requests it names "
                     "(the essays' goodput), per replica")
    c.metric("Mean-based goodput", _rps(whole["mean_goodput_rps"]),
                help="the same promises kept by the average request only (the single-shape goodput)")
    c.metric("Ceiling of the mix", _rps(whole["ceiling_rps"]), help="per replica, at the largest batch")
    c.metric("Classes", f"{len(classes):,}")
    c.draw()
    if scenario.raw and scenario.raw.get("workloads") is not None:
        w = scenario.workload
        st_.caption(plain(f"The headline and the other views size the mix's mean shape ({w.prompt_tokens:,} prompt "
                          f"and {w.output_tokens:,} output tokens); this view sizes its "
                          f"{len(classes)} classes, each with its own lengths, prefix hit rate and promise."))
    st_.markdown("##### Per class")
    fit_table(st_, shown_classes(table))
    st_.caption("Goodput at its percentile: the largest total load (shares fixed) at which the class keeps its "
                "promise for the promised share of its requests; the mix's is the smallest. The mean-based goodput "
                "keeps the same promises on the average request only. Analytic percentiles agree with the "
                "simulator within 12-16% (TPOT) up to 80% of the ceiling (docs/workloads.md).")

    concurrency, load = curves(ctx.scenario_json)
    at = knee(load)
    left, right = st_.columns(2)
    left.plotly_chart(concurrency_chart(concurrency), width="stretch")
    right.plotly_chart(knee_chart(load, at, classes), width="stretch")
    c = Figures(st_)
    c.metric("Knee load", _rps(at["rate_rps"]), help="the load of most throughput per second of mean end-to-end "
                                                          "latency (Kleinrock's power)")
    c.metric("Output at the knee", f"{at['output_tokens_per_s']:,.0f} tokens/s")
    c.metric("Decoding at the knee", f"{at['in_flight']:,.0f} sequences")
    c.draw()

    st_.markdown("##### Load over a day")
    goodput = float(whole["goodput_rps"])
    default_peak = (ctx.load_rps or goodput) * ctx.peak_factor if (ctx.load_rps or goodput) > 0 else 1.0
    c = st_.columns(2)
    peak = c[0].number_input("peak requests/s (noon)", min_value=0.01, value=float(round(default_peak, 2)),
                             key="workloads_peak_rps", help="default: the entered load x the peak factor")
    factor = c[1].number_input("peak / night traffic", min_value=1.0, value=DEFAULT_DAY_FACTOR,
                               key="workloads_day_factor")
    if goodput <= 0:
        st_.warning(plain("One replica keeps no load within the promises at their percentiles: no fleet serves the "
                          "day."))
    else:
        plan, mean_plan = day(ctx.scenario_json, float(peak), float(factor), ctx.headroom)
        summary = plan.summary()
        c = Figures(st_)
        c.metric("GPUs at the peak", f"{plan.peak_gpus:,.0f}",
                    help=f"mean-based goodput: {mean_plan.peak_gpus:,.0f}")
        c.metric("GPU-hours a day, following the profile", f"{plan.gpu_hours:,.0f} GPU h")
        c.metric("GPU-hours a day, provisioned for the peak", f"{plan.peak_gpu_hours:,.0f} GPU h")
        c.metric("Following the profile saves", f"{plan.saving:.0%}")
        c.draw()
        if summary["cost_per_day"] is not None:
            st_.markdown(plain(f"At ${scenario.gpu.price_per_hour:,.2f} per GPU-hour: "
                               f"${summary['cost_per_day']:,.2f} a day following the profile against "
                               f"${summary['peak_cost_per_day']:,.2f} provisioned for the peak."))
        st_.plotly_chart(daily_chart(plan, mean_plan), width="stretch")
        st_.caption(plain(f"The day: rate(h) from {peak / factor:,.2f} requests/s at midnight to {peak:,.2f} at noon "
                          f"(a cosine; an assumption to replace with measured rates: capacity curve --kind daily "
                          f"--profile), each hour's replicas at {goodput:,.2f} requests/s each with "
                          f"{ctx.headroom:.0%} headroom."))

    st_.markdown("##### Operating guidance")
    table_, limits = guidance(ctx.scenario_json)
    if limits is not None:
        st_.markdown(plain(f"Recommended queue limit: {limits['max_queued_requests']:,} requests or "
                           f"{limits['max_queued_tokens']:,} prompt tokens (TTFT promise "
                           f"{_ms(limits['ttft_target_s'])} x {limits['prefill_tokens_per_s']:,.0f} prompt tokens/s "
                           f"of prefill)."))
    fit_table(st_, table_.rename(columns={"inspect_first": "inspect first", "expected": "expected here"}))
