"""Summary view (the landing view): what binds, what would move it, and the key figures, as text only.

No chart and no table widget: the page's first number should not wait for the browser to fetch and compile
plotly.js (4.7 MB) or the data grid, and a rerun redraws three text blocks. The charts are one click away.
"""

from __future__ import annotations

from typing import Any

import streamlit

from app_views.context import Context
from app_views.state import humanise
from app_views.text import plain
from capacity.answers.sentence import memory_split
from capacity.answers.verdict import verdict
from capacity.inputs.units import format_bytes
from capacity.model.analysis import RESULTS
from capacity.planning.sizing import SIZING_RESULTS
from capacity.render.formatting import format_value
from capacity.render.glossary import value_in_words

#: The figures a salesperson is asked about after the headline, in the order a conversation takes: result key ->
#: its name on screen (the meaning column is the library's, ``capacity.model.analysis.RESULTS``).
KEY_FIGURES = {"kv_bytes_per_token": "KV cache per token", "pool_bytes": "KV pool per GPU",
               "blocks_per_request": "Blocks per request", "decode_step_s": "Decode step",
               "decode_bound": "Decode step bound by", "prefill_s": "Prefill",
               "tpot_at_ceiling_s": "TPOT at the ceiling",
               "ttft_at_goodput_s": "TTFT at goodput", "output_tokens_per_s_at_goodput": "Output at goodput",
               "capacity_given_up": "Ceiling the promises give up"}


def _shown(key: str, value: float | str, binary: bool) -> str:
    """A result as shown: fractions as percentages, everything else with its unit (``format_value``)."""
    if key == "capacity_given_up" and isinstance(value, float):
        return f"{value * 100:,.1f}%"
    return str(value_in_words(format_value(key, value, binary)))


def power_and_speculation(ctx: Context) -> list[tuple[str, str, str]]:
    """Key-figure rows of the sizing's power (issue 29: the fleet's power and electricity a month, from the one
    answer) and speculative decoding (tokens per verification, TPOT speed-up; ``capacity.model.speculative``), where
    the sizing has them: (label, value, meaning)."""
    z, rows = ctx.sizing, []
    if z.power_kw is not None:
        rows.append(("Fleet power", format_value("sizing_power_kw", z.power_kw), SIZING_RESULTS["sizing_power_kw"][1]))
        rows.append(("Electricity per month", format_value("sizing_energy_cost_per_month", z.energy_cost_per_month)
                     if z.energy_cost_per_month is not None else "no price set",
                     SIZING_RESULTS["sizing_energy_cost_per_month"][1] + " (electricity price under GPU, $/kWh)"))
    spec = ctx.results.scenario.serving.speculative
    if spec:
        from capacity.model.speculative import evaluate

        sp = evaluate(ctx.results.scenario, ctx.results)
        rows.append(("Speculative decoding", f"{spec['method']}: {sp['spec_expected_tokens_per_step']:,.2f} tokens",
                     f"tokens one verification yields ({spec['draft_tokens']} drafted, acceptance "
                     f"{spec['acceptance_rate']:.3f} each); every figure includes it"))
        rows.append(("TPOT speed-up", f"{sp['spec_speedup_single']:,.2f}x / {sp['spec_speedup_at_batch_max']:,.2f}x",
                     "plain TPOT over speculative TPOT at one sequence / at the largest batch"))
    return rows


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table of ``rows`` (every cell escaped: it shows exactly its characters)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(plain(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@streamlit.cache_resource(show_spinner=False, max_entries=256)
def cached_verdict(scenario_json: str, _answer: Any) -> list[str]:
    """``capacity.answers.verdict.verdict`` of the sizing whose canonical JSON is ``scenario_json`` (it re-evaluates
    what-ifs): ``_answer`` is its one answer (``capacity.planning.sizing.Sizing``: the chosen layout), or its Results
    where a view is drawn without one."""
    return verdict(_answer)


def render(st: Any, ctx: Context) -> None:
    r = ctx.results
    st.markdown("##### What binds and what would move it\n" +
                "\n".join(f"- {plain(humanise(line))}" for line in cached_verdict(ctx.scenario_json, ctx.sizing or r)))
    split = memory_split(r)
    row = st.container(horizontal=True, wrap=False, gap="large")  # one element; columns(2) are three
    row.markdown(f"##### Where one GPU's memory goes ({ctx.unit})\n" + _table(
        ("part", "memory"), [(part, format_bytes(value, ctx.binary)) for part, value in split.items()]),
        width=340)  # wide enough that "16.00 GiB" stays on one line beside the wider Key figures table
    row.markdown("##### Key figures\n" + _table(
        ("quantity", "value", "meaning"),
        [(label, _shown(key, r[key], ctx.binary), RESULTS[key][1]) for key, label in KEY_FIGURES.items()] +
        power_and_speculation(ctx)))
    st.caption("".join(plain(f"Note: {humanise(note)}") + "  \n" for note in ctx.sizing.notes()) +
               "Charts: Memory (where memory goes, requests by context length), Roofline (the batch knee), "
               "Promise (latency against load); the full list of results is under All numbers.")
