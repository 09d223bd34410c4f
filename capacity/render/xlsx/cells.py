"""Cell writing shared by the sheets: exact numbers, cached values, formats, and xlsxwriter's worksheet made fast."""

from __future__ import annotations

import re

import numpy as np
import xlsxwriter
from xlsxwriter.worksheet import Worksheet as _XlsxWorksheet

from capacity.formulas._numeric import finite_or_none
from capacity.render.xlsx.formulas import NA


class Exact(float):
    """A float that xlsxwriter writes in full. It writes numbers with ``%.16G``, which does not give back every
    double (0.1 + 0.2 reads back as 0.3); the inputs must be the library's to the last bit, and LibreOffice and
    Excel read 17 significant digits exactly."""

    def __format__(self, spec: str) -> str:
        return repr(float(self)) if spec.upper().endswith("G") else super().__format__(spec)


#: Functions the formulas use: none is one of the Excel 365 functions xlsxwriter rewrites (``_xlfn.``).
_FUNCTIONS = frozenset("ABS AND CEILING FALSE IF IFERROR INT ISBLANK ISNA LN MAX MIN N NA NOT OR SQRT TRUE".split())
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\(")


class Worksheet(_XlsxWorksheet):
    """xlsxwriter's worksheet, skipping its ~30 regular-expression passes for Excel 365 functions on formulas that
    call none (the Solver sheet has some 9,000 formulas; the passes took 70% of the time to write a workbook).
    tests/render/test_xlsx.py checks that xlsxwriter's own preparation leaves every formula written the same."""

    def _prepare_formula(self, formula: str, expand_future_functions: bool = False) -> str:
        if formula.startswith("=") and not formula.endswith("}") and _FUNCTIONS.issuperset(_CALL.findall(formula)):
            return formula[1:]
        return super()._prepare_formula(formula, expand_future_functions)


def cached(value: object) -> float | str | bool:
    """A cell's cached value: numbers as floats, non-finite and None as #N/A."""
    if isinstance(value, np.bool_):
        value = bool(value)
    if value is None:
        return NA
    if isinstance(value, (bool, str)):
        return value
    number = finite_or_none(value)
    return NA if number is None else number


class Formats:
    def __init__(self, wb: xlsxwriter.Workbook) -> None:
        self.title = wb.add_format({"bold": True, "font_size": 14})
        self.header = wb.add_format({"bold": True, "bottom": 1, "bg_color": "#DDDDDD"})
        self.section = wb.add_format({"bold": True, "italic": True})
        self.input = wb.add_format({"bg_color": "#FFF2CC", "border": 1, "border_color": "#BFBFBF"})
        self.input_int = wb.add_format({"bg_color": "#FFF2CC", "border": 1, "border_color": "#BFBFBF",
                                        "num_format": "#,##0"})
        self.input_number = wb.add_format({"bg_color": "#FFF2CC", "border": 1, "border_color": "#BFBFBF",
                                           "num_format": "#,##0.0########"})
        self.value = wb.add_format({})
        self.human = wb.add_format({"num_format": "#,##0.000"})
        self.money = wb.add_format({"num_format": "$#,##0.00"})
        self.big = wb.add_format({"bold": True, "font_size": 12, "num_format": "#,##0.00"})
        self.big_count = wb.add_format({"bold": True, "font_size": 12, "num_format": "#,##0"})
        self.big_money = wb.add_format({"bold": True, "font_size": 12, "num_format": "$#,##0.00"})
        self.big_text = wb.add_format({"bold": True, "font_size": 12})
        self.count = wb.add_format({"num_format": "#,##0"})
        self.wrap = wb.add_format({"text_wrap": True, "valign": "top"})


def is_count(key: str, unit: str) -> bool:
    return unit in ("B", "blocks") or (unit == "requests" and key != "goodput_in_flight")


def header(ws, f: Formats, columns: tuple[tuple[str, int], ...]) -> None:
    for col, (title, width) in enumerate(columns):
        ws.write_string(0, col, title, f.header)
        ws.set_column(col, col, width)
    ws.freeze_panes(1, 0)
