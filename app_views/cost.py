"""Cost view: the price of the sizing, and of the fleet the entered load needs (the shared headroom and peak)."""

from __future__ import annotations

from typing import Any

from app_views.context import Context
from app_views.text import plain
from capacity.answer import cost_per_million_output_tokens, cost_per_month, monthly_cost
from capacity.fleet import fleet_for_load
from capacity.formatting import format_value


def money(value: float | None, digits: int = 2) -> str:
    return "no price set" if value is None or value != value else f"${value:,.{digits}f}"


def render(st: Any, ctx: Context) -> None:
    r, s = ctx.results, ctx.results.scenario
    c = st.columns(4)
    c[0].metric("$ per M output tokens at goodput", format_value("cost_per_million_tokens",
                                                                 r["cost_per_million_tokens"]))
    c[1].metric("$ per M output tokens at ceiling", format_value("cost_per_million_tokens_at_ceiling",
                                                                 r["cost_per_million_tokens_at_ceiling"]))
    c[2].metric("Output tokens/s at goodput", f"{r['output_tokens_per_s_at_goodput']:,.0f} tokens/s")
    c[3].metric("Monthly cost of this sizing", money(monthly_cost(r), 0),
                help=f"{s.gpu.gpus_per_replica * s.gpu.replicas:,} GPUs x price x 730 hours")
    if not ctx.load_rps:
        st.info("Enter the load (requests/s) under Workload in the sidebar to size a fleet for it.")
        return
    try:
        fleet = fleet_for_load(r, ctx.load_rps, ctx.peak_factor, ctx.headroom)
    except ValueError as exc:
        st.warning(plain(exc))
        return
    per_month = cost_per_month(fleet.cost_per_hour)
    per_million = cost_per_million_output_tokens(fleet.cost_per_hour, ctx.load_rps, s.workload.output_tokens)
    c = st.columns(4)
    c[0].metric("Replicas for your load", f"{fleet.replicas:,}", help=f"{fleet.gpus:,} GPUs")
    c[1].metric("Fleet cost", f"{money(fleet.cost_per_hour)} / hour")
    c[2].metric("Fleet cost per month", money(per_month, 0))
    c[3].metric("$ per M output tokens at your load", money(per_million, 3))
    st.caption(f"Sized for {fleet.design_load_rps:,.2f} requests/s (the entered {ctx.load_rps:,.2f} x peak factor "
               f"{ctx.peak_factor:g}) with {ctx.headroom * 100:,.0f}% headroom: {fleet.load_per_replica_rps:,.2f} "
               f"requests/s per replica against a goodput of {r['goodput_rps']:,.2f}. Cost per million output tokens "
               "is always the GPU cost divided by the output tokens served.")
