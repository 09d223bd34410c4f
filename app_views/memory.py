"""Memory view: where one GPU's memory goes, how many requests fit, and how that falls with context length."""

from __future__ import annotations

from typing import Any

import numpy as np

from app_views import charts
from app_views.context import Context
from app_views.figures import figures_markdown
from capacity.answers.sentence import memory_split, paged_over_contiguous
from capacity.inputs.units import format_bytes
from capacity.model.curves import concurrency_curve
from capacity.model.pool_picture import pool_map
from capacity.render.formatting import format_value

#: Request lengths the concurrency chart spans [tokens]: 256 to 128K, two points per doubling.
CONTEXTS = np.unique(np.round(2.0 ** np.arange(8, 17.01, 0.5)))


def render(st: Any, ctx: Context) -> None:
    r, binary = ctx.results, ctx.binary
    st.markdown(figures_markdown([  # one element, where four st.metric in columns are nine (app_views/figures.py)
        ("KV per token", format_bytes(r["kv_bytes_per_token"], binary), "whole model, every layer"),
        ("KV pool per GPU", format_value("pool_bytes", r["pool_bytes"], binary), f"{r['pool_blocks']:,.0f} blocks"),
        ("Blocks per request", f"{r['blocks_per_request']:,.0f}", "prompt + answer, in blocks"),
        ("Paged vs contiguous", f"{paged_over_contiguous(r):,.1f}x",
         "requests that fit with paged blocks over those that fit reserving max model length each"),
    ]))
    left, right = st.columns(2)
    left.plotly_chart(charts.memory_bar(memory_split(r), ctx.unit), width="stretch")
    right.plotly_chart(charts.concurrency_bars({
        "contiguous": r["max_requests_contiguous"], "paged": r["max_requests_paged"],
        "shared prefix": r["max_requests_shared_prefix"]}), width="stretch")
    tokens = r.scenario.workload.tokens_per_request
    st.plotly_chart(charts.context_chart(concurrency_curve(r, CONTEXTS), tokens, r["max_requests_paged"]),
                    width="stretch")
    cells, per_cell, counts = pool_map(r)
    st.plotly_chart(charts.pool_grid(cells, per_cell), width="stretch")
    st.caption("Blocks by owner: " + ", ".join(f"{label} {n:,}" for label, n in counts.items()))
