"""Cost view: the price of the sizing, and of the fleet the entered load needs (the shared headroom and peak)."""

from __future__ import annotations

from typing import Any

from app_views.context import Context
from app_views.figures import Figures
from app_views.text import plain
from capacity.answers.sentence import answer, layout_words
from capacity.render.formatting import format_value


def money(value: float | None, digits: int = 2) -> str:
    return "no price set" if value is None or value != value else f"${value:,.{digits}f}"


def render(st: Any, ctx: Context) -> None:
    r, z = ctx.results, ctx.sizing
    rep = z.replica
    c = Figures(st)
    c.metric("$ per M output tokens at goodput", format_value("cost_per_million_tokens",
                                                                 rep["cost_per_million_tokens"]),
                help="one replica of the layout chosen, running at its goodput")
    c.metric("$ per M output tokens at ceiling", format_value("cost_per_million_tokens_at_ceiling",
                                                                 rep["cost_per_million_tokens_at_ceiling"]))
    c.metric("Output tokens/s at goodput", f"{rep['output_tokens_per_s_at_goodput']:,.0f} tokens/s")
    c.metric("Price per GPU-hour", money(z.price_per_gpu_hour), help=f"source: {z.price_source}")
    c.draw()
    _power(st, ctx)
    if not ctx.load_rps:
        st.info("Enter the load (requests/s) under Workload in the sidebar to size a fleet for it.")
        return
    if z.replicas is None:
        st.warning(plain(answer(z)))
        return
    c = Figures(st)
    c.metric("Replicas for your load", f"{z.replicas:,}", help=f"{z.gpus:,} GPUs: {layout_words(z)}")
    c.metric("Fleet cost", f"{money(z.cost_per_hour)} / hour")
    c.metric("Fleet cost per month", money(z.cost_per_month, 0))
    c.metric("$ per M output tokens at your load", money(z.cost_per_million_tokens, 3))
    c.draw()
    st.caption(f"Sized for {z.design_load_rps:,.2f} requests/s (the entered {z.load_rps:,.2f} x peak factor "
               f"{z.peak_factor:g}) with {z.headroom * 100:,.0f}% headroom: {z.load_per_replica_rps:,.2f} "
               f"requests/s per replica against a goodput of {z.replica_goodput_rps:,.2f}"
               f"{'' if z.goodput_basis == 'mean' else ' at ' + z.goodput_basis}. Cost per million output tokens "
               "is always the GPU cost divided by the output tokens served. The stated layout's own replica: "
               f"{format_value('cost_per_million_tokens', r['cost_per_million_tokens'])} per M at its goodput.")


def _power(st: Any, ctx: Context) -> None:
    """Power beside the GPU cost (issue 29): the fleet's power and energy a month at full board power (an upper
    bound) and, with ``gpu.energy_price_per_kwh``, its electricity cost; then the speculative decoding the sizing
    assumes, with and without (``_speculation``). Every number is the one answer's (``ctx.sizing``)."""
    z, g = ctx.sizing, ctx.results.scenario.gpu
    if z.energy_kwh_per_month is not None:
        c = Figures(st)
        c.metric("Fleet power", format_value("sizing_power_kw", z.power_kw),
                 help=(f"{z.gpus or 0:,} GPU{'' if z.gpus == 1 else 's'} x {g.tdp_watts:g} W board power"
                       if z.mode != "split" else
                       f"{z.gpus or 0:,} GPUs of both pools x each one's board power") +
                      f" x PUE {g.pue:g}: every GPU at full board power, an upper bound")
        c.metric("Energy per month", f"{z.energy_kwh_per_month:,.0f} kWh", help="the fleet's power x 730 h")
        c.metric("Electricity per month", money(z.energy_cost_per_month, 0),
                 help=f"${g.energy_price_per_kwh:g} per kWh x the energy; beside the GPU cost of "
                      f"{money(z.cost_per_month, 0)} a month" if g.energy_price_per_kwh is not None else
                 "set the electricity price ($/kWh) under GPU in the sidebar (Show all inputs)")
        if z.energy_per_million_tokens_kwh is not None:
            c.metric("Energy per M output tokens", f"{z.energy_per_million_tokens_kwh:,.3g} kWh",
                     help=f"electricity {money(z.energy_cost_per_million_tokens, 4)} per M output tokens"
                     if z.energy_cost_per_million_tokens is not None else "at full board power")
        c.draw()
    else:
        st.caption(plain(f"No board power is known for {g.name}: type it under GPU in the sidebar (Show all inputs) "
                         "to see the fleet's energy and its electricity cost."))
    _speculation(st, ctx)


def _speculation(st: Any, ctx: Context) -> None:
    """Speculative decoding (``serving.speculative``): tokens per verification, and TPOT with and without it at one
    sequence and at the largest batch (``capacity.model.speculative.evaluate``), where it stops paying."""
    spec = ctx.results.scenario.serving.speculative
    if not spec:
        return
    from capacity.model.speculative import evaluate

    sp = evaluate(ctx.results.scenario, ctx.results)
    c = Figures(st)
    c.metric("Tokens per verification", f"{sp['spec_expected_tokens_per_step']:,.2f}",
             help=f"{spec['method']}: {spec['draft_tokens']} drafted, acceptance {spec['acceptance_rate']:.3f} each")
    c.metric("TPOT, one sequence", format_value("spec_tpot_single_s", sp["spec_tpot_single_s"]),
             help=f"{format_value('spec_tpot_plain_single_s', sp['spec_tpot_plain_single_s'])} without: "
                  f"{sp['spec_speedup_single']:,.2f}x faster")
    c.metric("TPOT at the largest batch", format_value("spec_tpot_at_batch_max_s", sp["spec_tpot_at_batch_max_s"]),
             help=f"{sp['spec_speedup_at_batch_max']:,.2f}x the plain step's speed at "
                  f"{ctx.results['batch_max']:,.0f} sequences")
    breakeven = sp["spec_breakeven_batch"]
    c.metric("Pays up to", f"{breakeven:,.0f} sequences" if breakeven else "never",
             help="the largest decode batch where speculation still lowers TPOT")
    c.draw()
    st.caption(plain(f"Speculative decoding ({spec['method']}): {spec['draft_tokens']} drafted tokens per step, "
                     f"{spec['expected_tokens']:.2f} tokens per verification assumed; every cost above includes "
                     f"it."))
