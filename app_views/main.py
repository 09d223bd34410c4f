"""The page: sidebar inputs -> one scenario mapping -> the library's results -> headline, verdict, one view.

Everything shown is the library's (``capacity``): this module arranges it and computes nothing.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import streamlit as st

from app_views import server, sidebar
from app_views.context import Context
from app_views.exports import render_downloads
from app_views.figures import figures_markdown
from app_views.state import humanise, link_params, section_of, sizing_name, to_yaml
from app_views.summary import cached_verdict
from app_views.text import plain
from app_views.views import VIEWS
from capacity import Scenario, ScenarioError
from capacity.answers.sentence import answer, binds, cautions, layout_words
from capacity.fileio.files import safe_filename
from capacity.planning.sizing import MODE_WORDS, Sizing, mode_rates, size
from capacity.planning.ways_forward import WayForward, ways_forward
from capacity.render.formatting import format_value
from capacity.runtime.budget import BudgetExceeded, time_budget

# What exists once the page's modules are imported (libraries, catalogs, presets) lives as long as the server: the
# garbage collector need not scan it again (``.streamlit/config.toml`` turns off the full pass after every run).
gc.freeze()

#: Time budget of one evaluation and of drawing one view [s] (``capacity.runtime.budget``): work estimated to take
#: longer
#: is refused before it starts, work that runs past it is stopped, so one session never holds a core for long.
#: A valid scenario evaluates in milliseconds and the heaviest view (Fleet) in about a second.
BUDGET_S = 5.0


@st.cache_resource(show_spinner=False, max_entries=256)
def evaluate(scenario_json: str) -> tuple[Any, list[str] | None]:
    """Scenario JSON -> (Results, None) or (None, problems). Pure, so cached by its text (never mutated).

    Runs under ``BUDGET_S``; a budget overrun raises (``BudgetExceeded``) rather than being cached as an answer.
    """
    try:
        with time_budget(BUDGET_S):
            return Scenario.from_dict(json.loads(scenario_json)).evaluate(), None
    except BudgetExceeded:
        raise
    except ScenarioError as exc:
        return None, list(exc.problems)


@st.cache_resource(show_spinner=False, max_entries=256)
def answer_of(scenario_json: str, _results: Any) -> Sizing:
    """The one answer (``capacity.planning.sizing.size``) of the sizing ``scenario_json`` (Results: ``_results``)."""
    with time_budget(BUDGET_S):
        return size(_results.scenario, _results)


def _money(value: float | None, digits: int = 2) -> str:
    return "no price set" if value is None or value != value else f"${value:,.{digits}f}"


def headline(results: Any, ctx: Context) -> None:
    """The one-sentence answer and seven figures, all from the one answer (``ctx.sizing``)."""
    z = ctx.sizing
    rep = z.replica  # one replica of the layout chosen, at the load it carries
    basis = "" if z.goodput_basis == "mean" else f" at {z.goodput_basis}"
    st.markdown(f"#### {plain(answer(z))}")
    gpus = z.gpus if z.gpus is not None else z.gpus_per_replica
    at_load = bool(z.load_rps and z.replicas)
    tpot = z.tpot_at_percentile_s if z.tpot_at_percentile_s is not None else z.tpot_at_load_s
    st.markdown(figures_markdown([
        ("GPUs", f"{gpus:,}", f"{layout_words(z)}" if z.replicas else "no layout serves the load"),
        ("Requests that fit", f"{rep['batch_max']:,.0f}", "per replica: KV pool, shared prefix, running cap"),
        ("Ceiling", f"{mode_rates(rep, z.mode)[0]:,.2f} req/s", f"per replica ({MODE_WORDS[z.mode]})"),
        ("Goodput under promises", f"{z.replica_goodput_rps:,.2f} req/s", f"per replica{basis}; set by {binds(z)}"),
        (f"TPOT{basis} at {'your load' if at_load else 'goodput'}", format_value("tpot_at_load_s", tpot),
         f"each replica at {z.load_per_replica_rps:,.2f} req/s" if at_load else "per output token at the goodput"),
        ("$ per M output tokens", _money(z.cost_per_million_tokens, 3),
         "fleet cost over the output tokens of your load" if at_load else "GPU cost over the tokens at the goodput"),
        ("Monthly cost", _money(z.cost_per_month, 0),
         f"{gpus:,} GPU{'' if gpus == 1 else 's'} x ${z.price_per_gpu_hour:,.2f}/GPU-hour "
         f"({z.price_source.split(' (')[0]}) x 730 h" if z.price_per_gpu_hour is not None else "no GPU price set"),
    ]))
    if z.reasons:
        st.info(plain(" ".join(r[0].upper() + r[1:] + "." for r in z.reasons)))


@st.cache_data(show_spinner="Looking for a layout that fits...", max_entries=64)
def cached_ways(scenario_json: str) -> list[WayForward]:
    with time_budget(BUDGET_S):
        return ways_forward(json.loads(scenario_json))


#: Scenario paths a way forward changes -> the sidebar field that holds each.
WAY_FIELDS = {("gpu", "name"): "gpu", ("gpu", "count"): "gpu_count", ("model", "weight_dtype"): "weight_dtype",
              ("model", "kv_dtype"): "kv_dtype"}


def apply_way(changes: tuple) -> None:
    """Set each changed field as if the user had chosen it in the sidebar (a GPU first: the count is kept)."""
    for (path, value) in sorted(changes, key=lambda change: change[0] != ("gpu", "name")):
        key = WAY_FIELDS[path]
        st.session_state[key] = value
        if key == "gpu":
            sidebar.on_choice("gpu")
        else:
            sidebar.on_field(key)


def ways_forward_buttons(scenario_json: str) -> None:
    """Instead of a dead end: the evaluated changes that would serve this sizing, as buttons."""
    try:
        ways = cached_ways(scenario_json)
    except BudgetExceeded:
        return
    if not ways:
        return
    st.markdown("**What would fit** (each evaluated; one click applies it):")
    columns = st.columns(len(ways))
    for i, (column, way) in enumerate(zip(columns, ways, strict=True)):
        price = f", ${way.cost_per_hour:,.2f}/h per replica" if way.cost_per_hour is not None else ""
        column.button(f"Use {way.label}", key=f"way_forward_{i}", on_click=apply_way, args=(way.changes,),
                      help=f"{way.gpus_per_replica} GPUs per replica, {way.requests_fit:,.0f} requests fit at once"
                           f"{price}")


def main() -> None:
    """One rerun. The headline goes out first: its figures reach the browser (and are drawn) before the ~40
    sidebar widgets and the view, which the browser takes much longer to redraw than the script to send."""
    st.set_page_config(page_title="LLM serving capacity planner", layout="wide")
    server.note_session()  # its end hands its memory back; warnings kept out of the server's log (app_views.server)
    if "doc" not in st.session_state:
        sidebar.start(dict(st.query_params))
    doc = sidebar.doc()  # the widgets' callbacks ran before this script: the mapping is this rerun's sizing
    view_from_link = st.session_state.pop("view_from_link", None)
    if view_from_link in VIEWS:
        st.session_state["view"] = view_from_link
    elif view_from_link:
        sidebar._messages().setdefault("link", []).append(
            f"view {view_from_link!r} from the link is not one of {', '.join(VIEWS)}")
    if st.session_state.get("view") not in VIEWS:
        st.session_state["view"] = next(iter(VIEWS))
    scenario_json = json.dumps(sidebar.scenario_doc(), sort_keys=True, default=str)  # with each value's source
    name = str(doc.get("name") or "sizing")

    st.title("LLM serving capacity planner")
    for text in sidebar._messages().get("link", []):
        st.warning(plain(text))
    sidebar.notice(st)  # the values the user did not set, named where they look (issue 27)
    try:
        results, problems = evaluate(scenario_json)
    except BudgetExceeded as exc:
        results, problems = None, list(exc.problems)
    ctx = None
    if not problems:
        try:
            sizing = answer_of(scenario_json, results)
        except BudgetExceeded as exc:
            problems = list(exc.problems)
    if not problems:
        s = results.scenario
        ctx = Context(results=results, doc=doc, scenario_json=scenario_json, unit=s.units,
                      headroom=s.fleet.headroom, peak_factor=s.fleet.peak_factor, sizing=sizing)
        named = "" if name == sizing_name(doc) else f"{name}: "  # an automatic name would repeat the line
        st.caption(plain(f"{named}{s.model.name} ({s.model.weight_dtype} weights, {s.model.kv_dtype} KV) on "
                         f"{s.gpu.gpus_per_replica} x {s.gpu.name}, bandwidth "
                         f"{s.gpu.effective_bandwidth / 1e12:,.2f} TB/s and {s.gpu.effective_flops / 1e12:,.0f} "
                         f"TFLOP/s effective per GPU; memory in {s.units}"))
        headline(results, ctx)

    shown = [humanise(p) for p in problems or []]
    by_section: dict[str, list[str]] = {}
    for problem, text in zip(problems or [], shown, strict=True):
        by_section.setdefault(section_of(problem), []).append(text)
    sidebar.draw(by_section)
    sb = st.sidebar
    sb.subheader("Save and load")
    sb.download_button("Save scenario (YAML)", to_yaml(doc), file_name=safe_filename(name, ".yaml"),
                       mime="application/x-yaml", width="stretch", on_click="ignore")  # a save changes nothing
    sb.file_uploader("Load scenario (YAML, max 1 MB)", type=["yaml", "yml"], key="upload",
                     on_change=sidebar.on_upload)
    sb.caption("The page's address is a share link: it carries this sizing and the open view.")
    params = link_params(doc, st.session_state["view"])
    if params != st.query_params.to_dict():
        st.query_params.from_dict(params)

    if ctx is None:
        st.error(plain("This sizing cannot be evaluated:\n" + "\n".join(f"• {p}" for p in shown)))
        ways_forward_buttons(scenario_json)
        return
    for line in cautions(results):
        st.warning(plain(line))
    if st.session_state["view"] != "Summary":  # the Summary view shows the verdict and notes itself
        verdict_box = st.expander("Verdict: what binds and what would move it", key="verdict_open",
                                  on_change="rerun")
        if verdict_box.open:  # its what-ifs are evaluated (and its lines drawn) only when someone opens it
            verdict_box.markdown("\n".join(f"- {plain(humanise(line))}"
                                           for line in cached_verdict(scenario_json, ctx.sizing or results)))
            notes = ctx.sizing.notes()
            if notes:  # one element for all: every element is redrawn on every rerun
                verdict_box.caption("  \n".join(plain(f"Note: {humanise(note)}") for note in notes))
    render_downloads(st, results, name)
    view = st.segmented_control("View", list(VIEWS), key="view", label_visibility="collapsed") or next(iter(VIEWS))
    try:
        with time_budget(BUDGET_S):
            VIEWS[view](st, ctx)
    except BudgetExceeded as exc:
        st.error(plain(f"The {view} view was stopped: " + "; ".join(exc.problems)))
