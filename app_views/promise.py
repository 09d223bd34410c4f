"""Promise view: latency against load, and what the promises cost in capacity."""

from __future__ import annotations

from typing import Any

import numpy as np

from app_views import charts
from app_views.context import Context
from app_views.figures import figures_markdown
from capacity.answer import capacity_gap_rps
from capacity.curves import load_curve
from capacity.formatting import format_value


def render(st: Any, ctx: Context) -> None:
    r, s = ctx.results, ctx.results.scenario
    st.markdown(figures_markdown([  # one element, where four st.metric in columns are nine (app_views/figures.py)
        ("Goodput", f"{r['goodput_rps']:,.2f} req/s", f"set by {r['goodput_limit']}"),
        ("In flight at goodput", f"{r['goodput_in_flight']:,.0f}", "requests being decoded at once"),
        ("Capacity the promises cost", f"{capacity_gap_rps(r):,.2f} req/s",
         f"{r['capacity_given_up'] * 100:,.1f}% of the ceiling"),
        ("TPOT at the ceiling", format_value("tpot_at_ceiling_s", r["tpot_at_ceiling_s"]), "at the largest batch"),
    ]))
    if r["ceiling_rps"] > 0:
        rates = np.linspace(0, r["ceiling_rps"] * 0.999, 300)
        st.plotly_chart(charts.load_chart(load_curve(r, rates), r["ceiling_rps"], r["goodput_rps"],
                                          s.slo.tpot_s * 1e3 if s.slo.tpot_s else None,
                                          s.slo.ttft_s * 1e3 if s.slo.ttft_s else None, ctx.load_rps),
                        width="stretch")
    if s.workload.arrival_rate:
        st.markdown(f"At the entered {s.workload.arrival_rate:,.2f} requests/s ({r['load_fraction'] * 100:,.0f}% of "
                    f"the ceiling): TPOT {format_value('tpot_at_load_s', r['tpot_at_load_s'])}, TTFT "
                    f"{format_value('ttft_at_load_s', r['ttft_at_load_s'])}.")
    st.caption("TTFT model: the wait for the engine's next batched prefill pass plus that pass (validated against "
               "the simulator within 10% up to 80% of the ceiling; reads low near the ceiling, where requests also "
               "wait for KV memory).")
