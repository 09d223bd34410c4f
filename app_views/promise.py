"""Promise view: latency against load, and what the promises cost in capacity."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from app_views import charts
from app_views.context import Context
from app_views.figures import figures_markdown
from app_views.text import plain
from capacity.answers.sentence import answer, binds, capacity_gap_rps
from capacity.planning.sizing import MODE_WORDS, latency_curve, mode_rates
from capacity.render.formatting import format_value


def render(st: Any, ctx: Context) -> None:
    z = ctx.sizing
    r, s = z.replica, z.scenario  # one replica of the layout chosen, at the load it carries
    ceiling, goodput = mode_rates(r, z.mode)
    basis = "" if z.goodput_basis == "mean" else f" at {z.goodput_basis}"
    st.markdown(figures_markdown([  # one element, where four st.metric in columns are nine (app_views/figures.py)
        (f"Goodput per replica{basis}", f"{z.replica_goodput_rps:,.2f} req/s", f"set by {binds(z)}"),
        ("In flight at goodput", f"{r['goodput_in_flight']:,.0f}", "requests being decoded at once (colocated)"),
        ("Capacity the promises cost", f"{capacity_gap_rps(r):,.2f} req/s",
         f"{r['capacity_given_up'] * 100:,.1f}% of the colocated ceiling"),
        ("TPOT at the ceiling", format_value("tpot_at_ceiling_s", r["tpot_at_ceiling_s"]), "at the largest batch"),
    ]))
    st.caption(f"One replica of the layout chosen: {z.gpus_per_replica} x {plain(r.scenario.gpu.name)}, "
               f"{MODE_WORDS[z.mode]}.")
    per_replica = z.load_per_replica_rps
    if ceiling > 0:
        curve = pd.DataFrame(latency_curve(r.scenario, z.mode, np.linspace(0, ceiling * 0.999, 300)))
        st.plotly_chart(charts.load_chart(curve, ceiling, goodput,
                                          s.slo.tpot_s * 1e3 if s.slo.tpot_s else None,
                                          s.slo.ttft_s * 1e3 if s.slo.ttft_s else None, per_replica),
                        width="stretch")
    if per_replica is not None:
        st.markdown(f"Your {z.load_rps:,.2f} requests/s over {z.replicas:,} replica{'s' if z.replicas > 1 else ''}: "
                    f"each carries {per_replica:,.2f} requests/s ({per_replica / ceiling * 100:,.0f}% of its ceiling): "
                    f"TPOT {format_value('tpot_at_load_s', z.tpot_at_load_s)}, TTFT "
                    f"{format_value('ttft_at_load_s', z.ttft_at_load_s)}"
                    + (f" (at {z.goodput_basis}: TPOT {format_value('tpot_at_load_s', z.tpot_at_percentile_s)}, TTFT "
                       f"{format_value('ttft_at_load_s', z.ttft_at_percentile_s)})"
                       if z.tpot_at_percentile_s is not None else "") + ".")
    elif z.load_rps:
        st.warning(plain(answer(z)))
    st.caption("TTFT model: the wait for the engine's next batched prefill pass plus that pass (validated against "
               "the simulator within 10% up to 80% of the ceiling; reads low near the ceiling, where requests also "
               "wait for KV memory).")
