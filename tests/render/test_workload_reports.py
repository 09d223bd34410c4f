"""The per-class sizing of a mix in the reports (customer HTML, XLSX Classes sheet) and the CLI: the library's
numbers (``percentiles.sizing``), and nothing extra for a single shape without a percentile."""

import io
import json
import math
import re

import openpyxl
import pytest

from capacity import Scenario, load_scenario
from capacity.cli import main
from capacity.model.percentiles import sizing
from capacity.render.customer_report import classes_html, customer_report_html
from capacity.render.report import report_for
from capacity.render.xlsx import workbook_bytes
from capacity.render.xlsx.classes import COLUMNS
from tests.conftest import SCENARIOS


@pytest.fixture(scope="module")
def mix():
    scenario = load_scenario(SCENARIOS / "mix-chat-rag-h100.yaml")
    return scenario, sizing(scenario)


def test_customer_report_carries_the_per_class_table(mix):
    scenario, table = mix
    html = customer_report_html(scenario.evaluate(), date="2026-12-01")
    assert "<h2>Per workload class</h2>" in html
    values = {k: float(v) for k, v in re.findall(r'data-key="(class:[^"]+)" data-value="([^"]+)"', html)}
    for i, row in enumerate(table.to_dict("records")):
        name = "all" if i == len(table) - 1 else row["class"]
        assert values[f"class:{name}:goodput_rps"] == row["goodput_rps"]
        assert values[f"class:{name}:mean_goodput_rps"] == row["mean_goodput_rps"]
    assert values["class:chat:goodput_rps"] == pytest.approx(5.705, abs=1e-3)
    assert values["class:all:mean_goodput_rps"] == pytest.approx(7.047, abs=1e-3)
    assert values["class:chat:p99_tpot_s"] == pytest.approx(0.05, rel=1e-6)  # chat binds at its p99 TPOT


def test_xlsx_classes_sheet_is_the_library_table(mix):
    scenario, table = mix
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(scenario, date="2026-12-01"))))
    assert wb.sheetnames[-1] == "Classes"
    sheet = wb["Classes"]
    assert [c.value for c in sheet[4]] == [name for name, _, _ in COLUMNS]
    rows = list(sheet.iter_rows(min_row=5, values_only=True))
    assert [r[0] for r in rows] == ["chat", "rag", "whole mix"]
    for got, want in zip(rows, table.to_dict("records"), strict=True):
        for col, (_, key, scale) in enumerate(COLUMNS[1:], start=1):
            value = want.get(key)
            if isinstance(value, float) and math.isfinite(value):
                assert got[col] == pytest.approx(value * scale, rel=1e-12), key
            else:
                assert got[col] is None, key


def test_a_single_shape_without_percentile_adds_nothing(essay001):
    assert classes_html(essay001.evaluate()) == ""
    wb = openpyxl.load_workbook(io.BytesIO(workbook_bytes(report_for(essay001, date="2026-12-01"))))
    assert "Classes" not in wb.sheetnames


def test_essay_001_with_a_p99_promise_reports_both_goodputs(essay001):
    """Done-when of issue 15: the p99 goodput (4.79 req/s) beside the mean-based 5.9, in the report and the CLI."""
    p99 = Scenario.from_dict({**essay001.raw, "slo": {"tpot": "50 ms", "percentile": 99}})
    html = classes_html(p99.evaluate())
    values = {k: float(v) for k, v in re.findall(r'data-key="(class:[^"]+)" data-value="([^"]+)"', html)}
    assert values["class:all:goodput_rps"] == pytest.approx(4.79, abs=0.01)
    assert round(values["class:all:mean_goodput_rps"], 1) == 5.9 == round(p99.evaluate()["goodput_rps"], 1)


def test_cli_classes_are_the_library_table(mix, scenario_dir, capsys):
    _, table = mix
    assert main(["curve", str(scenario_dir / "mix-chat-rag-h100.yaml"), "--kind", "classes", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for got, want in zip(rows, table.to_dict("records"), strict=True):
        assert got["class"] == want["class"]
        assert got["goodput_rps"] == pytest.approx(want["goodput_rps"], rel=1e-12)
        assert got["mean_goodput_rps"] == pytest.approx(want["mean_goodput_rps"], rel=1e-12)
