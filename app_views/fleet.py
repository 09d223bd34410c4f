"""Fleet view: the entered load in, the GPU options ranked by cost, cost per million tokens, the Pareto chart.

Renders ``capacity.planning.fleet.fleet_options`` for the sidebar's load, headroom and peak factor (the same the
Cost view and the headline use); no formulas here. With the layouts the sizing compares (the default choices) the
cheapest option shown is the one answer (``ctx.sizing``), split pools included. "Split prefill and decode pools"
writes the scenario's ``pools`` section (a GPU type and TP per pool, ``model.split_pools``): the answer then
compares split pools on those GPUs with one pool.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from app_views.context import Context
from app_views.figures import Figures
from app_views.tables import fit_table
from app_views.text import plain
from capacity.answers.sentence import capacity_gap_rps, cost_per_million_output_tokens, cost_per_month, layout_words
from capacity.inputs import catalog
from capacity.planning.fleet import MODES, TENSOR_PARALLEL, fleet_options, layout_text, target_rps, tokens_per_day
from capacity.planning.sizing import ALL_MODES, allowed_layouts
from capacity.render.formatting import format_value

#: Ranked-table columns shown, with headers in words and units.
SHOWN = {"rank": "rank", "gpu": "GPU", "layout": "layout", "mode": "serving", "gpus": "GPUs",
         "replicas": "replicas", "cost_per_hour": "$ per hour", "cost_per_month": "$ per month",
         "cost_per_million_output": "$ per M output tokens", "tpot_at_design_s": "TPOT at peak",
         "ttft_at_design_s": "TTFT at peak", "meets_slo": "keeps promises", "pareto": "cheapest for its speed",
         "problem": "why not"}
MODE_COLOURS = {"colocated": "#2563eb", "chunked": "#f59e0b", "disaggregated": "#7c3aed", "split": "#059669"}


def _time(value: float) -> str:
    return format_value("decode_step_s", value) if isinstance(value, float) and math.isfinite(value) else "-"


def _money(value: float) -> str:
    return f"${value:,.3f}" if isinstance(value, float) and math.isfinite(value) else "-"


def ranked_table(table: pd.DataFrame, load_rps: float | None, output_tokens: float) -> pd.DataFrame:
    """The options as shown: formatted money and times, replicas as 'prefill + decode' for separate pools.

    Cost per million output tokens is the headline's definition (GPU cost over output tokens) at the entered load;
    ``load_rps`` None (concurrent users): each option's own, at the throughput its users generate.
    """
    shown = table.copy()
    texts = [layout_text(row) for row in shown.to_dict("records")]  # split pools: prefill GPU / decode GPU
    shown["gpu"] = [t[0] for t in texts]
    shown["layout"] = [t[1] for t in texts]
    cost = shown["cost_per_hour"].to_numpy(dtype=float)
    shown["cost_per_month"] = cost_per_month(cost)
    shown["cost_per_million_output"] = (shown["cost_per_million_tokens"].to_numpy(dtype=float) if load_rps is None
                                        else cost_per_million_output_tokens(cost, load_rps, output_tokens))
    pools = shown["mode"].isin(["disaggregated", "split"])
    shown["replicas"] = [f"{p:,.0f} + {d:,.0f}" if pool and math.isfinite(p + d) else
                         (f"{r:,.0f}" if isinstance(r, float) and math.isfinite(r) else "-")
                         for pool, p, d, r in zip(pools, shown["prefill_replicas"], shown["decode_replicas"],
                                                  shown["replicas"], strict=True)]
    shown["gpus"] = [f"{g:,.0f}" if isinstance(g, float) and math.isfinite(g) else "-" for g in shown["gpus"]]
    for key in ("cost_per_hour", "cost_per_million_output"):
        shown[key] = [_money(v) for v in shown[key]]
    shown["cost_per_month"] = [f"${v:,.0f}" if math.isfinite(v) else "-" for v in shown["cost_per_month"]]
    shown["problem"] = shown["problem"].fillna("")
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
    gap = capacity_gap_rps(results)
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


#: How the load can be entered: the unit on the selector -> (widget label, widget unit in requests/s or tokens/day).
LOAD_UNITS = {"requests/s": ("load (requests/s)", 1.0),
              "tokens/day": ("load (billion tokens/day, input + output)", 1e9)}


def _on_load(unit: str) -> None:
    """The load typed in the Fleet view becomes the scenario's arrival rate (the one load every view sizes for)."""
    from app_views import sidebar

    entered = float(st.session_state["fleet_load"]) * LOAD_UNITS[unit][1]
    w = sidebar.doc().get("workload") or {}
    try:
        rps = target_rps(entered, None) if unit == "requests/s" else target_rps(
            None, entered, float(w.get("prompt_tokens", 0) or 0), float(w.get("output_tokens", 0) or 0))
    except ValueError as exc:
        sidebar._messages()["arrival_rate"] = [str(exc)]
        return
    st.session_state["arrival_rate"] = rps
    sidebar.on_field("arrival_rate")


def load_input(st_: Any, ctx: Context) -> None:
    """The load in requests/s or tokens/day: either way it sets ``workload.arrival_rate`` (the sidebar's load)."""
    c1, c2 = st_.columns([1, 2])
    unit = c1.radio("enter the load in", list(LOAD_UNITS), horizontal=True, key="fleet_load_unit")
    label, scale = LOAD_UNITS[unit]
    w = ctx.results.scenario.workload
    rps = ctx.load_rps or 0.0
    shown = rps if unit == "requests/s" else tokens_per_day(rps, w.prompt_tokens, w.output_tokens) / scale
    if st.session_state.get("fleet_load") != shown:
        st.session_state["fleet_load"] = shown
    c2.number_input(label, 0.0, 1e9, key="fleet_load", format="%.2f" if unit == "requests/s" else "%.3f",
                    on_change=_on_load, args=(unit,),
                    help="sets the load under Workload in the sidebar; tokens/day = requests/s x 86,400 x "
                         "(prompt + answer tokens)")


#: The split-pool controls: widget key -> (pool, what it sets).
SPLIT_KEYS = {"split_prefill_gpu": ("prefill", "name"), "split_prefill_tp": ("prefill", "count"),
              "split_decode_gpu": ("decode", "name"), "split_decode_tp": ("decode", "count")}


def pools_section(on: bool, values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scenario's ``pools`` section the split controls describe (``model.split_pools``): each pool's GPU type
    and tensor-parallel size, one worker each (the answer sizes the replicas for the load); None when off."""
    if not on:
        return None
    return {pool: {"gpu": {"name": str(values[f"split_{pool}_gpu"]), "count": int(values[f"split_{pool}_tp"])}}
            for pool in ("prefill", "decode")}


def _on_split() -> None:
    """The split controls write the scenario's ``pools`` section (or remove it): the one sizing every view renders."""
    from app_views import sidebar

    if "doc" not in st.session_state:  # a view rendered alone (tests): nothing to write to
        return
    d = sidebar.doc()
    section = pools_section(bool(st.session_state.get("fleet_split")),
                            {k: st.session_state.get(k) for k in SPLIT_KEYS})
    if section is None:
        d.pop("pools", None)
    else:
        d["pools"] = section
    sidebar.sync()


def split_input(st_: Any, ctx: Context) -> None:
    """Split prefill and decode pools, each with its own GPU type and tensor parallel (the ``pools`` section)."""
    pools = ctx.doc.get("pools") if isinstance(ctx.doc.get("pools"), Mapping) else None
    gpu = ctx.doc.get("gpu")
    own = (gpu.get("name") if isinstance(gpu, Mapping) else gpu) or ""
    names = list(catalog.gpus())
    for key, (pool, part) in SPLIT_KEYS.items():
        spec = ((pools or {}).get(pool) or {}).get("gpu") or {}
        value = spec.get(part, own if part == "name" else 1)
        value = value if part != "name" or value in names else (names[0] if own not in names else own)
        if key not in st.session_state or pools is not None and st.session_state[key] != value:
            st.session_state[key] = value if part == "name" else int(value)
    if st.session_state.get("fleet_split") != (pools is not None):
        st.session_state["fleet_split"] = pools is not None
    st_.checkbox("Split prefill and decode pools, each on its own GPU", key="fleet_split", on_change=_on_split,
                 help="Prefill (prompts, TTFT) and decode (answers, TPOT) on separate pools, each its own GPU type "
                      "and tensor parallel, the KV cache moved between them (serving.kv_transfer_bandwidth). The "
                      "answer compares these pools, their TP sizes, with one pool; saved as the pools section.")
    if not st.session_state.get("fleet_split"):
        return
    c = st_.columns(4)
    c[0].selectbox("prefill GPU", names, key="split_prefill_gpu", on_change=_on_split)
    c[1].number_input("prefill tensor parallel", 1, 1024, key="split_prefill_tp", on_change=_on_split)
    c[2].selectbox("decode GPU", names, key="split_decode_gpu", on_change=_on_split)
    c[3].number_input("decode tensor parallel", 1, 1024, key="split_decode_tp", on_change=_on_split)


@st.cache_data(show_spinner="Sizing every GPU option...", max_entries=32)
def cached_options(scenario_json: str, target: float, peak: float, headroom: float, gpus: tuple[str, ...],
                   tps: tuple[int, ...], modes: tuple[str, ...], users: float = 0.0) -> pd.DataFrame:
    """``fleet_options`` for ``target`` requests/s, or for ``users`` concurrent users where that is > 0."""
    load = {"users": users} if users else {"target": target}
    return fleet_options(json.loads(scenario_json), peak_factor=peak, headroom=headroom,
                         gpus=gpus or None, tensor_parallel=tps, modes=modes, **load)


def render(st_: Any, ctx: Context) -> pd.DataFrame | None:
    """The Fleet view for the entered load; returns the options table shown (None when there is none)."""
    results = ctx.results
    load_input(st_, ctx)
    split_input(st_, ctx)
    users = float(results.scenario.workload.concurrency or 0)
    if users:
        st_.caption(f"The load is {users:,.0f} concurrent users (sidebar): every option is sized for them, colocated "
                    "(the closed loop's model); entering requests/s here replaces them.")
    elif not ctx.load_rps:
        st_.info("Enter the load (requests/s or tokens/day) above, or under Workload in the sidebar, to size a "
                 "fleet for it.")
        return None
    d1, d2, d3 = st_.columns(3)
    gpu = ctx.doc.get("gpu")
    own = gpu.get("name") if isinstance(gpu, Mapping) else gpu
    names = list(catalog.gpus())
    gpus = d1.multiselect("GPU types (empty: this sizing's GPU)", names, default=[own] if own in names else [],
                          key="fleet_gpus")
    # By default the layouts the scenario allows, as the one answer compares them: the first option on this
    # sizing's GPU is then the headline's answer.
    allowed_modes, allowed_tps = allowed_layouts(results.scenario)
    # The choices start as the layouts the answer compares, and start again when those change (split pools on/off)
    if st.session_state.get("fleet_allowed") != (allowed_modes, allowed_tps) or "fleet_modes" not in st.session_state:
        st.session_state["fleet_allowed"] = (allowed_modes, allowed_tps)
        st.session_state["fleet_tp"], st.session_state["fleet_modes"] = list(allowed_tps), list(allowed_modes)
    tps = d2.multiselect("tensor parallel", sorted({*TENSOR_PARALLEL, *allowed_tps}), key="fleet_tp")
    modes = d3.multiselect("serving", list(ALL_MODES if "split" in allowed_modes else MODES), key="fleet_modes")
    if not tps or not modes:
        st_.info("Choose at least one tensor-parallel size and one serving mode.")
        return None
    try:
        table = cached_options(ctx.scenario_json, ctx.load_rps or 0.0, ctx.peak_factor, ctx.headroom, tuple(gpus),
                               tuple(tps), tuple(modes), users)
    except ValueError as exc:
        st_.error(plain(exc))
        return None
    output_tokens = results.scenario.workload.output_tokens
    ok = table[table["meets_slo"]]
    if ok.empty:
        st_.warning("No option keeps the promises at this load; loosen a promise or add GPU types.")
    else:
        best = ok.iloc[0]
        gpu_text, layout_short = layout_text(best)
        layout = f"{gpu_text} {layout_short}, {best['mode']}"
        z = ctx.sizing
        if z is not None and z.keeps_promises and z.gpus is not None and not users and gpus in ([own], []) and \
                tuple(tps) == tuple(allowed_tps) and tuple(modes) == tuple(allowed_modes):
            layout = layout_words(z)  # the one answer: the first option of the layouts it compares
        m = Figures(st_)
        m.metric("Cheapest that keeps the promises", f"{best['gpus']:,.0f} GPUs", help=layout)
        m.metric("Cost", f"${best['cost_per_hour']:,.2f} / hour")
        m.metric("Cost per month", f"${cost_per_month(best['cost_per_hour']):,.0f}")
        m.metric("$ per M output tokens at your load", _money(float(best["cost_per_million_tokens"]) if users
                                                                  else cost_per_million_output_tokens(
            best["cost_per_hour"], ctx.load_rps, output_tokens)))
        m.draw()
        st_.caption(f"{layout}: TPOT {_time(best['tpot_at_design_s'])} and TTFT {_time(best['ttft_at_design_s'])} "
                    f"at the peak load, {best['load_per_replica_rps']:,.2f} requests/s per replica.")
        st_.plotly_chart(pareto_chart(table, results.scenario.slo.tpot_s), width="stretch")
    fit_table(st_, ranked_table(table, None if users else ctx.load_rps, output_tokens))
    for line in win_back_lines(results):
        st_.markdown(f"- {line}")
    entered = f"{users:,.0f} concurrent users" if users else f"{ctx.load_rps:,.2f} requests/s"
    st_.caption(f"Every option is sized for the entered {entered} x peak factor "
                f"{ctx.peak_factor:g} with {ctx.headroom * 100:,.0f}% headroom (sidebar). Cost per million output "
                "tokens is the fleet's GPU cost over the output tokens of the entered load. Method: docs/fleet.md.")
    return table


__all__ = ["pareto_chart", "ranked_table", "render", "win_back_lines"]
