"""The Fleet view (app_views/fleet.py) in a one-view Streamlit script: it renders the library's table."""

import json
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.fleet import ranked_table, win_back_lines
from capacity import Scenario
from capacity.fleet import fleet_options

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import streamlit as st
from app_views.fleet import render_fleet
from capacity import Scenario
data = json.loads({data!r})
render_fleet(st, Scenario.from_dict(data).evaluate(), data)
"""


@pytest.fixture()
def app(tmp_path):
    path = tmp_path / "fleet_app.py"
    path.write_text(SCRIPT.format(root=str(ROOT), data=json.dumps(SCENARIO)))
    return AppTest.from_file(str(path), default_timeout=60)


def test_the_view_shows_the_cheapest_option_and_the_ranked_table(app):
    at = app.run()
    assert not at.exception, at.exception
    at = at.number_input(key="fleet_rps").set_value(100.0).run()
    assert not at.exception and not at.error
    shown = {m.label: m.value for m in at.metric}
    expected = fleet_options(SCENARIO, target=100)
    best = expected[expected["meets_slo"]].iloc[0]
    assert shown["Cheapest that keeps the promises"] == f"{best['gpus']:,.0f} GPUs"  # 15: separate pools
    assert shown["Cost"] == f"${best['cost_per_hour']:,.2f} / hour"
    table = at.dataframe[0].value
    assert len(table) == len(expected) and table.iloc[0]["GPUs"] == "15"
    assert any("back" in m.value for m in at.markdown)


def test_tokens_per_day_and_no_mode_chosen(app):
    at = app.run()
    at = at.radio(key="fleet_unit").set_value("tokens/day").run()
    assert not at.exception and at.dataframe
    at = at.multiselect(key="fleet_modes").set_value([]).run()
    assert not at.exception and any("serving mode" in i.value for i in at.info)


def test_helpers_format_and_explain():
    table = fleet_options(SCENARIO, target=100)
    shown = ranked_table(table)
    pools = shown[shown["serving"] == "disaggregated"].iloc[0]
    assert pools["replicas"] == "11 + 4" and pools["$ / hour"] == "$30.000"
    lines = win_back_lines(Scenario.from_dict(SCENARIO).evaluate())
    assert "37% of that back" in lines[1] and "100% back" in lines[2]
