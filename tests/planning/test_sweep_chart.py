"""Sweep workbooks carry a chart: goodput against the first varied input, one line per value of the second."""

import io
from pathlib import Path

import openpyxl
import pandas as pd

from capacity import load_scenario
from capacity.planning.sweep import sweep_bytes

ROOT = Path(__file__).resolve().parents[2]


def _book(specs):
    data = sweep_bytes(load_scenario(ROOT / "scenarios" / "essay-001-sale-day.yaml"), specs, "xlsx")
    return openpyxl.load_workbook(io.BytesIO(data))


def _sweep_frame(book) -> pd.DataFrame:
    rows = list(book["Sweep"].iter_rows(values_only=True))
    return pd.DataFrame(rows[1:], columns=rows[0])


def test_two_input_sweep_plots_one_line_per_value_of_the_second():
    book = _book(["serving.memory_utilization=0.7:0.95:6", "slo.tpot=30ms:80ms:3"])
    chart_sheet = book["Chart"]
    assert len(chart_sheet._charts) == 1
    assert len(chart_sheet._charts[0].series) == 3  # TPOT promises 30, 55 and 80 ms
    sweep = _sweep_frame(book)
    header = [c.value for c in chart_sheet[1]]
    assert header[0] == "memory_utilization" and header[1] == "tpot_slo_s = 0.03"
    for row in chart_sheet.iter_rows(min_row=2, values_only=True):
        if row[0] is None:
            continue
        for col, tpot in enumerate((0.03, 0.055, 0.08), 1):
            match = sweep[(sweep.memory_utilization == row[0]) & ((sweep.tpot_slo_s - tpot).abs() < 1e-12)]
            assert row[col] == match.goodput_rps.iloc[0]  # the chart's numbers are the Sweep sheet's


def test_one_input_sweep_plots_goodput_and_ceiling():
    book = _book(["workload.prompt_tokens=200:4000:8"])
    chart_sheet = book["Chart"]
    assert [c.value for c in chart_sheet[1]][:3] == ["prompt_tokens", "goodput_rps", "ceiling_rps"]
    assert len(chart_sheet._charts[0].series) == 2
    values = [row[1] for row in chart_sheet.iter_rows(min_row=2, max_row=9, values_only=True)]
    assert values == sorted(values, reverse=True)  # longer prompts, lower goodput
