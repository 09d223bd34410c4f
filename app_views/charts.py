"""Plotly figures for the app's views. Each takes library outputs and returns a figure; no formulas here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from capacity.pool_picture import LABELS

POOL_COLOURS = ["#e5e7eb", "#7c3aed", "#2563eb", "#f59e0b"]  # free, shared, private, partial


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=360, margin={"l": 10, "r": 10, "t": 40,
                                                                                     "b": 10},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def memory_bar(parts: dict[str, float], unit: str) -> go.Figure:
    """One stacked bar: where one GPU's memory goes (``parts`` already in ``unit``)."""
    fig = go.Figure()
    for label, value in parts.items():
        fig.add_bar(name=label, y=["GPU"], x=[value], orientation="h", text=[f"{value:,.1f} {unit}"],
                    textposition="inside")
    fig.update_layout(barmode="stack")
    return _layout(fig, "Where one GPU's memory goes", unit, "")


def concurrency_bars(counts: dict[str, float]) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(counts), y=list(counts.values()), text=[f"{v:,.0f}" for v in counts.values()],
                           textposition="outside"))
    return _layout(fig, "Requests that fit at once", "", "requests")


def pool_grid(cells: np.ndarray, per_cell: int, columns: int = 60) -> go.Figure:
    """A grid of KV blocks coloured by owner; each cell stands for ``per_cell`` blocks."""
    rows = int(np.ceil(len(cells) / columns)) if len(cells) else 1
    grid = np.full(rows * columns, np.nan)
    grid[: len(cells)] = cells
    grid = grid.reshape(rows, columns)
    scale = [[i / 3, POOL_COLOURS[i]] for i in range(4)]
    fig = go.Figure(go.Heatmap(z=grid, zmin=0, zmax=3, colorscale=scale, showscale=False, xgap=1, ygap=1,
                               hovertemplate="%{z}<extra></extra>"))
    for code, label in LABELS.items():
        fig.add_scatter(x=[None], y=[None], mode="markers", marker={"color": POOL_COLOURS[code], "size": 10},
                        name=label)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    unit = "block" if per_cell == 1 else f"{per_cell:,} blocks"
    return _layout(fig, f"The KV block pool when full (one cell = {unit})", "", "")


def decode_chart(curve: pd.DataFrame, batch_now: float, balance: float, in_flight: float | None) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=curve["batch"], y=curve["memory_s"] * 1e3, name="memory term (ms)", line={"dash": "dot"})
    fig.add_scatter(x=curve["batch"], y=curve["compute_s"] * 1e3, name="compute term (ms)", line={"dash": "dot"})
    fig.add_scatter(x=curve["batch"], y=curve["step_s"] * 1e3, name="decode step (ms)")
    fig.add_scatter(x=curve["batch"], y=curve["tokens_per_s"], name="throughput (tokens/s)", yaxis="y2")
    fig.add_vline(x=batch_now, line_color="black", annotation_text=f"largest batch {batch_now:,.0f}")
    if np.isfinite(balance) and balance <= curve["batch"].max():
        fig.add_vline(x=balance, line_color="grey", line_dash="dash",
                      annotation_text=f"compute overtakes memory at {balance:,.0f}", annotation_position="bottom")
    if in_flight and np.isfinite(in_flight) and in_flight < batch_now:
        fig.add_vline(x=in_flight, line_color="green", annotation_text=f"batch at goodput {in_flight:,.0f}",
                      annotation_position="top left")
    fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "tokens/s"})
    return _layout(fig, "Decode step and throughput vs batch size", "batch (sequences)", "ms")


def load_chart(curve: pd.DataFrame, ceiling: float, goodput: float, tpot_slo_ms: float | None,
               ttft_slo_ms: float | None) -> go.Figure:
    fig = go.Figure()
    tpot = curve["tpot_s"].where(np.isfinite(curve["tpot_s"])) * 1e3
    ttft = curve["ttft_s"].where(np.isfinite(curve["ttft_s"])) * 1e3
    fig.add_scatter(x=curve["rate_rps"], y=tpot, name="TPOT (ms)")
    fig.add_scatter(x=curve["rate_rps"], y=ttft, name="TTFT (ms)", yaxis="y2")
    fig.add_vline(x=ceiling, line_color="black", annotation_text=f"ceiling {ceiling:,.2f} req/s")
    if goodput > 0:
        fig.add_vline(x=goodput, line_color="green", line_dash="dash", annotation_text=f"goodput {goodput:,.2f}",
                      annotation_position="bottom left")
    if tpot_slo_ms:
        fig.add_hline(y=tpot_slo_ms, line_color="red", line_dash="dot", annotation_text="TPOT promise")
    if ttft_slo_ms:
        fig.add_scatter(x=[0, ceiling], y=[ttft_slo_ms] * 2, yaxis="y2", name="TTFT promise (ms)",
                        line={"color": "orange", "dash": "dot"}, mode="lines")
    fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "TTFT (ms)", "type": "log"})
    return _layout(fig, "Latency vs arrival rate", "arrival rate (requests/s)", "TPOT (ms)")


def compare_chart(table: pd.DataFrame) -> go.Figure:
    ok = table[table["problem"] == ""]
    fig = go.Figure()
    fig.add_bar(x=ok["gpu"], y=ok["goodput_rps"], name="goodput (requests/s)")
    fig.add_scatter(x=ok["gpu"], y=ok["cost_per_million_tokens"], name="$ per million output tokens", yaxis="y2",
                    mode="markers", marker={"size": 12})
    fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "$ / M tokens"})
    return _layout(fig, "Same model and workload on each GPU", "", "requests/s")
