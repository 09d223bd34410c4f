"""Roofline view: the decode step's memory and compute terms, and the throughput / per-user speed trade."""

from __future__ import annotations

from typing import Any

import numpy as np

from app_views import charts
from app_views.context import Context
from app_views.figures import figures_markdown
from capacity.model.curves import balance_batch, decode_curve
from capacity.render.formatting import format_value


def render(st: Any, ctx: Context) -> None:
    r = ctx.results
    st.markdown(figures_markdown([  # one element, where four st.metric in columns are nine (app_views/figures.py)
        ("Memory term", format_value("decode_memory_s", r["decode_memory_s"]), "decode step's memory traffic time"),
        ("Compute term", format_value("decode_compute_s", r["decode_compute_s"]), "decode step's arithmetic time"),
        ("Prefill", format_value("prefill_s", r["prefill_s"]), f"{r['prefill_tokens']:,.0f} uncached prompt tokens"),
        ("Single stream", f"{r['single_stream_tokens_per_s']:,.0f} tokens/s", "one request alone on the replica"),
    ]))
    top = max(2.0, r["batch_max"] * 1.5)
    curve = decode_curve(r, np.unique(np.geomspace(1, top, 200).round()))
    left, right = st.columns(2)
    left.plotly_chart(charts.decode_chart(curve, r["batch_max"], balance_batch(r), r["goodput_in_flight"]),
                      width="stretch")
    right.plotly_chart(charts.knee_chart(curve, r["batch_max"], r.scenario.slo.tpot_s), width="stretch")
    st.caption(f"Prefill is compute-bound above {r['critical_batch']:,.0f} prompt tokens (critical batch "
               f"W·F / (2N·BW)); the decode step is {r['decode_bound']}-bound at the largest batch. Right: each "
               "point is one batch size; a bigger batch serves more tokens per second in total and fewer to each "
               "user.")
