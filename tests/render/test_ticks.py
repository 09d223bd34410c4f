"""Axis ticks a person reads (issue 30): round values with magnitude and unit, on every chart's value axes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from capacity.model.scenario import load_scenario
from capacity.render.ticks import label, linear_ticks, log_ticks

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "kind", "text"), [
    (2.0, "ms", "2 ms"), (500.0, "ms", "500 ms"), (1000.0, "ms", "1 s"), (2500.0, "ms", "2.5 s"),
    (0.05, "ms", "0.05 ms"), (500.0, "money", "$500"), (20_000.0, "money", "$20k"), (1.5e6, "money", "$1.5M"),
    (50.0, "count", "50"), (2000.0, "rate", "2k"), (0.0, "count", "0"),
])
def test_labels_carry_magnitude_and_unit(value, kind, text):
    assert label(value, kind) == text


def test_log_ticks_are_the_1_2_5_steps_spanning_the_data():
    ticks = log_ticks([3.2, 4_500.0, float("nan"), None, -1.0], "ms")
    assert ticks["tickvals"] == [2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    assert ticks["ticktext"][0] == "2 ms" and ticks["ticktext"][-1] == "5 s"
    assert log_ticks([float("inf")], "ms") == {}


def test_linear_ticks_are_round_steps_from_zero():
    # the report's TTFT axis once read 223/446/669/891 ms: at most 6 intervals of 1, 2, 2.5 or 5 x 10^k
    ticks = linear_ticks([0.0, 891.0], "ms")
    assert ticks["tickvals"] == [0, 200, 400, 600, 800, 1000]
    assert ticks["ticktext"] == ["0 ms", "200 ms", "400 ms", "600 ms", "800 ms", "1 s"]
    steps = {b - a for a, b in zip(ticks["tickvals"], ticks["tickvals"][1:], strict=False)}
    assert len(steps) == 1
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert mantissa in (1, 2, 2.5, 5)
    assert linear_ticks([0.0, 7_940.0], "rate")["ticktext"] == ["0", "2k", "4k", "6k", "8k"]


def test_report_charts_use_readable_ticks_and_no_cut_bar_text():
    from capacity.render.customer_report import build, fleet_figure, load_figure

    results = load_scenario(ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml").evaluate()
    figure = load_figure(results, 0.5)
    for axis in ("yaxis", "yaxis2"):
        texts = figure["layout"][axis]["ticktext"]
        assert texts and all(t.endswith(("ms", " s")) for t in texts)
    report = build(results)
    fleet = fleet_figure(report.fleet_table)
    assert fleet is not None
    assert "text" not in fleet["data"][0]  # the fleet is written on the axis, where automargin keeps it whole
    assert all("GPU" in row for row in fleet["data"][0]["y"])
    axis = fleet["layout"]["xaxis"]
    money = axis["title"]["text"].startswith("$")
    assert all(t.startswith("$") == money for t in axis["ticktext"])
    assert [label(v, "money" if money else "count") for v in axis["tickvals"]] == axis["ticktext"]
