"""Plotly figures for the app's views. Each takes library outputs and returns a figure; no formulas here.

Figures are plain dicts (``{"data": [...], "layout": {...}}``) that ``st.plotly_chart`` validates
once; building ``go.Figure`` objects and calling ``update_*``/``add_vline`` validated on every call
and made a rerun several times slower.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from app_views.state import UNIT_BYTES
from capacity.answers.sentence import per_user_tokens_per_s
from capacity.model.pool_picture import LABELS
from capacity.render.ticks import linear_ticks, log_ticks

POOL_COLOURS = ["#e5e7eb", "#7c3aed", "#2563eb", "#f59e0b"]  # free, shared, private, partial


def _figure(data: list[dict], title: str, x: str, y: str, marks: list[tuple] = (), log_axes: tuple[str, ...] = (),
            **layout) -> dict:
    """A figure with vertical/horizontal marks: (axis 'x' or 'y', value, colour, dash, label, y-axis ref).

    On a logarithmic axis Plotly takes shapes in data units but annotations in log10 units: the labels of marks
    on the axes named in ``log_axes`` ("y2", "x") are converted, so a 200 ms promise is labelled at 200 ms
    (a raw 200 there stretched the axis to 1e200).
    """
    shapes, notes = [], []
    xs = [float(x) for trace in data for x in (trace.get("x") if trace.get("x") is not None else [])
          if isinstance(x, int | float) and np.isfinite(x)]
    right = max(xs, default=0.0)
    for axis, value, colour, dash, label, yref in marks:
        at = float(np.log10(value)) if (axis == "x" and "x" in log_axes) or (axis == "y" and yref in log_axes) \
            else value
        line = {"color": colour, "dash": dash, "width": 1.5}
        if axis == "x":
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": value, "x1": value, "y0": 0, "y1": 1,
                           "line": line})
            near_right = right > 0 and value > 0.7 * right  # the label reads leftwards, off the right-hand axis
            notes.append({"x": at, "xref": "x", "yref": "paper", "y": 1.0 - 0.08 * len(notes), "text": label,
                          "showarrow": False, "xanchor": "right" if near_right else "left", "font": {"size": 11}})
        else:
            shapes.append({"type": "line", "xref": "paper", "yref": yref, "x0": 0, "x1": 1, "y0": value, "y1": value,
                           "line": line})
            notes.append({"x": 0.01, "xref": "paper", "yref": yref, "y": at, "text": label, "showarrow": False,
                          "xanchor": "left", "yanchor": "bottom", "font": {"size": 11}})
    base = {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}},
            "height": 360, "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
            "legend": {"orientation": "h", "y": -0.25}, "shapes": shapes, "annotations": notes}
    # A plain dict: st.plotly_chart validates it once; building a go.Figure here would validate twice.
    return {"data": data, "layout": {**base, **layout}}


def memory_bar(parts: dict[str, float], unit: str) -> dict:
    """One stacked bar: where one GPU's memory goes (``parts`` in bytes, shown in ``unit``, GB or GiB)."""
    scale = UNIT_BYTES[unit]
    data = [{"type": "bar", "name": label, "y": ["GPU"], "x": [value / scale], "orientation": "h",
             "text": [f"{value / scale:,.1f} {unit}"], "textposition": "inside"} for label, value in parts.items()]
    return _figure(data, "Where one GPU's memory goes", unit, "", barmode="stack")


def concurrency_bars(counts: dict[str, float]) -> dict:
    data = [{"type": "bar", "x": list(counts), "y": list(counts.values()),
             "text": [f"{v:,.0f}" for v in counts.values()], "textposition": "outside"}]
    return _figure(data, "Requests that fit at once", "", "requests")


def pool_grid(cells: np.ndarray, per_cell: int, columns: int = 60) -> dict:
    """A grid of KV blocks coloured by owner; each cell stands for ``per_cell`` blocks."""
    rows = int(np.ceil(len(cells) / columns)) if len(cells) else 1
    grid = np.full(rows * columns, np.nan)
    grid[: len(cells)] = cells
    grid = grid.reshape(rows, columns)
    data = [{"type": "heatmap", "z": grid, "zmin": 0, "zmax": 3, "showscale": False, "xgap": 1, "ygap": 1,
             "colorscale": [[i / 3, POOL_COLOURS[i]] for i in range(4)], "hoverinfo": "skip"}]
    data += [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": label,
              "marker": {"color": POOL_COLOURS[code], "size": 10}} for code, label in LABELS.items()]
    unit = "block" if per_cell == 1 else f"{per_cell:,} blocks"
    return _figure(data, f"The KV block pool when full (one cell = {unit})", "", "",
                   xaxis={"showticklabels": False}, yaxis={"autorange": "reversed", "showticklabels": False})


def decode_chart(curve: pd.DataFrame, batch_now: float, balance: float, in_flight: float | None) -> dict:
    b = curve["batch"]
    data = [
        {"type": "scatter", "x": b, "y": curve["memory_s"] * 1e3, "name": "memory term (ms)", "line": {"dash": "dot"}},
        {"type": "scatter", "x": b, "y": curve["compute_s"] * 1e3, "name": "compute term (ms)",
         "line": {"dash": "dot"}},
        {"type": "scatter", "x": b, "y": curve["step_s"] * 1e3, "name": "decode step (ms)"},
        {"type": "scatter", "x": b, "y": curve["tokens_per_s"], "name": "throughput (tokens/s)", "yaxis": "y2"},
    ]
    marks = [("x", batch_now, "black", "solid", f"largest batch {batch_now:,.0f}", "y")]
    if np.isfinite(balance) and balance <= b.max():
        marks.append(("x", balance, "grey", "dash", f"compute overtakes memory at {balance:,.0f}", "y"))
    if in_flight and np.isfinite(in_flight) and in_flight < batch_now:
        marks.append(("x", in_flight, "green", "dash", f"batch at goodput {in_flight:,.0f}", "y"))
    step_ms = pd.concat([curve["memory_s"], curve["compute_s"], curve["step_s"]]) * 1e3
    return _figure(data, "Decode step and throughput vs batch size", "batch (sequences)", "ms", marks,
                   yaxis={"title": {"text": "time per step"}, **linear_ticks(step_ms, "ms")},
                   yaxis2={"overlaying": "y", "side": "right", "title": {"text": "throughput (tokens/s)"},
                           **linear_ticks(curve["tokens_per_s"], "rate")})


def load_chart(curve: pd.DataFrame, ceiling: float, goodput: float, tpot_slo_ms: float | None,
               ttft_slo_ms: float | None, load_rps: float | None = None) -> dict:
    tpot = curve["tpot_s"].where(np.isfinite(curve["tpot_s"])) * 1e3
    ttft = curve["ttft_s"].where(np.isfinite(curve["ttft_s"])) * 1e3
    data = [{"type": "scatter", "x": curve["rate_rps"], "y": tpot, "name": "TPOT (ms)"},
            {"type": "scatter", "x": curve["rate_rps"], "y": ttft, "name": "TTFT (ms)", "yaxis": "y2"}]
    marks = [("x", ceiling, "black", "solid", f"ceiling {ceiling:,.2f} req/s", "y")]
    if goodput > 0:
        marks.append(("x", goodput, "green", "dash", f"goodput {goodput:,.2f}", "y"))
    if load_rps:
        marks.append(("x", load_rps, "#2563eb", "dot", f"your load {load_rps:,.2f}", "y"))
    if tpot_slo_ms:
        marks.append(("y", tpot_slo_ms, "red", "dot", f"TPOT promise {tpot_slo_ms:,.0f} ms", "y"))
    if ttft_slo_ms:
        marks.append(("y", ttft_slo_ms, "orange", "dot", f"TTFT promise {ttft_slo_ms:,.0f} ms", "y2"))
    return _figure(data, "Latency vs arrival rate", "arrival rate (requests/s)", "TPOT (ms)", marks, ("y2",),
                   yaxis={"title": {"text": "TPOT"}, "rangemode": "tozero",
                          **linear_ticks([*tpot, tpot_slo_ms or 0.0], "ms")},
                   yaxis2={"overlaying": "y", "side": "right", "title": {"text": "TTFT (log scale)"},
                           "type": "log", **log_ticks([*ttft, *([ttft_slo_ms] if ttft_slo_ms else [])], "ms")})


def context_chart(curve: pd.DataFrame, tokens_now: float, fits_now: float) -> dict:
    """Requests that fit at once against request length (log-log): 1K-token chats vs 32K-token documents."""
    data = [{"type": "scatter", "x": curve["tokens"], "y": curve["paged"], "name": "requests that fit (paged)",
             "mode": "lines+markers", "hovertemplate": "%{x:,.0f} tokens: %{y:,.0f} requests<extra></extra>"}]
    marks = [("x", tokens_now, "black", "dash", f"this workload: {tokens_now:,.0f} tokens, {fits_now:,.0f} fit", "y")]
    return _figure(data, "Concurrency vs context length", "tokens per request (prompt + answer)",
                   "requests that fit at once", marks, ("x",), xaxis={"type": "log", "dtick": 1, "title": {
                       "text": "tokens per request (prompt + answer, log scale)"}},
                   yaxis={"type": "log", "dtick": 1, "title": {"text": "requests that fit at once (log scale)"}})


def knee_chart(curve: pd.DataFrame, batch_now: float, tpot_slo_s: float | None) -> dict:
    """Total output tokens/s against each user's tokens/s as the batch grows: the knee of the trade."""
    data = [{"type": "scatter", "x": curve["per_user_tokens_per_s"], "y": curve["tokens_per_s"], "mode": "lines",
             "name": "batch 1 (right) to the largest (left)", "customdata": curve["batch"],
             "hovertemplate": "batch %{customdata:,.0f}: %{x:,.1f} tokens/s per user, %{y:,.0f} in total"
                              "<extra></extra>"}]
    marks = []
    at = curve[curve["batch"] <= batch_now]
    if len(at):
        last = at.iloc[-1]
        marks.append(("x", float(last["per_user_tokens_per_s"]), "black", "solid",
                      f"largest batch {batch_now:,.0f}", "y"))
    if tpot_slo_s:
        speed = per_user_tokens_per_s(tpot_slo_s)
        marks.append(("x", speed, "red", "dot", f"TPOT promise = {speed:,.0f} tokens/s per user", "y"))
    return _figure(data, "Throughput vs per-user speed as the batch grows", "tokens/s per user (1 / decode step)",
                   "output tokens/s in total", marks, yaxis={"title": {"text": "output tokens/s in total"},
                                                              "rangemode": "tozero"})


def compare_chart(table: pd.DataFrame) -> dict:
    ok = table[table["problem"] == ""]
    labels = ok["gpu"] if ok["model"].nunique() <= 1 else ok["model"] + " on " + ok["gpu"]
    data = [{"type": "bar", "x": labels, "y": ok["goodput_rps"], "name": "goodput (requests/s)"},
            {"type": "scatter", "x": labels, "y": ok["cost_per_million_tokens"], "yaxis": "y2",
             "name": "$ per M output tokens", "mode": "markers", "marker": {"size": 12}}]
    return _figure(data, "Same workload on each GPU and model", "", "requests/s",
                   yaxis2={"overlaying": "y", "side": "right", "title": {"text": "$ per M output tokens"},
                           "rangemode": "tozero", **linear_ticks(ok["cost_per_million_tokens"], "money")},
                   yaxis={"title": {"text": "goodput (requests/s)"}, **linear_ticks(ok["goodput_rps"], "rate")})
