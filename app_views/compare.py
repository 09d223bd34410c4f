"""Compare view: the same workload on other catalog GPUs and models, as a chart and a readable table."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from app_views import charts
from app_views.context import Context
from capacity.inputs import catalog
from capacity.planning.compare import compare
from capacity.render.formatting import format_value

#: Table columns shown, with headers in words and units.
HEADERS = {"model": "model", "gpu": "GPU", "max_requests_shared_prefix": "requests that fit",
           "decode_step_s": "decode step", "ceiling_rps": "ceiling (req/s)", "goodput_rps": "goodput (req/s)",
           "goodput_limit": "limited by", "single_stream_tokens_per_s": "single stream (tokens/s)",
           "cost_per_million_tokens": "$ per M output tokens", "problem": "why not"}


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
    out["goodput_limit"] = out["goodput_limit"].fillna("")
    return out[list(HEADERS)].rename(columns=HEADERS)


def render(st_: Any, ctx: Context) -> None:
    c1, c2 = st_.columns(2)
    choices = c1.multiselect("GPUs", list(catalog.gpus()), default=list(catalog.gpus())[:6], key="compare_gpus")
    model_choices = c2.multiselect("models (empty: this sizing's model)", list(catalog.models()),
                                   key="compare_models")
    table = compare_table(ctx.scenario_json, tuple(choices), tuple(model_choices))
    if len(table):
        st_.plotly_chart(charts.compare_chart(table), width="stretch")
        st_.dataframe(shown_table(table), hide_index=True, width="stretch")
        st_.caption("Each catalog GPU brings its own peak figures, efficiencies and price; this sizing's tensor "
                    "parallel degree, dtypes, engine settings, workload and promises apply to every row.")
