"""The Autoscaling view (issue 31): the day simulated on a button, the answer, its split and the day chart, the same
numbers ``plan_autoscaling`` gives."""

import json
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.autoscale import POLICIES, cached_plan, day_chart, expected_requests, table
from capacity.model.scenario import Scenario
from capacity.planning.autoscaling import DaySpec, plan_autoscaling
from capacity.planning.daily import diurnal_rates
from capacity.simulator.autoscale import Delays, Policy
from capacity.simulator.traffic import Burst

ROOT = Path(__file__).resolve().parents[2]


def test_the_view_waits_for_its_button_and_sends_a_large_day_to_the_command_line():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.button_group(key="view").set_value("Autoscaling").run()
    assert not at.exception and not at.error
    from tests.app.test_app import figure_tables

    assert "Answer" not in figure_tables(at)   # nothing simulated before the button
    at.number_input(key="as_peak").set_value(0.5).run()
    assert at.button(key="as_run") is not None and not at.code
    at.number_input(key="as_peak").set_value(100.0).run()     # 5.8 million requests: the command line's work
    assert not at.exception and "capacity autoscale scenario.yaml --peak-rps 100" in at.code[0].value
    assert expected_requests(100.0, 3.0) == pytest.approx(100 * (1 + 1 / 3) / 2 * 86400)


def test_the_views_plan_is_the_librarys():
    """What the button shows (run here outside the app's 5 s budget, which a loaded test machine cannot promise):
    the rows of ``plan_autoscaling`` for the view's day and policies, and the answer's day in 15-minute bins."""
    doc = yaml.safe_load((ROOT / "scenarios" / "sim-essay-001-analytic.yaml").read_text())
    doc["slo"] = {"tpot": "200 ms", "ttft": "2 s", "percentile": 99}
    doc["fleet"] = {"modes": ["colocated"], "tensor_parallel": [1]}
    shown = cached_plan(json.dumps(doc), 1.0, 3.0, (18.0, 10.0, 2.0), (120.0, 0.0, 0.0, 300.0), 1.6)
    plan = plan_autoscaling(Scenario.from_dict(doc), DaySpec(tuple(diurnal_rates(1.0, 3.0)),
                                                             bursts=(Burst(18 * 3600.0, 600.0, 2.0),)),
                            Delays(provision_s=120.0), [Policy(k, t) for k, t in POLICIES], 1.6)
    assert [r["policy"] for r in shown["rows"]] == [r["policy"] for r in plan.rows()]
    assert [r["gpu_hours_per_day"] for r in shown["rows"]] == pytest.approx([r["gpu_hours_per_day"]
                                                                              for r in plan.rows()])
    assert len(shown["timeline"]["start_s"]) == 96
    assert day_chart(shown["timeline"], 2.0, "day")["data"][1]["y"] == shown["timeline"]["ready_replicas"]


def test_day_chart_and_table_render_what_they_are_given():
    timeline = {"start_s": [0.0, 900.0], "rate_rps": [1.0, 2.0], "ready_replicas": [1.0, 2.0],
                "paid_replicas": [1.0, 2.0], "p99_ttft_s": [0.2, float("nan")]}
    fig = day_chart(timeline, 2.0, "day")
    assert [t["name"] for t in fig["data"]] == ["load (requests/s)", "replicas routable", "replicas paid",
                                                "p99 TTFT (s)"]
    assert fig["data"][0]["x"] == [0.0, 0.25] and fig["data"][3]["y"] == [0.2, None]
    assert fig["layout"]["shapes"][0]["y0"] == 2.0
    shown = table([{"policy": "p", "gpu_hours_per_day": 1.0, "cost_per_month": 10.0, "share_ttft": 0.5,
                    "share_tpot": 1.0, "worst_window_share": 0.25, "keeps_promises": False, "chosen": False}])
    assert shown.iloc[0]["TTFT kept"] == "50.00%" and shown.iloc[0]["$ per month"] == "$10"
