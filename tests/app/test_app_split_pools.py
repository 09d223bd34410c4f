"""Issue 29: split prefill and decode pools chosen in the Fleet view (a GPU type and TP per pool), written to the
scenario's ``pools`` section, and the split answer shown there: the same sizing ``capacity fleet``, the report and
the library give (``planning.sizing.size``, the one answer)."""

import json
import subprocess
import sys
from pathlib import Path

import yaml
from streamlit.testing.v1 import AppTest

from app_views.state import to_yaml
from capacity import Scenario
from capacity.planning.sizing import size

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
CHAT = "chat assistant, llama-3.1-8b on 1 x H100 SXM"


def split_app() -> AppTest:
    """The chat preset at 40 requests/s with split pools: prefill on L40S, decode on H100 SXM (the Fleet view)."""
    at = AppTest.from_file(APP, default_timeout=90).run()
    at = at.sidebar.selectbox(key="preset").select(CHAT).run()
    at.sidebar.number_input(key="arrival_rate").set_value(40.0).run()
    at.button_group(key="view").set_value("Fleet").run()
    at.checkbox(key="fleet_split").check().run()
    at.selectbox(key="split_prefill_gpu").select("l40s").run()
    at.selectbox(key="split_decode_gpu").select("h100-sxm").run()
    return at


def test_split_pools_are_written_to_the_scenario_and_answered_as_capacity_fleet_and_the_report_do(tmp_path):
    at = split_app()
    assert not at.exception, at.exception
    data = yaml.safe_load(to_yaml(at.session_state["doc"]))
    assert data["pools"] == {"prefill": {"gpu": {"name": "l40s", "count": 1}},
                             "decode": {"gpu": {"name": "h100-sxm", "count": 1}}}
    z = size(Scenario.from_dict(data))
    # L40S prefill replicas ($0.86/h each) and H100 decode replicas beat one pool of H100s ($6.98/h): the answer splits
    assert z.mode == "split" and (z.prefill_gpu, z.gpu) == ("l40s", "h100-sxm") and z.cost_per_hour < 6.98
    from tests.app.test_app import figure_tables

    shown = figure_tables(at)
    # The Fleet view's cheapest option is the one answer, and so is capacity fleet's rank 1
    assert shown["Cheapest that keeps the promises"] == f"{z.gpus:,.0f} GPUs"
    assert shown["Cost"] == f"${z.cost_per_hour:,.2f} / hour"
    path = tmp_path / "split.yaml"
    path.write_text(to_yaml(data))
    out = subprocess.run([sys.executable, "-m", "capacity", "fleet", str(path), "--target-rps", "40", "--format",
                          "json"], capture_output=True, text=True, cwd=ROOT, check=True)
    first = json.loads(out.stdout)[0]
    assert (first["mode"], first["gpus"], first["cost_per_hour"]) == (z.mode, z.gpus, z.cost_per_hour)
    assert (first["prefill_gpu"], first["gpu"]) == (z.prefill_gpu, z.gpu)
    assert (first["prefill_replicas"], first["decode_replicas"]) == (z.prefill_replicas, z.decode_replicas)
    # the report renders the same answer
    from capacity.render.report import build_report

    report = build_report(Scenario.from_dict(data).evaluate())
    assert report.sizing.to_dict() == z.to_dict()
    from capacity.render.customer_report import customer_report_html

    html = customer_report_html(Scenario.from_dict(data).evaluate(), compare_gpus=[])
    assert "GPUs in split pools" in html and f"{z.gpus:,} GPUs in split pools" in html


def test_turning_split_pools_off_removes_the_section():
    at = split_app()
    at.checkbox(key="fleet_split").uncheck().run()
    assert not at.exception and "pools" not in at.session_state["doc"]
