"""The Classes sheet: the per-class sizing of a workload mix (``percentiles.sizing``), as values.

Written when the scenario lists ``workloads:`` classes or names a percentile. The goodput at a percentile is a
bisection over the analytic quantiles (capacity/model/percentiles.py), not a closed form, so the sheet carries the
library's values and says so; the Results sheet's ``goodput_rps`` stays the mean-based, live-formula number.
"""

from __future__ import annotations

import math

import xlsxwriter

from capacity.model.percentiles import sizing
from capacity.render.report import Report
from capacity.render.xlsx.cells import Formats, Worksheet

#: (header with unit, sizing column, scale to the unit)
COLUMNS = (
    ("class", "class", None), ("share of arrivals [-]", "share", 1.0), ("TPOT promise [ms]", "tpot_promise_s", 1e3),
    ("TTFT promise [ms]", "ttft_promise_s", 1e3), ("percentile", "percentile", 1.0),
    ("goodput at its percentile [req/s]", "goodput_rps", 1.0),
    ("mean-based goodput [req/s]", "mean_goodput_rps", 1.0), ("ceiling [req/s]", "ceiling_rps", 1.0),
    ("arrivals at the mix goodput [req/s]", "class_rps", 1.0),
    ("p50 TTFT at the mix goodput [ms]", "p50_ttft_s", 1e3), ("p99 TTFT at the mix goodput [ms]", "p99_ttft_s", 1e3),
    ("p50 TPOT at the mix goodput [ms]", "p50_tpot_s", 1e3), ("p99 TPOT at the mix goodput [ms]", "p99_tpot_s", 1e3),
)


def write_classes_sheet(wb: xlsxwriter.Workbook, f: Formats, report: Report) -> None:
    """One row per class and one for the whole mix (the last, ``all``); blank where a value does not apply."""
    ws = wb.add_worksheet("Classes", worksheet_class=Worksheet)
    ws.write_string(0, 0, f"Sizing per workload class: {report.name}", f.title)
    ws.write_string(1, 0, "Values from capacity (percentiles.sizing): the goodput at a class's percentile is the "
                          "largest total load at which that share of its requests keeps its promise; the mix's is "
                          "the smallest. The mean-based goodput keeps the promises on the average request.")
    for col, (name, _, _) in enumerate(COLUMNS):
        ws.write_string(3, col, name, f.header)
        ws.set_column(col, col, 14 if col else 12)
    ws.freeze_panes(4, 1)
    table = sizing(report.scenario)
    for i, row in enumerate(table.to_dict("records")):
        for col, (_, key, scale) in enumerate(COLUMNS):
            value = row.get(key)
            if scale is None:
                ws.write_string(4 + i, col, "whole mix" if i == len(table) - 1 else str(value))
            elif isinstance(value, (int, float)) and math.isfinite(value):
                ws.write_number(4 + i, col, float(value) * scale, f.human)


__all__ = ["COLUMNS", "write_classes_sheet"]
