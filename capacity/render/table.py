"""The ``capacity evaluate`` table: the answer's sentence, every result with its unit grouped by section (one
replica of the scenario's own layout), the answer's figures (``planning.sizing.Sizing``), then the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capacity.model.scenario import Results


def render_table(results: Results) -> str:
    """A readable table: the answer's sentence, every result with its unit grouped by section (one replica of the
    scenario's own layout), the answer's figures (``sizing.Sizing``), then the notes."""
    from capacity.answers.sentence import answer
    from capacity.model.analysis import RESULTS
    from capacity.planning.sizing import SIZING_RESULTS, size
    from capacity.render.formatting import SECTIONS, format_value

    binary = results.scenario.units == "GiB"
    s = results.scenario
    sizing = size(s, results)
    lines = [f"{s.name}: {s.model.name} on {s.gpu.count} x {s.gpu.name}" if s.name != s.model.name else
             f"{s.model.name} on {s.gpu.count} x {s.gpu.name}", "", answer(sizing), ""]
    for section, keys in SECTIONS.items():
        lines.append(section + (" (one replica as stated)" if section == "Memory" else ""))
        for key in keys:
            lines.append(f"  {key:<36} {format_value(key, results[key], binary):>20}   {RESULTS[key][1]}")
        lines.append("")
    lines += _section("Answer (the layout chosen, the fleet for the load, its cost)", sizing.to_dict(),
                      SIZING_RESULTS, binary)
    split = split_results(s)
    if split:
        from capacity.model.split_pools import SPLIT_RESULTS

        lines += _section("Split pools (scenario section pools: each pool its own GPU, count and parallelism)", split,
                          SPLIT_RESULTS, binary)
    spec = spec_results(results)
    if spec:
        from capacity.model.speculative import SPEC_RESULTS

        lines += _section("Speculative decoding (serving.speculative: TPOT with and without, by decode batch)", spec,
                          SPEC_RESULTS, binary)
    for note in sizing.notes():
        lines.append(f"note: {note}")
    return "\n".join(lines).rstrip() + "\n"


def split_results(scenario: Any) -> dict[str, float]:
    """The split-pool results of a scenario with a ``pools`` section (``split_pools.evaluate``); {} without."""
    if not scenario.raw.get("pools"):
        return {}
    from capacity.model.split_pools import evaluate, pool_scenarios

    return evaluate(pool_scenarios(scenario.raw))


def spec_results(results: Results) -> dict[str, float]:
    """The speculative-decoding results of a scenario with ``serving.speculative`` (``model.speculative``); {}."""
    from capacity.model.speculative import evaluate

    return evaluate(results.scenario, results)


def _section(title: str, values: dict[str, Any], meanings: dict[str, tuple[str, str]], binary: bool) -> list[str]:
    """A titled block of the table: one line a value (name, value with its unit, meaning), then a blank line; a value
    longer than 40 characters is cut with an ellipsis."""
    from capacity.render.formatting import format_value

    lines = [title]
    for key, value in values.items():
        shown = format_value(key, value, binary)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        lines.append(f"  {key:<36} {shown:>20}   {meanings[key][1]}")
    return [*lines, ""]
