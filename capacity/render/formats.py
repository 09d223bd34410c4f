"""The one registry of output formats: how ``capacity evaluate`` (and anything else that writes a scenario's
results) renders them as text with units, JSON, CSV or an XLSX workbook.

Each format is a function ``(results, units) -> str | bytes`` that imports its renderer only when called, so
naming a format costs nothing at start-up (``capacity --version`` loads no numpy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity.model.scenario import Results


@dataclass(frozen=True)
class Format:
    """An output format: its help line, whether it is binary (needs ``-o FILE``) and its renderer."""

    help: str
    binary: bool
    render: Callable[[Results, str], str | bytes]


def _table(results: Results, units: str) -> str:
    from capacity.render.table import render_table

    return render_table(results)


def _json(results: Results, units: str) -> str:
    import json

    from capacity.render.report import report_for, to_json, to_json_dict
    from capacity.render.table import spec_results, split_results

    report = report_for(results)
    split = {**split_results(results.scenario), **spec_results(results)}  # split pools, speculation: beside the rest
    if not split:
        return to_json(report)
    return json.dumps({**to_json_dict(report), **split}, indent=2, ensure_ascii=False, default=str) + "\n"


def _csv(results: Results, units: str) -> str:
    from capacity.render.report import report_for, to_csv

    return to_csv(report_for(results), units)


def _xlsx(results: Results, units: str) -> bytes:
    from capacity.render.report import report_for
    from capacity.render.xlsx import workbook_bytes

    return workbook_bytes(report_for(results))


#: Format name -> Format, in the order ``--help`` lists them; the first is the default.
FORMATS: dict[str, Format] = {
    "table": Format("text with units: the answer's sentence, every result by section, the answer, notes", False,
                    _table),
    "json": Format("one JSON object, base units (bytes, seconds, requests/s), inputs with units and sources", False,
                   _json),
    "csv": Format("one row per value with its unit (--units base or human)", False, _csv),
    "xlsx": Format("a workbook whose results are live formulas (needs -o FILE.xlsx)", True, _xlsx),
}


def render(results: Results, name: str, units: str = "base") -> str | bytes:
    """``results`` in the format ``name`` (a key of ``FORMATS``)."""
    return FORMATS[name].render(results, units)


__all__ = ["FORMATS", "Format", "render"]
