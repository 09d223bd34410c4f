"""The Fleet view (app_views/fleet.py) in a one-view Streamlit script: it renders the library's table."""

import json
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.fleet import ranked_table, win_back_lines
from capacity import Scenario
from capacity.planning.fleet import fleet_options

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
SCENARIO["workload"]["arrival_rate"] = 100.0
SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import streamlit as st
from app_views.context import Context
from app_views.fleet import render
from capacity import Scenario
data = json.loads({data!r})
text = json.dumps(data, sort_keys=True)
render(st, Context(Scenario.from_dict(data).evaluate(), data, text, "GB", 0.0, 1.0))
"""


@pytest.fixture()
def app(tmp_path):
    path = tmp_path / "fleet_app.py"
    path.write_text(SCRIPT.format(root=str(ROOT), data=json.dumps(SCENARIO)))
    return AppTest.from_file(str(path), default_timeout=60)


def test_the_view_sizes_the_entered_load_and_shows_the_cheapest_option(app):
    at = app.run()
    assert not at.exception and not at.error, at.exception
    from tests.app.test_app import figure_tables

    shown = figure_tables(at)
    expected = fleet_options(SCENARIO, target=100)
    best = expected[expected["meets_slo"]].iloc[0]
    assert shown["Cheapest that keeps the promises"] == f"{best['gpus']:,.0f} GPUs"  # 15: separate pools
    assert shown["Cost"] == f"${best['cost_per_hour']:,.2f} / hour"
    # One definition of $/M output tokens: $30/h over 100 requests/s x 300 tokens x 3600 s.
    assert shown["$ per M output tokens at your load"] == f"${30.0 / (100 * 300 * 3600) * 1e6:,.3f}"
    table = at.table[0].value
    assert len(table) == len(expected) and table.iloc[0]["GPUs"] == "15"
    assert any("back" in m.value for m in at.markdown)


def test_no_mode_chosen(app):
    at = app.run()
    at = at.multiselect(key="fleet_modes").set_value([]).run()
    assert not at.exception and any("serving mode" in i.value for i in at.info)


def test_helpers_format_and_explain():
    table = fleet_options(SCENARIO, target=100)
    shown = ranked_table(table, 100.0, 300)
    pools = shown[shown["serving"] == "disaggregated"].iloc[0]
    assert pools["replicas"] == "11 + 4" and pools["$ per hour"] == "$30.000"
    assert pools["$ per month"] == "$21,900"  # $30/h x 730 h
    assert pools["$ per M output tokens"] == "$0.278"  # $30 / (100 x 300 x 3600) x 1e6
    lines = win_back_lines(Scenario.from_dict(SCENARIO).evaluate())
    assert "37% of that back" in lines[1] and "100% back" in lines[2]
