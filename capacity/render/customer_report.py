"""The customer report: one self-contained HTML file (prints to PDF) that answers the sizing question.

``customer_report_html(results)`` renders, for one evaluated scenario:

* the one-sentence answer (``fleet_answer.fleet_answer``) and the fleet for the scenario's arrival rate (GPUs, replicas,
  $/hour, $/month, $ per million output tokens; ``fleet.fleet_for_load``);
* the verdict, what binds and what would move it (``verdict.verdict``);
* three charts: where one GPU's memory goes, latency against load with the promises, and the cheapest
  option per GPU type at the load (``fleet.fleet_options``);
* the engine's own flags for the sizing (``engine_flags``);
* every input in human units with its source, every result, every assumption with its source (catalog
  figures and their URLs, efficiencies, engine defaults, prices with the date they were read), and the
  planner's published accuracy (``FIDELITY``, from docs/fidelity.md).

The file needs no network: plotly.js is inlined once (``plotly.offline.get_plotlyjs``) and each chart is a
plain figure dict drawn by ``Plotly.newPlot``. Every key number is an element with ``data-key`` (``result:``,
``input:``, ``fleet:`` or ``flag:`` and the name) and ``data-value`` (the exact value in base units), so a
test, or a script, reads the numbers back and compares them with the library.

This module renders only: every number comes from a library function.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from capacity.answers.fleet_answer import HOURS_PER_MONTH, FleetAnswer, display_name, fleet_answer
from capacity.answers.verdict import verdict
from capacity.errors import ScenarioError
from capacity.inputs import catalog
from capacity.model.analysis import INPUTS, RESULTS
from capacity.model.scenario import Results
from capacity.planning.sizing import MODE_WORDS, allowed_layouts, latency_curve, layout_label, mode_rates
from capacity.render.engine_flags import ENGINES, EngineSettings, model_id, scenario_engine, sizing_settings
from capacity.render.formatting import SECTIONS, format_value, human_number, human_unit
from capacity.render.glossary import in_words, value_in_words
from capacity.render.report import Report, build_report, scenario_mapping
from capacity.render.ticks import linear_ticks, log_ticks

#: The planner's published accuracy, as docs/fidelity.md ("In one paragraph") and the README state it;
#: tests/render/test_customer_report.py checks that the document still says so.
FIDELITY = {
    "measurements": 96, "engine_points": 89, "engine_mape_percent": 15.9, "engine_loso_mape_percent": 17.2,
    "no_engine_mape_percent": 46.9,
    "points": 28, "first_measurements": 41, "mape_percent": 28.7, "latency_mape_percent": 18.2,
    "single_stream_mape_percent": 27.3, "throughput_mape_percent": 32.3, "median_percent": 21,
    "within_20_percent": 14,
    "source": "docs/fidelity.md and README.md, 'How accurate is it?'; measurements in validation/measurements.yaml",
}

#: Chart size [px]: fixed, so a chart prints the same as it shows and fits an A4 page (about 680 px wide).
PLOT_WIDTH, PLOT_HEIGHT = 660, 300


@dataclass(frozen=True, slots=True)
class CustomerReport:
    """What the HTML shows, computed once: results, the answer, the report (inputs, assumptions), engines."""

    results: Results
    answer: FleetAnswer
    report: Report
    engines: tuple[EngineSettings, ...]
    fleet_table: Any  # pandas.DataFrame of fleet_options, or None without a load


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _exact(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    number = float(value)  # type: ignore[arg-type]
    return repr(number) if math.isfinite(number) else ("inf" if number > 0 else ("-inf" if number < 0 else "nan"))


def num(key: str, value: object, shown: str) -> str:
    """A number the reader sees as ``shown``, carrying ``data-key`` and its exact ``data-value``."""
    return f'<span class="num" data-key="{_e(key)}" data-value="{_e(_exact(value))}">{_e(shown)}</span>'


def _money(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"${value:,.{digits}f}" if value < 1000 else f"${value:,.0f}"


def human_input(value: float | None, unit: str, binary: bool) -> str:
    """An input in its human unit: 80e9 B -> '80 GB', 0.003 s -> '3 ms', 2e12 B/s -> '2,000 GB/s'."""
    if value is None or not math.isfinite(value):
        return "not set"
    name, factor = human_unit(unit, binary)
    shown = human_number(value / factor) if factor != 1 or not float(value).is_integer() else value
    text = f"{shown:,.0f}" if float(shown).is_integer() else f"{shown:,}"
    return text if name in ("-", "") else f"{text} {name}"


# --- building -----------------------------------------------------------------------------------------------------

def build(results: Results, target_rps: float | None = None, peak_factor: float | None = None,
          headroom: float | None = None,
          date: str | None = None, compare_gpus: Iterable[str] | None = None) -> CustomerReport:
    """Everything the HTML needs. ``target_rps`` defaults to the scenario's arrival rate; ``compare_gpus``
    (catalog names, default the data-center GPUs: ``catalog.customer_gpus``) are sized beside the scenario's own GPU
    in the fleet chart."""
    from capacity.planning.fleet import fleet_options

    found = fleet_answer(results, target_rps, peak_factor, headroom)
    sizing = found.sizing
    modes, tps = allowed_layouts(sizing.scenario)
    first = scenario_engine(results)
    # The engines' flags for the answer's layout (its TP, mode and replicas; two pools: two commands each).
    engines = tuple(settings for name in [first, *[e for e in ENGINES if e != first]]
                    for settings in sizing_settings(sizing, name))
    table = None
    if found.load_rps:  # other layouts and GPU types may serve the load even where this one does not
        mapping = scenario_mapping(results.scenario)
        plan = {"peak_factor": sizing.peak_factor, "headroom": sizing.headroom}
        # A closed loop compares the fleets for its users; an open one for its arrival rate.
        load = {"users": sizing.users} if sizing.users else {"target": found.load_rps}
        own = fleet_options(mapping, tensor_parallel=tps, modes=modes, **load, **plan)
        own["gpu"] = display_name("gpu", results.scenario.gpu.name) + " (this scenario)"
        names = [name for name in (catalog.customer_gpus() if compare_gpus is None else compare_gpus)
                 if name != results.scenario.gpu.name]
        others = fleet_options(mapping, gpus=names, **load, **plan) if names else None
        import pandas as pd

        table = pd.concat([own, others], ignore_index=True) if others is not None else own
    return CustomerReport(results, found, build_report(results, date, sizing), engines, table)


# --- charts (plain plotly figure dicts) ---------------------------------------------------------------------------

def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    base = {"title": {"text": title, "font": {"size": 14}}, "xaxis": {"title": {"text": x}},
            "yaxis": {"title": {"text": y}}, "width": PLOT_WIDTH, "height": PLOT_HEIGHT,
            "margin": {"l": 60, "r": 60, "t": 40, "b": 50}, "legend": {"orientation": "h", "y": -0.3},
            "paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"family": "Helvetica, Arial, sans-serif"}}
    return {**base, **extra}


def memory_figure(results: Results) -> dict[str, Any]:
    """One GPU's memory, stacked: weights, engine reserves, KV pool, held back (1 - memory_utilization)."""
    s = results.scenario
    binary = s.units == "GiB"
    unit, factor = human_unit("B", binary)
    parts = {"weights": results["weight_bytes_per_gpu"], "engine reserves": s.serving.reserved_bytes,
             "KV cache pool": results["pool_bytes"],
             "held back": s.gpu.memory_bytes * (1 - s.serving.memory_utilization)}
    colours = {"weights": "#64748b", "engine reserves": "#f59e0b", "KV cache pool": "#2563eb", "held back": "#e5e7eb"}
    data = [{"type": "bar", "orientation": "h", "name": name, "y": ["one GPU"], "x": [value / factor],
             "marker": {"color": colours[name]}, "text": [f"{value / factor:,.1f} {unit}"], "textposition": "inside",
             "hovertemplate": f"{name}: %{{x:,.2f}} {unit}<extra></extra>"}
            for name, value in parts.items() if value > 0]
    return {"data": data, "layout": _layout(f"Where one GPU's memory goes ({s.gpu.memory_bytes / factor:,.1f} {unit})",
                                            unit, "", barmode="stack", height=230,
                                            legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0,
                                                    "traceorder": "normal"},
                                            margin={"l": 70, "r": 20, "t": 70, "b": 45})}


def load_figure(results: Results, load_per_replica: float | None, mode: str = "colocated") -> dict[str, Any]:
    """TPOT and TTFT of one replica (in serving ``mode``) against its arrival rate, with the promises, goodput,
    ceiling and the load each replica carries (``sizing.latency_curve``: the answer's own latencies at a load)."""
    s = results.scenario
    ceiling, goodput = mode_rates(results, mode)
    curve = latency_curve(s, mode, np.linspace(0.0, ceiling, 121)[1:-1])
    tpot = np.where(np.isfinite(curve["tpot_s"]), curve["tpot_s"] * 1e3, None)
    ttft = np.where(np.isfinite(curve["ttft_s"]), curve["ttft_s"] * 1e3, None)
    data = [{"type": "scatter", "mode": "lines", "name": "TPOT (ms)", "x": curve["rate_rps"].tolist(),
             "y": tpot.tolist(), "line": {"color": "#2563eb"}},
            {"type": "scatter", "mode": "lines", "name": "TTFT (ms, right axis)", "x": curve["rate_rps"].tolist(),
             "y": ttft.tolist(), "yaxis": "y2", "line": {"color": "#9333ea"}}]
    shapes, notes = [], []

    def vline(x: float, colour: str, label: str, dash: str = "dash") -> None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                       "line": {"color": colour, "dash": dash, "width": 1.5}})
        row = sum(1 for n in notes if n["yref"] == "paper")
        notes.append({"x": x, "xref": "x", "yref": "paper", "y": 1.0 + 0.075 * row, "yanchor": "bottom",
                      "text": label, "showarrow": False, "font": {"size": 10, "color": colour}})

    def hline(y: float, colour: str, label: str, axis: str) -> None:
        shapes.append({"type": "line", "xref": "paper", "yref": axis, "x0": 0, "x1": 1, "y0": y, "y1": y,
                       "line": {"color": colour, "dash": "dot", "width": 1.5}})
        left = axis == "y"
        notes.append({"x": 0.01 if left else 0.99, "xref": "paper", "yref": axis, "y": y, "text": label,
                      "showarrow": False, "xanchor": "left" if left else "right", "yanchor": "bottom",
                      "font": {"size": 10, "color": colour}})

    vline(ceiling, "#111827", f"ceiling {ceiling:,.2f}", "solid")
    if 0 < goodput < ceiling:
        vline(goodput, "#16a34a", f"goodput {goodput:,.2f}")
    if load_per_replica:
        vline(load_per_replica, "#dc2626", f"your load {load_per_replica:,.2f}")
    if s.slo.tpot_s is not None:
        hline(s.slo.tpot_s * 1e3, "#2563eb", f"TPOT promise {s.slo.tpot_s * 1e3:,.0f} ms", "y")
    if s.slo.ttft_s is not None:
        hline(s.slo.ttft_s * 1e3, "#9333ea", f"TTFT promise {s.slo.ttft_s * 1e3:,.0f} ms", "y2")
    return {"data": data, "layout": _layout(
        f"Latency of one replica ({MODE_WORDS[mode]}) against its load", "arrival rate per replica (requests/s)",
        "TPOT (ms)",
        yaxis={"title": {"text": "TPOT"}, "rangemode": "tozero",
               **linear_ticks([*(t for t in tpot if t is not None), (s.slo.tpot_s or 0.0) * 1e3], "ms")},
        yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "title": {"text": "TTFT"},
                **linear_ticks([*(t for t in ttft if t is not None), (s.slo.ttft_s or 0.0) * 1e3], "ms")},
        shapes=shapes, annotations=notes, height=340, margin={"l": 60, "r": 60, "t": 85, "b": 50})}


def cheapest_per_gpu(table: Any) -> Any:
    """The cheapest option that keeps the promises for each GPU type (rows of ``fleet_options``, ranked)."""
    ok = table[table["meets_slo"].astype(bool)]
    key = "cost_per_hour" if ok["cost_per_hour"].notna().any() else "gpus"
    return ok.sort_values([key, "gpus"], kind="mergesort").drop_duplicates("gpu").reset_index(drop=True)


def fleet_figure(table: Any) -> dict[str, Any] | None:
    """Bars: the cheapest option per GPU type at the load, $/month (GPUs when no price), labelled with the layout."""
    best = cheapest_per_gpu(table)
    if best.empty:
        return None
    priced = best["cost_per_hour"].notna().all()
    values = (best["cost_per_hour"] * HOURS_PER_MONTH if priced else best["gpus"]).tolist()
    labels = [f"{int(g):,} GPU{'s' if g != 1 else ''}, TP{int(tp)}, {MODE_WORDS.get(mode, mode)}" for g, tp, mode in
              zip(best["gpus"], best["tensor_parallel"], best["mode"], strict=True)]
    colours = ["#dc2626" if "(this scenario)" in str(name) else "#2563eb" for name in best["gpu"]]
    names = [_e(n if "(this scenario)" in str(n) else display_name("gpu", str(n))) for n in best["gpu"]]
    # The fleet is written under the GPU's name on the axis (automargin makes room), never as bar text that the
    # plot's right edge could cut.
    rows = [f"{name}<br><span style='font-size:10px'>{_e(text)}</span>" for name, text in
            zip(names, labels, strict=True)]
    data = [{"type": "bar", "orientation": "h", "y": rows, "x": values, "marker": {"color": colours},
             "showlegend": False, "hovertemplate": "%{x:,.0f}<extra></extra>"}]
    positive = [v for v in values if v > 0]
    spread = max(positive) / min(positive) if positive else 1.0
    log = spread > 20
    kind = "money" if priced else "count"
    axis_title = ("$ per month" if priced else "GPUs") + (" (log scale)" if log else "")
    ticks = log_ticks(positive, kind) if log else linear_ticks(values, kind)
    return {"data": data, "layout": _layout(
        "Cheapest fleet per GPU type that keeps the promises", axis_title, "",
        height=max(220, 60 + 44 * len(best)), yaxis={"autorange": "reversed", "automargin": True},
        xaxis={"title": {"text": axis_title}, "type": "log" if log else "linear", **ticks})}


def _figure_html(figure: dict[str, Any] | None, element_id: str) -> str:
    if figure is None:
        return ""
    payload = json.dumps(figure, allow_nan=False, default=_json_default).replace("<", "\\u003c")
    return (f'<div class="chart" id="{element_id}" style="width:{figure["layout"]["width"]}px;'
            f'height:{figure["layout"]["height"]}px"></div>\n'
            f'<script>(function(){{var f={payload};Plotly.newPlot("{element_id}",f.data,f.layout,'
            '{"displayModeBar":false,"staticPlot":false,"responsive":false});})();</script>')


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


# --- sections -----------------------------------------------------------------------------------------------------

def _cards(cr: CustomerReport) -> str:
    a, s = cr.answer, cr.results.scenario
    binary = s.units == "GiB"
    cards = []
    if a.fleet is not None:
        cards += [("GPUs", num("fleet:gpus", a.fleet.gpus, f"{a.fleet.gpus:,}")),
                  ("replicas", num("fleet:replicas", a.fleet.replicas, f"{a.fleet.replicas:,}")),
                  ("load", num("fleet:users", a.sizing.users, f"{a.sizing.users:,.0f} concurrent users")
                   if a.sizing is not None and a.sizing.users else
                   num("fleet:load_rps", a.load_rps, f"{a.load_rps:,.3g} req/s"))]
    if a.cost_per_hour is not None:
        cards += [("per hour", num("fleet:cost_per_hour", a.cost_per_hour, _money(a.cost_per_hour))),
                  ("per month", num("fleet:cost_per_month", a.cost_per_month, _money(a.cost_per_month, 0)))]
    if a.cost_per_million_output_tokens is not None:
        cards.append(("per million output tokens", num("fleet:cost_per_million_output_tokens",
                                                       a.cost_per_million_output_tokens,
                                                       _money(a.cost_per_million_output_tokens, 3))))
    z = a.sizing
    if z.energy_cost_per_month is not None:  # the customer report prices power (issue 29)
        cards.append(("electricity per month", num("sizing:energy_cost_per_month", z.energy_cost_per_month,
                                                   _money(z.energy_cost_per_month, 0))))
    if z.energy_kwh_per_month is not None:
        cards.append(("energy per month (full board power)",
                      num("sizing:energy_kwh_per_month", z.energy_kwh_per_month,
                          f"{z.energy_kwh_per_month:,.0f} kWh")))
    if z.energy_per_million_tokens_kwh is not None:
        cards.append(("energy per million output tokens",
                      num("sizing:energy_per_million_tokens_kwh", z.energy_per_million_tokens_kwh,
                          f"{z.energy_per_million_tokens_kwh:,.3g} kWh")))
    spec = s.serving.speculative
    if spec:
        cards.append(("speculative decoding", num("serving:speculative", spec["expected_tokens"],
                                                  f"{spec['method']}, {spec['draft_tokens']} drafted, "
                                                  f"{spec['expected_tokens']:.2f} tokens per step")))
    basis = "" if z.goodput_basis == "mean" else f" at {z.goodput_basis}"
    rep = z.replica  # one replica of the layout chosen
    cards += [(f"goodput per replica{basis}", num("sizing:replica_goodput_rps", z.replica_goodput_rps,
                                                   f"{z.replica_goodput_rps:,.2f} req/s")),
              ("requests that fit", num("result:batch_max", rep["batch_max"], f"{rep['batch_max']:,.0f}")),
              ("KV pool per GPU", num("result:pool_bytes", rep["pool_bytes"],
                                      format_value("pool_bytes", rep["pool_bytes"], binary)))]
    if a.fleet is not None:
        cards += [("TPOT at the load", num("sizing:tpot_at_load_s", z.tpot_at_load_s,
                                           format_value("tpot_at_load_s", z.tpot_at_load_s))),
                  ("TTFT at the load", num("sizing:ttft_at_load_s", z.ttft_at_load_s,
                                           format_value("ttft_at_load_s", z.ttft_at_load_s)))]
        if z.tpot_at_percentile_s is not None:
            cards += [(f"{z.goodput_basis} TPOT at the load", num("sizing:tpot_at_percentile_s",
                                                                   z.tpot_at_percentile_s,
                                                                   format_value("tpot_at_load_s",
                                                                                z.tpot_at_percentile_s))),
                      (f"{z.goodput_basis} TTFT at the load", num("sizing:ttft_at_percentile_s",
                                                                   z.ttft_at_percentile_s,
                                                                   format_value("ttft_at_load_s",
                                                                                z.ttft_at_percentile_s)))]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="big">{value}</div><div class="label">{_e(label)}</div></div>'
        for label, value in cards) + "</div>"


def _inputs_table(cr: CustomerReport) -> str:
    binary = cr.results.scenario.units == "GiB"
    rows = []
    for q in cr.report.inputs:
        if q.source == "not set" and q.key not in ("tpot_slo_s", "ttft_slo_s", "arrival_rate", "max_num_seqs",
                                                     "price_per_hour"):
            continue
        if q.source == "default" and q.value is not None and q.key in _SILENT_DEFAULTS:
            continue
        if q.unit == "$/h":
            shown = "not set" if q.value is None else f"${q.value:,.4g} per GPU-hour"
        elif q.key == "kv_bytes_per_value":
            shown = f"{q.value:g} B ({cr.results.scenario.model.kv_dtype})"
        else:
            shown = human_input(q.value, q.unit, binary)
        meaning = in_words(INPUTS[q.key][1].split(" (inf")[0].split("; nan")[0])
        rows.append(f"<tr><td>{_e(meaning)}</td>"
                    f"<td class='r'>{num('input:' + q.key, q.value, shown)}</td><td>{_source(q.source)}</td></tr>")
    return ("<table><thead><tr><th>input</th><th class='r'>value</th><th>source</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


#: Extension inputs left at the value that changes nothing: not worth a row in a customer's table.
_SILENT_DEFAULTS = {"kv_latent_dim", "local_layer_fraction", "experts", "experts_per_token", "hidden_size",
                    "allreduce_latency_s", "reserved_bytes", "sliding_window", "kv_transfer_bandwidth",
                    "pipeline_parallel", "replicas", "active_params", "interconnect_bandwidth"}


def _source(text: str) -> str:
    """A source, with URLs as links and code names in words ("engine profile: vllm: max_num_seqs 1024" -> "...
    the running-sequence cap 1024")."""
    words = []
    for word in in_words(str(text)).split():
        lead = word[: len(word) - len(word.lstrip("(\"'"))]
        if word[len(lead):].startswith(("https://", "http://")):
            url = word[len(lead):].rstrip(").,;\"'")
            tail = word[len(lead) + len(url):]
            words.append(f'{_e(lead)}<a href="{_e(url)}">{_e(url)}</a>{_e(tail)}')
        else:
            words.append(_e(word))
    return " ".join(words)


def _results_table(cr: CustomerReport) -> str:
    r = cr.results
    binary = r.scenario.units == "GiB"
    parts = []
    for section, keys in SECTIONS.items():
        rows = "".join(
            f"<tr><td>{_e(in_words(RESULTS[key][1]))}</td>"
            f"<td class='r'>{num('result:' + key, r[key], value_in_words(format_value(key, r[key], binary)))}</td>"
            "</tr>"
            for key in keys if key in r.values)
        parts.append(f"<h3>{_e(section)}</h3><table><tbody>{rows}</tbody></table>")
    return "".join(parts)


def sources(results: Results) -> list[tuple[str, str]]:
    """(what, source) for every catalog figure, efficiency and price the sizing used."""
    s = results.scenario
    out: list[tuple[str, str]] = []
    try:
        model = catalog.model(s.model.name) if s.model.source != "user" else {}
    except ScenarioError:
        model = {}
    if s.model.source != "user":
        out.append((f"model {display_name('model', s.model.name)} (layers, heads, context)", s.model.source))
    if model.get("params_source"):
        out.append(("model parameter count", str(model["params_source"])))
    try:
        gpu = catalog.gpu(s.gpu.name) if s.gpu.source != "user" else {}
    except ScenarioError:
        gpu = {}
    if gpu:
        out.append((f"GPU {display_name('gpu', s.gpu.name)} datasheet (bandwidth, FLOP/s)", str(gpu.get("source"))))
        if gpu.get("memory_usable_source"):
            out.append(("GPU memory as the device reports it (nvidia-smi / rocm-smi total)",
                        str(gpu["memory_usable_source"]).split(" -- ")[0]))
        if gpu.get("price_source") and s.gpu.price_per_hour == gpu.get("price_per_hour"):
            out.append((f"price ${s.gpu.price_per_hour:g} per GPU-hour (an assumption: use your own)",
                        " ".join(str(gpu["price_source"]).split())))
    elif s.gpu.price_per_hour is not None:
        out.append((f"price ${s.gpu.price_per_hour:g} per GPU-hour", "given in the scenario"))
    if gpu and (s.gpu.bandwidth_efficiency != 1 or s.gpu.flops_efficiency != 1):
        defaults = catalog.gpu_defaults()
        out.append((f"efficiencies: bandwidth x{s.gpu.bandwidth_efficiency:g}, FLOP/s x{s.gpu.flops_efficiency:g}",
                    " ".join(str(defaults.get("efficiency_source", "gpu_catalog.yaml defaults")).split())))
    out.append(("serving.memory_utilization default 0.9", "vLLM's default gpu_memory_utilization "
                "(https://docs.vllm.ai/en/latest/models/engine_args.html)"))
    out.append(("serving.max_batched_tokens default 8192", "the planner's default chunked-prefill budget "
                "(docs/fleet.md)"))
    out.append((f"a month is {HOURS_PER_MONTH:g} hours", "8,760 hours a year / 12"))
    if s.gpu.tdp_watts:
        out.append((f"board power {s.gpu.tdp_watts:g} W per GPU, every GPU at it all month (an upper bound on the "
                    f"energy); PUE {s.gpu.pue:g}" + (f"; electricity ${s.gpu.energy_price_per_kwh:g} per kWh"
                                                    if s.gpu.energy_price_per_kwh is not None else ""),
                    f"gpu_catalog.yaml tdp_watts ({gpu.get('source', 'the scenario')})" if gpu else
                    "given in the scenario"))
    if s.serving.speculative:
        sp = s.serving.speculative
        out.append((f"speculative decoding: {sp['method']}, {sp['draft_tokens']} drafted tokens, acceptance rate "
                    f"{sp['acceptance_rate']:.2f} ({sp['expected_tokens']:.2f} tokens per verification)",
                    "serving.speculative, given in the scenario: measure it on your traffic"))
    return out


def _flag_key(settings: EngineSettings, flag: str) -> str:
    """The ``data-key`` of a flag's value: ``flag:vllm:--max-num-seqs``, ``flag:vllm/prefill:...`` for a pool."""
    return f"flag:{settings.engine}{'/' + settings.role if settings.role else ''}:{flag}"


def _engines_html(cr: CustomerReport) -> str:
    model = model_id(cr.answer.sizing.replica)
    shared = set.intersection(*(set(e.notes) for e in cr.engines)) if cr.engines else set()
    parts = [f"<ul>{''.join(f'<li>{_e(n)}</li>' for n in cr.engines[0].notes if n in shared)}</ul>" if shared else ""]
    for settings in cr.engines:
        rows = "".join(
            f"<tr><td><code>{num(_flag_key(settings, f.flag), f.value, ' '.join(f.tokens()))}"
            f"</code></td><td><code>{_e(f.source)}</code></td><td>{_e(f.why)}</td></tr>" for f in settings.flags)
        config = (f"<p>{_e(settings.config_flag)} file:</p><pre>{_e(settings.config_yaml())}</pre>"
                  if settings.config_file else "")
        notes = "".join(f"<li>{_e(n)}</li>" for n in settings.notes if n not in shared)
        command = settings.command(model, multiline=True)
        parts.append(f"<h3>{_e(settings.title)}</h3><p>{_e(settings.layout_line)}</p><pre class='cmd'>{_e(command)}"
                     f"</pre><table><thead><tr><th>flag</th><th>from</th><th>why</th></tr></thead><tbody>{rows}"
                     f"</tbody></table>{config}{'<ul>' + notes + '</ul>' if notes else ''}"
                     f"<p class='small'>Flag names: <a href='{_e(settings.docs)}'>{_e(settings.docs)}</a></p>")
    return "".join(parts)


def customer_assumptions(results: Results, report: Report) -> list[str]:
    """The report's assumptions in a reader's units (the export-only line about base units left out)."""
    s, g = results.scenario, results.scenario.gpu
    out = []
    for line in report.assumptions:
        if line.startswith("all values in base units"):
            continue
        if line.startswith(("gpu.bandwidth", "gpu.flops")):
            bandwidth = line.startswith("gpu.bandwidth")
            peak, eff = (g.bandwidth, g.bandwidth_efficiency) if bandwidth else (g.flops, g.flops_efficiency)
            unit = "B/s" if bandwidth else "FLOP/s"
            what = "memory bandwidth" if bandwidth else "arithmetic (FLOP/s)"
            if eff != 1:
                line = (f"GPU {what}: datasheet peak {human_input(peak, unit, False)} x efficiency {eff:g} = "
                        f"{human_input(peak * eff, unit, False)} effective")
            else:
                line = f"GPU {what} {human_input(peak, unit, False)} is taken as effective (efficiency 1)"
        elif "B per GPU held outside the KV pool" in line:
            line = (f"{human_input(s.serving.reserved_bytes, 'B', s.units == 'GiB')} per GPU held outside the KV pool "
                    "(engine reserves: activations, CUDA graphs, non-torch memory)")
        elif line.startswith("GPU price"):
            line = f"GPU price ${g.price_per_hour:g} per GPU-hour is an assumption; replace it with your own"
        out.append(line)
    return out


def _class_error_html(results: Results) -> str:
    """The measured TPOT and TTFT errors of this scenario's own class (engine x GPU family, ``inputs.accuracy``),
    first."""
    from capacity.inputs.accuracy import expected_error

    s = results.scenario
    error = expected_error(s.serving.engine, s.gpu.name)
    if error is None:
        return ("<p>This sizing uses the essays' idealised conventions (<code>serving.engine: ideal</code>); no "
                "measured error applies to it.</p>")
    own = "" if error.own_class else " (no measured rows for this engine on this GPU family: the nearest figure)"
    ttft = (f", and the time to first token <b>{error.ttft_mape_percent:.0f}%</b> over {error.ttft_rows:,} (users "
            f"in flight, fixed lengths)" if error.ttft_mape_percent is not None else "")
    return (f"<p>For this answer's class, <b>{_e(error.label)}</b>, the predicted time per output token is "
            f"<b>{error.mape_percent:.0f}%</b> off on average over {error.rows:,} measured deployments{ttft} "
            f"(NVIDIA's public silicon sample, Apache-2.0){_e(own)}.</p>")


def _fidelity_html(results: Results | None = None) -> str:
    f = FIDELITY
    engine_mape = num("fidelity:engine_mape_percent", f["engine_mape_percent"], f"{f['engine_mape_percent']}%")
    return ((_class_error_html(results) if results is not None else "") +
            f"<p>With an engine profile (<code>serving.engine</code>: vLLM, TensorRT-LLM or SGLang defaults) the "
            f"planner predicts {f['engine_points']} of {f['measurements']} published measurements with a mean "
            f"absolute percentage error of <b>{engine_mape}</b>, and {f['engine_loso_mape_percent']}% when each "
            f"publication is predicted with efficiencies fitted on the others (without an engine profile the same "
            f"points are {f['no_engine_mape_percent']}% off).</p>"
            f"<p>Against {f['points']} published timing measurements (TensorRT-LLM, NVIDIA NIM and vLLM on H100, "
            f"H200, A100, L40S and MI300X; 7B to 405B models) the planner's default settings have a mean absolute "
            f"percentage error of <b>{num('fidelity:mape_percent', f['mape_percent'], str(f['mape_percent']) + '%')}"
            f"</b> (latency {f['latency_mape_percent']}%, single stream {f['single_stream_mape_percent']}%, "
            f"throughput {f['throughput_mape_percent']}%); the median error is {f['median_percent']}% and "
            f"{f['within_20_percent']} of the {f['points']} are within 20%. Treat every time, rate and GPU count "
            "here as good to about &plusmn;30% until it is calibrated on your own engine's benchmark "
            "(<code>capacity calibrate</code>). Memory figures (what fits) are exact arithmetic on the inputs; "
            "the engine's own reserves (activations, CUDA graphs) are the main source of error there.</p>"
            f"<p class='small'>Source: {_e(f['source'])}.</p>")


def classes_html(results: Results) -> str:
    """The per-class sizing (``percentiles.sizing``) as a table, for a scenario with workload classes or a
    percentile promise; empty otherwise. Keys: ``class:<name>:<column>`` (``all`` the whole mix)."""
    from capacity.model.percentiles import sized_per_class, sizing

    s = results.scenario
    if not sized_per_class(s):
        return ""
    table = sizing(s)

    def cell(name: str, key: str, value: object, unit: str, scale: float = 1.0, digits: int = 2) -> str:
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return "<td class='r'></td>"
        return f"<td class='r'>{num(f'class:{name}:{key}', value, f'{value * scale:,.{digits}f} {unit}')}</td>"

    rows = []
    for i, row in enumerate(table.to_dict("records")):
        whole = i == len(table) - 1
        name = "all" if whole else str(row["class"])
        promise = ""
        if not whole:
            parts = [f"TPOT {row['tpot_promise_s'] * 1e3:,.0f} ms" if _finite(row.get("tpot_promise_s")) else "",
                     f"TTFT {row['ttft_promise_s'] * 1e3:,.0f} ms" if _finite(row.get("ttft_promise_s")) else ""]
            at = f"p{row['percentile']:g}" if _finite(row.get("percentile")) else "mean"
            promise = f"{', '.join(p for p in parts if p) or 'none'} at {at}"
        rows.append(f"<tr><td>{'whole mix' if whole else _e(name)}</td><td class='r'>{row['share']:.0%}</td>"
                    f"<td>{_e(promise)}</td>{cell(name, 'goodput_rps', row['goodput_rps'], 'req/s')}"
                    f"{cell(name, 'mean_goodput_rps', row['mean_goodput_rps'], 'req/s')}"
                    f"{cell(name, 'class_rps', row['class_rps'], 'req/s')}"
                    f"{cell(name, 'p99_ttft_s', row.get('p99_ttft_s'), 'ms', 1e3, 0)}"
                    f"{cell(name, 'p99_tpot_s', row.get('p99_tpot_s'), 'ms', 1e3, 1)}</tr>")
    return ("<h2>Per workload class</h2><p>Each class keeps its promise for the share of its requests it names; the "
            "goodput of a class is the largest total load (shares fixed) at which it does, the mix's the smallest. "
            "The mean-based goodput keeps the same promises on the average request only (the headline's "
            "<code>goodput_rps</code>).</p><table><thead><tr><th>class</th><th class='r'>share</th><th>promise</th>"
            "<th class='r'>goodput at its percentile</th><th class='r'>mean-based goodput</th>"
            "<th class='r'>arrivals at the mix goodput</th><th class='r'>p99 TTFT there</th>"
            "<th class='r'>p99 TPOT there</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


_CSS = """
body{font-family:Helvetica,Arial,sans-serif;color:#111827;max-width:760px;margin:24px auto;padding:0 16px;
     font-size:13px;line-height:1.45}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;border-bottom:2px solid #e5e7eb;padding-bottom:3px;
     margin-top:26px} h3{font-size:14px;margin:14px 0 4px}
.meta{color:#6b7280;font-size:12px} .answer{font-size:16px;background:#eff6ff;border-left:4px solid #2563eb;
     padding:10px 14px;margin:14px 0}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0} .card{border:1px solid #e5e7eb;border-radius:6px;
     padding:6px 10px;min-width:120px} .big{font-size:17px;font-weight:bold} .label{color:#6b7280;font-size:11px}
table{border-collapse:collapse;width:100%;margin:4px 0 8px} td,th{border-bottom:1px solid #e5e7eb;padding:3px 6px;
     text-align:left;vertical-align:top} .r{text-align:right;white-space:nowrap} code{font-size:11px;color:#374151}
pre{background:#f3f4f6;padding:8px;white-space:pre-wrap;word-break:break-all;font-size:11px}
.small{font-size:11px;color:#6b7280} .chart{margin:8px 0;break-inside:avoid;page-break-inside:avoid}
a{color:#1d4ed8;word-break:break-all} ul{padding-left:20px}
@page{size:A4;margin:14mm}
@media print{body{margin:0;max-width:none} h2{break-after:avoid;page-break-after:avoid}
     tr,pre,.cards,.answer{break-inside:avoid;page-break-inside:avoid} a{color:#111827}
     .small,.label,.meta,code,pre{font-size:12px} td,th{font-size:12px} .r{white-space:normal}}
"""


def customer_report_html(results: Results, target_rps: float | None = None, peak_factor: float | None = None,
                         headroom: float | None = None, date: str | None = None,
                         compare_gpus: Iterable[str] | None = None) -> str:
    """The report as one self-contained HTML document (see the module docstring)."""
    from plotly.offline import get_plotlyjs

    from capacity import __version__

    cr = build(results, target_rps, peak_factor, headroom, date, compare_gpus)
    r, s, a = cr.results, cr.results.scenario, cr.answer
    load_per_replica = a.fleet.load_per_replica_rps if a.fleet is not None else None
    fleet_fig = fleet_figure(cr.fleet_table) if cr.fleet_table is not None else None
    fleet_note = ("" if fleet_fig is not None else
                  "<p>No fleet comparison: no GPU type or layout keeps the promises at this load.</p>" if a.load_rps
                  else "<p>No fleet comparison: the scenario gives no arrival rate (<code>workload.arrival_rate</code>,"
                  " or <code>capacity report --arrival-rate</code>).</p>")
    verdict_items = "".join(f"<li>{_e(in_words(line))}</li>" for line in verdict(a.sizing))
    notes = "".join(f"<li>{_e(in_words(n))}</li>" for n in a.sizing.notes())
    assumptions = "".join(f"<li>{_e(in_words(t))}</li>" for t in customer_assumptions(r, cr.report))
    source_rows = "".join(f"<tr><td>{_e(in_words(what))}</td><td>{_source(where)}</td></tr>"
                          for what, where in sources(r))
    model, gpu = display_name("model", s.model.name), display_name("gpu", s.gpu.name)
    z = a.sizing
    design = (f"<p>Sized for {num('fleet:design_users', z.design_users, f'{z.design_users:,.0f}')} concurrent "
              f"users (peak factor {z.peak_factor:g}, headroom {z.headroom:.0%}), {z.users_per_replica:,.3g} users "
              f"in flight per replica, {a.fleet.load_per_replica_rps:,.3g} requests/s each.</p>"
              if a.fleet is not None and z.users else
              f"<p>Sized for {num('fleet:design_load_rps', a.fleet.design_load_rps, f'{a.fleet.design_load_rps:,.3g}')}"
              f" requests/s (peak factor {z.peak_factor:g}, headroom {z.headroom:.0%}), "
              f"{a.fleet.load_per_replica_rps:,.3g} requests/s per replica.</p>"
              if a.fleet is not None else "")
    per_replica = (f"{z.gpus_per_replica} x {gpu} per replica" if z.prefill_replica is None else
                   f"a prefill pool of {layout_label(z.prefill_replica.scenario)} and a decode pool of "
                   f"{layout_label(z.replica.scenario)} per replica")
    body = f"""
<h1>LLM serving sizing: {_e(s.name)}</h1>
<div class="meta">{_e(model)} on {_e(per_replica)} ({_e(MODE_WORDS[z.mode])})
&middot; report of
{_e(cr.report.date)} &middot; capacity {_e(__version__)}</div>
<div class="answer" data-key="answer">{_e(a.sentence)}</div>
{_cards(cr)}
{design}
<h2>What binds, and what would move it</h2>
<ul>{verdict_items}</ul>
{'<p>Notes:</p><ul>' + notes + '</ul>' if notes else ''}
{classes_html(z.replica)}
<h2>Charts</h2>
{_figure_html(memory_figure(r), "chart-memory")}
{_figure_html(load_figure(z.replica, load_per_replica, z.mode) if z.replica["ceiling_rps"] > 0 else None,
              "chart-load")}
{_figure_html(fleet_fig, "chart-fleet")}
{fleet_note}
<p class="small">The fleet chart sizes each GPU type of the catalog (datasheet figures x the default
efficiencies, catalog prices) for the same load and promises, over tensor-parallel sizes 1, 2, 4, 8 and three serving
modes (colocated, chunked prefill, separate prefill and decode pools); red is this scenario's GPU.</p>
<h2>Engine settings</h2>
<p>The sizing holds only if the engine runs with the same pool, batch and context. These flags set them
(the scenario's engine first).</p>
{_engines_html(cr)}
<h2>How sure we are</h2>
{_fidelity_html(cr.results)}
<h2>Inputs</h2>
<p class="small">Bytes in {'GiB (2^30 B)' if s.units == 'GiB' else 'GB (1e9 B)'}; every value's exact figure in base
units is in the element's <code>data-value</code>.</p>
{_inputs_table(cr)}
<h2>Assumptions</h2>
<ul>{assumptions}</ul>
<h3>Sources</h3>
<table><tbody>{source_rows}</tbody></table>
<h2>All results</h2>
{_results_table(cr)}
<p class="small">capacity {_e(__version__)}: an analytic model of one serving engine (KV memory, roofline step times,
queueing for latency promises). Re-run with <code>capacity report SCENARIO.yaml</code>.</p>
"""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Sizing: {_e(s.name)}</title><style>{_CSS}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>{body}</body></html>\n")


#: JavaScript that is true once Plotly has drawn every chart of the report.
CHARTS_DRAWN = "Array.from(document.querySelectorAll('.chart')).every(c => c.querySelector('.main-svg'))"


def html_to_pdf(document: str, chromium: str | None = None, timeout_s: float = 60.0) -> bytes:
    """Print the HTML report to PDF (A4) in headless Chromium through Playwright.

    Needs the ``playwright`` package and a Chromium (``/usr/bin/chromium`` or ``chromium`` on PATH, or
    ``chromium``); ScenarioError with what is missing otherwise.
    """
    import shutil
    import tempfile
    from pathlib import Path

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ScenarioError("--format pdf needs playwright (pip install playwright) and Chromium") from None
    browser_path = chromium or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(browser_path).exists():
        raise ScenarioError(f"--format pdf needs Chromium; {browser_path} not found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as folder:
        page_file = Path(folder) / "report.html"
        page_file.write_text(document, encoding="utf-8")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                                              "--disable-background-networking"])
            try:
                page = browser.new_page()
                page.goto(page_file.as_uri(), wait_until="load", timeout=timeout_s * 1000)
                page.wait_for_function(CHARTS_DRAWN, timeout=timeout_s * 1000)
                return page.pdf(format="A4", print_background=True, prefer_css_page_size=True)
            finally:
                browser.close()


__all__ = ["CHARTS_DRAWN", "FIDELITY", "CustomerReport", "build", "cheapest_per_gpu", "customer_report_html",
           "display_name", "fleet_figure", "html_to_pdf", "human_input", "load_figure", "memory_figure", "num",
           "sources"]
