"""Streamlit sizing app: ``streamlit run app.py``. It renders the capacity library; it computes nothing itself."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import streamlit as st
import yaml

from app_views import charts
from app_views.fleet import render_fleet
from app_views.simulator import render_simulator, run_pair
from app_views.state import (
    BLOCK_SIZES,
    CUSTOM,
    DTYPES,
    FIELDS,
    KV_DTYPES,
    load_uploaded,
    presets,
    scenario_from_state,
    state_from_query,
    state_from_scenario,
)
from capacity import Scenario, ScenarioError, catalog
from capacity.compare import compare
from capacity.curves import balance_batch, decode_curve, load_curve
from capacity.files import safe_filename
from capacity.fleet import fleet_for_load, fleet_options
from capacity.formatting import SECTIONS, format_value
from capacity.pool_picture import pool_map
from capacity.report import report_for, to_csv, to_json
from capacity.units import format_bytes
from capacity.verdict import verdict
from capacity.xlsx import workbook_bytes

st.set_page_config(page_title="LLM serving capacity planner", layout="wide")


@st.cache_data(show_spinner=False, max_entries=256)
def evaluate(scenario_json: str):
    """Scenario JSON -> (Results, None) or (None, problems). Pure, so cached by its text."""
    try:
        return Scenario.from_dict(json.loads(scenario_json)).evaluate(), None
    except ScenarioError as exc:
        return None, exc.problems


@st.cache_data(show_spinner=False, max_entries=64)
def compare_table(scenario_json: str, gpus: tuple[str, ...], models: tuple[str, ...]) -> pd.DataFrame:
    return compare(json.loads(scenario_json), gpus, models)


PRESETS = st.cache_resource(presets)()
simulate_pair = st.cache_data(show_spinner=False, max_entries=32)(run_pair)
cached_fleet_options = st.cache_data(show_spinner="Sizing every GPU option...", max_entries=32)(fleet_options)


def report_downloads(where, results) -> None:
    """CSV, XLSX and JSON report buttons; each file is built only when its button is clicked."""
    name = results.scenario.name
    cols = where.columns(3)
    cols[0].download_button("Report (CSV)", lambda: to_csv(report_for(results)), safe_filename(name, ".csv"),
                            mime="text/csv")
    cols[1].download_button("Report (XLSX, live formulas)", lambda: workbook_bytes(report_for(results)),
                            safe_filename(name, ".xlsx"),
                            mime="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
    cols[2].download_button("Report (JSON)", lambda: to_json(report_for(results)), safe_filename(name, ".json"),
                            mime="application/json")


def apply_state(state: dict) -> None:
    for key, value in state.items():
        st.session_state[key] = value


def on_preset() -> None:
    path = PRESETS[st.session_state["preset"]]
    apply_state(state_from_scenario(yaml.safe_load(path.read_text(encoding="utf-8"))))


# First run: the URL query string (a shared link) wins over the first preset.
if "initialised" not in st.session_state:
    st.session_state["preset"] = next(iter(PRESETS))
    on_preset()
    apply_state(state_from_query(dict(st.query_params)))
    st.session_state["initialised"] = True

# Streamlit forgets the value of a widget that was not drawn in the last run (custom-model fields while a
# catalog model is chosen); put those values back so switching to "custom" shows the preset's numbers.
for _key, _value in st.session_state.get("last_state", {}).items():
    if _key not in st.session_state:
        st.session_state[_key] = _value

# ---------------------------------------------------------------- sidebar: inputs
sb = st.sidebar
sb.title("Sizing inputs")
sb.selectbox("Preset scenario", list(PRESETS), key="preset", on_change=on_preset)
sb.radio("Byte units", ["GB", "GiB"], key="units", horizontal=True,
         help="GB = 10^9 bytes, GiB = 2^30 bytes; memory inputs and results use this unit")
unit = st.session_state["units"]

sb.subheader("Model")
sb.selectbox("Model", [*catalog.models(), CUSTOM], key="model")
if st.session_state["model"] == CUSTOM:
    c1, c2, c3 = sb.columns(3)
    c1.number_input("layers", 1, 1000, key="layers")
    c2.number_input("KV heads", 1, 1024, key="kv_heads")
    c3.number_input("head dim", 1, 4096, key="head_dim")
    sb.number_input("parameters (billions)", 0.01, 10_000.0, key="params_b", format="%.3f")
c1, c2 = sb.columns(2)
c1.selectbox("weight dtype", DTYPES, key="weight_dtype")
c2.selectbox("KV dtype", KV_DTYPES, key="kv_dtype")
sb.number_input(f"weights ({unit}, 0 = parameters x dtype)", 0.0, 100_000.0, key="weights_mem", format="%.2f")
if st.session_state["model"] == CUSTOM:
    sb.text_area("or paste a Hugging Face config.json (max 200 kB)", key="config_json", height=80,
                 help="layers, heads, KV heads, head_dim, MLA, sliding windows and MoE are read from it; "
                      "parameters are counted from its shapes")
messages = {"model": sb.container()}

sb.subheader("GPU")
sb.selectbox("GPU", [*catalog.gpus(), CUSTOM], key="gpu")
if st.session_state["gpu"] == CUSTOM:
    sb.number_input(f"memory ({unit})", 0.1, 10_000.0, key="memory_mem")
    c1, c2 = sb.columns(2)
    c1.number_input("bandwidth (TB/s)", 0.01, 100.0, key="bandwidth_tbs")
    c2.number_input("FLOP/s (TFLOP/s)", 0.1, 100_000.0, key="tflops")
c1, c2, c3 = sb.columns(3)
c1.number_input("tensor parallel GPUs", 1, 64, key="gpu_count")
c2.number_input("pipeline stages", 1, 64, key="pipeline_parallel")
c3.number_input("replicas", 1, 100_000, key="replicas")
c1, c2 = sb.columns(2)
c2.number_input("price ($ per GPU-hour, assumption)", 0.0, 1000.0, key="price_per_hour", format="%.2f")
c1, c2 = sb.columns(2)
c1.slider("bandwidth efficiency", 0.05, 1.0, key="bandwidth_efficiency", step=0.01)
c2.slider("FLOP/s efficiency", 0.05, 1.0, key="flops_efficiency", step=0.01)
messages["gpu"] = sb.container()

sb.subheader("Serving engine")
sb.slider("memory utilisation", 0.10, 1.00, key="memory_utilization", step=0.01)
c1, c2 = sb.columns(2)
c1.selectbox("block size (tokens)", BLOCK_SIZES, key="block_size")
c2.number_input("max model length (tokens)", 1, 10_000_000, key="max_model_len")
c1, c2 = sb.columns(2)
c1.number_input("overhead per step (ms)", 0.0, 1000.0, key="step_overhead_ms")
c2.number_input("max running sequences (0 = none)", 0, 1_000_000, key="max_num_seqs")
sb.number_input(f"engine reserve per GPU ({unit}): activations, CUDA graphs", 0.0, 10_000.0, key="reserve_mem",
                format="%.2f", help="memory the engine holds outside the KV pool (vLLM logs it at start-up)")
messages["serving"] = sb.container()

sb.subheader("Workload")
c1, c2 = sb.columns(2)
c1.number_input("prompt (tokens)", 1, 10_000_000, key="prompt_tokens")
c2.number_input("answer (tokens)", 1, 10_000_000, key="output_tokens")
c1, c2 = sb.columns(2)
c1.number_input("shared prefix (tokens)", 0, 10_000_000, key="shared_prefix_tokens")
c2.number_input("arrival rate (requests/s, 0 = none)", 0.0, 1e6, key="arrival_rate", format="%.2f")
messages["workload"] = sb.container()

sb.subheader("Promises")
c1, c2 = sb.columns(2)
c1.number_input("TPOT promise (ms, 0 = none)", 0.0, 1e6, key="tpot_ms")
c2.number_input("TTFT promise (ms, 0 = none)", 0.0, 1e7, key="ttft_ms")
messages["slo"] = sb.container()

state = {key: st.session_state[key] for key in FIELDS}
st.session_state["last_state"] = state
st.query_params.from_dict({key: str(value) for key, value in state.items()})
try:
    scenario_dict = scenario_from_state({**state, "config_json": st.session_state.get("config_json", "")},
                                        name=st.session_state["preset"])
except ScenarioError as exc:
    for problem in exc.problems:
        messages["model"].error(problem)
    st.stop()
scenario_json = json.dumps(scenario_dict, sort_keys=True)
scenario_yaml = yaml.safe_dump(scenario_dict, sort_keys=False)

sb.subheader("Save and load")
sb.download_button("Save scenario (YAML)", scenario_yaml, file_name=safe_filename(st.session_state["preset"], ".yaml"),
                   mime="application/x-yaml")
upload = sb.file_uploader("Load scenario (YAML, max 1 MB)", type=["yaml", "yml"])
if upload is not None and st.session_state.get("loaded_upload") != upload.file_id:
    st.session_state["loaded_upload"] = upload.file_id
    try:
        if upload.size > 1_000_000:
            raise ScenarioError(f"{upload.name} is {upload.size:,} bytes; scenario files are limited to 1,000,000")
        apply_state(state_from_scenario(load_uploaded(upload.getvalue().decode("utf-8", errors="replace"))))
        st.rerun()
    except (ScenarioError, ValueError, TypeError, KeyError) as exc:
        sb.error(f"Could not load {upload.name}: {exc}")

# ---------------------------------------------------------------- main area
st.title("LLM serving capacity planner")
results, problems = evaluate(scenario_json)
if problems:
    # Each problem is shown under the inputs it names, and all of them here.
    for problem in problems:
        section = problem.split(".", 1)[0] if problem.split(".", 1)[0] in messages else (
            "gpu" if "weights" in problem else "serving")
        messages[section].error(problem)
    st.error("This scenario cannot be evaluated:\n\n" + "\n".join(f"- {p}" for p in problems))
    st.stop()

s, r = results.scenario, results
binary = unit == "GiB"


def show(key: str) -> str:
    return format_value(key, r[key], binary)


st.caption(f"{s.model.name} ({s.model.weight_dtype} weights, {s.model.kv_dtype} KV) on {s.gpu.count} x {s.gpu.name}"
           f" - bandwidth {s.gpu.effective_bandwidth / 1e12:,.2f} TB/s and {s.gpu.effective_flops / 1e12:,.0f}"
           f" TFLOP/s effective per GPU; units: {unit}")
cols = st.columns(6)
cols[0].metric("Requests that fit", f"{r['batch_max']:,.0f}", help="largest decode batch: KV pool, prefix sharing "
               "and max_num_seqs")
cols[1].metric("Decode step at that batch", show("decode_step_s"))
cols[2].metric("Ceiling", f"{r['ceiling_rps']:,.2f} req/s")
cols[3].metric("Goodput under promises", f"{r['goodput_rps']:,.2f} req/s", help=f"limited by {r['goodput_limit']}")
cols[4].metric("TPOT at goodput", show("tpot_at_goodput_s"))
cols[5].metric("Cost per M output tokens", show("cost_per_million_tokens"))

st.subheader("Verdict")
for line in verdict(r):
    st.markdown(f"- {line}")
for note in r.notes():
    st.caption(f"Note: {note}")
report_downloads(st, r)

# One view at a time: only the chosen view's charts are built, so a rerun stays fast as views grow.
VIEWS = ["Memory", "Roofline", "Promise", "Cost", "Fleet", "Compare", "Simulator", "All numbers"]
if st.session_state.get("view") not in VIEWS:
    st.session_state["view"] = VIEWS[0]
view = st.segmented_control("View", VIEWS, key="view", label_visibility="collapsed") or VIEWS[0]

if view == "Memory":
    div = 2**30 if binary else 1e9
    used = s.gpu.memory_bytes * s.serving.memory_utilization
    c = st.columns(4)
    c[0].metric("KV per token", format_bytes(r["kv_bytes_per_token"], binary))
    c[1].metric("KV pool per GPU", show("pool_bytes"), help=f"{r['pool_blocks']:,.0f} blocks")
    c[2].metric("Blocks per request", f"{r['blocks_per_request']:,.0f}")
    c[3].metric("Paged vs contiguous", f"{r['max_requests_paged'] / max(r['max_requests_contiguous'], 1):,.1f}x")
    left, right = st.columns(2)
    left.plotly_chart(charts.memory_bar({
        "weights": r["weight_bytes_per_gpu"] / div, "engine reserve": s.serving.reserved_bytes / div,
        "KV pool": max(r["pool_bytes"], 0) / div,
        "left free (1 - utilisation)": (s.gpu.memory_bytes - used) / div}, unit), width="stretch")
    right.plotly_chart(charts.concurrency_bars({
        "contiguous": r["max_requests_contiguous"], "paged": r["max_requests_paged"],
        "shared prefix": r["max_requests_shared_prefix"]}), width="stretch")
    cells, per_cell, counts = pool_map(r)
    st.plotly_chart(charts.pool_grid(cells, per_cell), width="stretch")
    st.caption("Blocks by owner: " + ", ".join(f"{label} {n:,}" for label, n in counts.items()))

if view == "Roofline":
    c = st.columns(4)
    c[0].metric("Memory term", show("decode_memory_s"))
    c[1].metric("Compute term", show("decode_compute_s"))
    c[2].metric("Prefill", show("prefill_s"), help=f"{r['prefill_tokens']:,.0f} uncached prompt tokens")
    c[3].metric("Single stream", f"{r['single_stream_tokens_per_s']:,.0f} tokens/s")
    top = max(2.0, r["batch_max"] * 1.5)
    curve = decode_curve(r, np.unique(np.linspace(1, top, 200).round()))
    st.plotly_chart(charts.decode_chart(curve, r["batch_max"], balance_batch(r), r["goodput_in_flight"]),
                    width="stretch")
    st.caption(f"Prefill is compute-bound above {r['critical_batch']:,.0f} prompt tokens (critical batch "
               f"W·F / (2N·BW)); the decode step is {r['decode_bound']}-bound at the largest batch.")

if view == "Promise":
    c = st.columns(4)
    c[0].metric("Goodput", f"{r['goodput_rps']:,.2f} req/s", help=f"set by {r['goodput_limit']}")
    c[1].metric("In flight at goodput", f"{r['goodput_in_flight']:,.0f}")
    c[2].metric("Capacity the promise costs", f"{r['capacity_given_up'] * 100:,.1f}%")
    c[3].metric("TPOT at the ceiling", show("tpot_at_ceiling_s"))
    if r["ceiling_rps"] > 0:
        rates = np.linspace(0, r["ceiling_rps"] * 0.999, 300)
        st.plotly_chart(charts.load_chart(load_curve(r, rates), r["ceiling_rps"], r["goodput_rps"],
                                          s.slo.tpot_s * 1e3 if s.slo.tpot_s else None,
                                          s.slo.ttft_s * 1e3 if s.slo.ttft_s else None), width="stretch")
    if s.workload.arrival_rate:
        st.markdown(f"At the workload's {s.workload.arrival_rate:,.2f} requests/s ({r['load_fraction'] * 100:,.0f}% "
                    f"of the ceiling): TPOT {show('tpot_at_load_s')}, TTFT {show('ttft_at_load_s')}.")
    st.caption("TTFT model: the wait for the engine's next batched prefill pass plus that pass (validated against "
               "the simulator within 10% up to 80% of the ceiling; reads low near the ceiling, where requests also "
               "wait for KV memory).")

if view == "Cost":
    c = st.columns(3)
    c[0].metric("$ per M output tokens at goodput", show("cost_per_million_tokens"))
    c[1].metric("$ per M output tokens at ceiling", show("cost_per_million_tokens_at_ceiling"))
    c[2].metric("Output tokens/s at goodput", f"{r['output_tokens_per_s_at_goodput']:,.0f}")
    c1, c2, c3 = st.columns(3)
    target = c1.number_input("target load (requests/s)", 0.0, 1e7, value=max(s.workload.arrival_rate or 0.0, 10.0))
    peak = c2.number_input("peak factor (sale day = 10)", 1.0, 1000.0, value=1.0)
    headroom = c3.slider("headroom", 0.0, 0.9, 0.2, 0.05)
    try:
        fleet = fleet_for_load(r, target, peak, headroom)
        cost = f"${fleet.cost_per_hour:,.2f} per hour" if fleet.cost_per_hour is not None else "no price set"
        st.success(f"{fleet.replicas:,} replicas = {fleet.gpus:,} GPUs for {fleet.design_load_rps:,.1f} requests/s "
                   f"({fleet.load_per_replica_rps:,.2f} per replica): {cost}.")
    except ValueError as exc:
        st.warning(str(exc))

if view == "Compare":
    c1, c2 = st.columns(2)
    choices = c1.multiselect("GPUs", list(catalog.gpus()), default=list(catalog.gpus())[:6])
    model_choices = c2.multiselect("models (empty: this scenario's model)", list(catalog.models()))
    table = compare_table(scenario_json, tuple(choices), tuple(model_choices))
    if len(table):
        st.plotly_chart(charts.compare_chart(table), width="stretch")
        shown = table.copy()
        for key in ("decode_step_s", "cost_per_million_tokens"):
            shown[key] = [format_value(key, v) if isinstance(v, float) else "" for v in shown[key]]
        st.dataframe(shown, hide_index=True, width="stretch")

if view == "Fleet":
    render_fleet(st, r, scenario_dict, cached_fleet_options)

if view == "Simulator":
    render_simulator(st, scenario_json, s.workload.arrival_rate or r["goodput_rps"] * 0.8, simulate_pair)

if view == "All numbers":
    rows = [{"section": sec, "quantity": key, "value": format_value(key, r[key], binary)}
            for sec, keys in SECTIONS.items() for key in keys]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=600)
