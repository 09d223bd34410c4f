"""Fleet view: a target load in, the GPU options ranked by cost, cost per million tokens, the Pareto chart.

Renders ``capacity.fleet.fleet_options`` (and the serving-option results of the sidebar's scenario); no
formulas here. The app calls ``render_fleet(st, results, scenario_mapping)`` inside its Fleet tab.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from capacity import catalog
from capacity.fleet import MODES, TENSOR_PARALLEL, fleet_options
from capacity.formatting import format_value

#: Ranked-table columns shown, with their headers.
SHOWN = {"rank": "rank", "gpu": "GPU", "tensor_parallel": "TP", "mode": "serving", "gpus": "GPUs",
         "replicas": "replicas", "cost_per_hour": "$ / hour", "cost_per_million_input_tokens": "$ / M input",
         "cost_per_million_output_tokens": "$ / M output", "cost_per_million_tokens": "$ / M tokens (usual load)",
         "tpot_at_design_s": "TPOT at peak", "ttft_at_design_s": "TTFT at peak", "pareto": "Pareto",
         "meets_slo": "keeps promises", "problem": "problem"}
MODE_COLOURS = {"colocated": "#2563eb", "chunked": "#f59e0b", "disaggregated": "#7c3aed"}


def _time(value: float) -> str:
    return format_value("decode_step_s", value) if isinstance(value, float) and math.isfinite(value) else "-"


def _money(value: float) -> str:
    return f"${value:,.3f}" if isinstance(value, float) and math.isfinite(value) else "-"


def ranked_table(table: pd.DataFrame) -> pd.DataFrame:
    """The options as shown: formatted money and times, replicas as 'prefill + decode' for separate pools."""
    shown = table.copy()
    pools = shown["mode"] == "disaggregated"
    shown["replicas"] = [f"{p:,.0f} + {d:,.0f}" if pool and math.isfinite(p + d) else
                         (f"{r:,.0f}" if isinstance(r, float) and math.isfinite(r) else "-")
                         for pool, p, d, r in zip(pools, shown["prefill_replicas"], shown["decode_replicas"],
                                                  shown["replicas"], strict=True)]
    shown["gpus"] = [f"{g:,.0f}" if isinstance(g, float) and math.isfinite(g) else "-" for g in shown["gpus"]]
    for key in ("cost_per_hour", "cost_per_million_input_tokens", "cost_per_million_output_tokens",
                "cost_per_million_tokens"):
        shown[key] = [_money(v) for v in shown[key]]
    for key in ("tpot_at_design_s", "ttft_at_design_s"):
        shown[key] = [_time(v) for v in shown[key]]
    shown["rank"] = [f"{v:.0f}" if isinstance(v, float) and math.isfinite(v) else "" for v in shown["rank"]]
    return shown[list(SHOWN)].rename(columns=SHOWN)


def pareto_chart(table: pd.DataFrame, tpot_slo_s: float | None) -> dict:
    """Cost per hour against TPOT at the peak load: every option that keeps the promises, the front as a line."""
    ok = table[table["meets_slo"]].copy()
    data = []
    for mode, colour in MODE_COLOURS.items():
        part = ok[ok["mode"] == mode]
        if len(part):
            data.append({"type": "scatter", "mode": "markers", "name": mode, "x": part["tpot_at_design_s"] * 1e3,
                         "y": part["cost_per_hour"], "marker": {"color": colour, "size": 10},
                         "text": part["gpu"] + " TP" + part["tensor_parallel"].astype(int).astype(str),
                         "hovertemplate": "%{text}<br>TPOT %{x:.1f} ms<br>$%{y:,.2f}/h<extra>" + mode + "</extra>"})
    front = ok[ok["pareto"]].sort_values("tpot_at_design_s")
    if len(front):
        data.append({"type": "scatter", "mode": "lines", "name": "Pareto front", "x": front["tpot_at_design_s"] * 1e3,
                     "y": front["cost_per_hour"], "line": {"color": "#111827", "dash": "dot", "shape": "hv"}})
    shapes = []
    if tpot_slo_s:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": tpot_slo_s * 1e3, "x1": tpot_slo_s * 1e3,
                       "y0": 0, "y1": 1, "line": {"color": "red", "dash": "dash", "width": 1.5}})
    return {"data": data, "layout": {"title": {"text": "Cost against TPOT at the peak load"},
                                     "xaxis": {"title": {"text": "TPOT at the design load (ms)"}},
                                     "yaxis": {"title": {"text": "$ per hour"}, "rangemode": "tozero"},
                                     "height": 380, "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
                                     "legend": {"orientation": "h", "y": -0.25}, "shapes": shapes}}


def win_back_lines(results: Any) -> list[str]:
    """What chunked prefill and separate pools win back of the capacity the promises cost, in words."""
    gap = results["ceiling_rps"] - results["goodput_rps"]
    if not gap > 0:
        return ["The promises cost no capacity here: the goodput is the ceiling."]
    lines = [f"The promises cost {gap:,.2f} of {results['ceiling_rps']:,.2f} requests/s per replica "
             f"({results['capacity_given_up'] * 100:,.0f}%)."]
    chunked, pools = results["chunked_win_back"], results["disagg_win_back"]
    lines.append(f"Chunked prefill serves {results['chunked_goodput_rps']:,.2f} requests/s per replica: "
                 f"{chunked * 100:,.0f}% of that back.")
    lines.append(f"Separate prefill and decode pools serve {results['disagg_goodput_per_gpu_rps']:,.2f} requests/s "
                 f"per GPU ({results['disagg_prefill_share'] * 100:,.0f}% of GPUs prefilling): "
                 f"{pools * 100:,.0f}% back.")
    return lines


def render_fleet(st: Any, results: Any, scenario_mapping: Mapping[str, Any],
                 options: Callable[..., pd.DataFrame] = fleet_options) -> pd.DataFrame | None:
    """The Fleet view. ``options`` is ``fleet_options`` or a cached wrapper with its signature (the app may pass
    one). Returns the options table shown (None when the inputs give none)."""
    workload = scenario_mapping.get("workload") or {}
    c1, c2, c3, c4 = st.columns(4)
    unit = c1.radio("target load in", ["requests/s", "tokens/day"], horizontal=True, key="fleet_unit")
    default_rps = max(float(workload.get("arrival_rate") or 0.0), 10.0)
    if unit == "requests/s":
        target = c2.number_input("target (requests/s)", 0.0, 1e7, value=default_rps, key="fleet_rps")
        kwargs = {"target": target}
    else:
        tokens = c2.number_input("target (billion tokens/day, input + output)", 0.0, 1e6, value=1.0,
                                 key="fleet_tokens_b")
        kwargs = {"tokens_per_day": tokens * 1e9}
    peak = c3.number_input("peak factor (sale day = 10)", 1.0, 1000.0, value=1.0, key="fleet_peak")
    headroom = c4.slider("headroom", 0.0, 0.9, 0.0, 0.05, key="fleet_headroom")
    d1, d2, d3 = st.columns(3)
    gpu = scenario_mapping.get("gpu")
    own = gpu.get("name") if isinstance(gpu, Mapping) else gpu
    names = list(catalog.gpus())
    gpus = d1.multiselect("GPU types (empty: this scenario's GPU)", names,
                          default=[own] if own in names else [], key="fleet_gpus")
    tps = d2.multiselect("tensor parallel", list(TENSOR_PARALLEL), default=list(TENSOR_PARALLEL), key="fleet_tp")
    modes = d3.multiselect("serving", list(MODES), default=list(MODES), key="fleet_modes")
    if not tps or not modes:
        st.info("Choose at least one tensor-parallel size and one serving mode.")
        return None
    try:
        table = options(scenario_mapping, peak_factor=peak, headroom=headroom, gpus=tuple(gpus) or None,
                        tensor_parallel=tuple(tps), modes=tuple(modes), **kwargs)
    except ValueError as exc:
        st.error(str(exc))
        return None
    ok = table[table["meets_slo"]]
    if ok.empty:
        st.warning("No option keeps the promises at this load; loosen a promise or add GPU types.")
    else:
        best = ok.iloc[0]
        layout = f"{best['gpu']} TP{int(best['tensor_parallel'])}, {best['mode']}"
        m = st.columns(4)
        m[0].metric("Cheapest that keeps the promises", f"{best['gpus']:,.0f} GPUs", help=layout)
        m[1].metric("Cost", f"${best['cost_per_hour']:,.2f} / hour")
        m[2].metric("$ per M input tokens", _money(best["cost_per_million_input_tokens"]))
        m[3].metric("$ per M output tokens", _money(best["cost_per_million_output_tokens"]))
        st.caption(f"{layout}: TPOT {_time(best['tpot_at_design_s'])} and TTFT {_time(best['ttft_at_design_s'])} "
                   f"at the peak load, {best['load_per_replica_rps']:,.2f} requests/s per replica.")
        st.plotly_chart(pareto_chart(table, results.scenario.slo.tpot_s), width="stretch")
    st.dataframe(ranked_table(table), hide_index=True, width="stretch")
    for line in win_back_lines(results):
        st.markdown(f"- {line}")
    st.caption("GPU cost per token splits by the GPU time each phase takes at the peak load (prefill share "
               "λ t_p to input tokens, the rest to output); separate pools split exactly. '$ / M tokens' is every "
               "token at the usual (not the peak) load. Method: docs/fleet.md.")
    return table


__all__ = ["pareto_chart", "ranked_table", "render_fleet", "win_back_lines"]
