"""Compare view: which GPU for the entered load, by what the customer pays (``planning.compare.compare_fleets``),
then one replica of the same workload on other catalog GPUs and models, as a chart and a readable table."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from app_views import charts
from app_views.context import Context
from app_views.tables import fit_table
from capacity.inputs import catalog
from capacity.model.scenario import Scenario
from capacity.planning.compare import cheaper_line, compare, compare_fleets
from capacity.planning.sizing import MODE_WORDS
from capacity.render.formatting import format_value
from capacity.render.glossary import value_in_words

#: Table columns shown, with headers in words and units.
HEADERS = {"model": "model", "gpu": "GPU", "max_requests_shared_prefix": "requests that fit",
           "decode_step_s": "decode step", "ceiling_rps": "ceiling (req/s)", "goodput_rps": "goodput (req/s)",
           "goodput_limit": "limited by", "single_stream_tokens_per_s": "single stream (tokens/s)",
           "cost_per_million_tokens": "$ per M output tokens", "problem": "why not"}


#: Columns of the fleet comparison shown, with headers in words and units.
FLEET_HEADERS = {"choice": "", "gpu": "GPU", "layout": "layout", "gpus": "GPUs", "cost_per_month": "$ per month",
                 "cost_per_million_tokens": "$ per M output tokens", "tpot_at_design_s": "TPOT at peak",
                 "ttft_at_design_s": "TTFT at peak", "board_power_kw": "board power (kW)", "verdict": "promises"}


@st.cache_data(show_spinner="Sizing a fleet on each GPU...", max_entries=32)
def fleet_table(scenario_json: str, gpus: tuple[str, ...]) -> pd.DataFrame:
    return compare_fleets(Scenario.from_dict(json.loads(scenario_json)), gpus)


def shown_fleets(table: pd.DataFrame) -> pd.DataFrame:
    """The fleet comparison as shown: money, times and power with units, the answer's row marked."""
    out = table.copy()
    out["choice"] = ["answer" if c else "" for c in out["chosen"]]
    out["layout"] = [f"TP{tp:.0f}, {MODE_WORDS.get(m, m)}" if isinstance(m, str) and m else ""
                     for tp, m in zip(out["tensor_parallel"], out["mode"], strict=True)]
    out["gpus"] = [f"{g:,.0f}" if isinstance(g, float) and g == g else "" for g in out["gpus"]]
    out["cost_per_month"] = [f"${v:,.0f}" if isinstance(v, float) and v == v else "" for v in out["cost_per_month"]]
    out["cost_per_million_tokens"] = [f"${v:,.3f}" if isinstance(v, float) and v == v else ""
                                      for v in out["cost_per_million_tokens"]]
    for key in ("tpot_at_design_s", "ttft_at_design_s"):
        out[key] = [format_value("decode_step_s", v) if isinstance(v, float) and v == v and v < float("inf") else ""
                    for v in out[key]]
    out["board_power_kw"] = [f"{v:,.1f}" if isinstance(v, float) and v == v else "not sourced"
                             for v in out["board_power_kw"]]
    out["verdict"] = ["kept" if ok else (problem or "missed") for ok, problem in
                      zip(out["meets_slo"], out["problem"], strict=True)]
    return out[list(FLEET_HEADERS)].rename(columns=FLEET_HEADERS)


def render_fleets(st_: Any, ctx: Context) -> None:
    """Which GPU for the entered load: each type's cheapest fleet, cheapest first, the answer's marked."""
    st_.subheader("Which GPU for this load")
    customer = catalog.customer_gpus()
    everything = list(catalog.gpus())
    show_all = st_.checkbox("include consumer cards and export-only parts", key="compare_all_gpus")
    names = everything if show_all else customer
    own = ctx.sizing.scenario.gpu.name if ctx.sizing is not None else None
    chosen = st_.multiselect("GPU types", names, default=customer[:8], key="compare_fleet_gpus")
    users = ctx.results.scenario.workload.concurrency
    if not ctx.load_rps and not users:
        st_.info("Enter the load (requests/s or concurrent users) under Workload in the sidebar to compare the fleet "
                 "each GPU needs.")
        return
    entered = f"{users:,.0f} concurrent users" if users else f"{ctx.load_rps:,.2f} requests/s"
    gpus = tuple(dict.fromkeys([*([own] if own in everything else []), *chosen]))
    if not gpus:
        return
    table = fleet_table(ctx.scenario_json, gpus)
    keeps = table[table["meets_slo"]]
    if keeps.empty:
        st_.warning("No GPU type here keeps the promises at this load; loosen a promise or add GPU types.")
    else:
        best = keeps.iloc[0]
        st_.markdown(f"**Cheapest for {entered}:** {best['gpus']:,.0f} x {best['gpu']} "
                     f"(TP{best['tensor_parallel']:.0f}, {MODE_WORDS.get(best['mode'], best['mode'])}), "
                     f"${best['cost_per_month']:,.0f} per month.")
        line = cheaper_line(table)
        st_.markdown(line if line else "The answer's choice is the cheapest of these GPU types that keeps the "
                     "promises.")
    fit_table(st_, shown_fleets(table))
    st_.caption("Each row: that GPU type's cheapest fleet for the entered load x peak factor with the headroom "
                "(sidebar), over the layouts this sizing allows, at its catalog price (this sizing's GPU at this "
                "sizing's price). Board power: GPUs x the catalog's board power, not hosts or cooling.")


@st.cache_data(show_spinner=False, max_entries=64)
def compare_table(scenario_json: str, gpus: tuple[str, ...], models: tuple[str, ...]) -> pd.DataFrame:
    return compare(json.loads(scenario_json), gpus, models)


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison with every number formatted with its unit and readable headers."""
    out = table.copy()
    for key in ("max_requests_shared_prefix", "single_stream_tokens_per_s"):
        out[key] = [f"{v:,.0f}" if isinstance(v, float) and v == v else "" for v in out[key]]
    for key in ("ceiling_rps", "goodput_rps"):
        out[key] = [f"{v:,.2f}" if isinstance(v, float) and v == v else "" for v in out[key]]
    for key in ("decode_step_s", "cost_per_million_tokens"):
        out[key] = [format_value(key, v) if isinstance(v, float) and v == v else "" for v in out[key]]
    out["goodput_limit"] = [value_in_words(v) for v in out["goodput_limit"].fillna("")]
    return out[list(HEADERS)].rename(columns=HEADERS)


def render(st_: Any, ctx: Context) -> None:
    render_fleets(st_, ctx)
    st_.subheader("One replica on each GPU and model")
    c1, c2 = st_.columns(2)
    choices = c1.multiselect("GPUs", list(catalog.gpus()), default=catalog.customer_gpus()[:6], key="compare_gpus")
    model_choices = c2.multiselect("models (empty: this sizing's model)", list(catalog.models()),
                                   key="compare_models")
    table = compare_table(ctx.scenario_json, tuple(choices), tuple(model_choices))
    if len(table):
        st_.plotly_chart(charts.compare_chart(table), width="stretch")
        fit_table(st_, shown_table(table))
        st_.caption("Each catalog GPU brings its own peak figures, efficiencies and price; this sizing's tensor "
                    "parallel degree, dtypes, engine settings, workload and promises apply to every row.")
