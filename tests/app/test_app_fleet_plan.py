"""Issue 13, rest: the fleet plan (peak factor, headroom) is part of the scenario; the load can be entered as
tokens/day; the sizing is named after itself. AppTest drives the real script; expectations are computed by hand
or by the library's own entry points (``fleet_options``, ``capacity fleet``) from the scenario the app saves."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.state import doc_from_link, link_params, load_text, to_yaml
from capacity import Scenario, ScenarioError
from capacity.planning.fleet import fleet_options

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
CHAT = "chat assistant, llama-3.1-8b on 1 x H100 SXM"  # llama-3.1-8b, 1 x h100-sxm, 1,200 + 250 tokens, 10 req/s


def start(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if params:
        at.query_params.update(params)
    return at.run()


def saved(at: AppTest) -> dict:
    return yaml.safe_load(to_yaml(at.session_state["doc"]))


def metrics(at: AppTest) -> dict[str, str]:
    from tests.app.test_app import metrics as shown

    return shown(at)


def chat() -> AppTest:
    return start().sidebar.selectbox(key="preset").select(CHAT).run()


def show_all(at: AppTest) -> AppTest:
    """Turn on "Show all inputs": headroom, peak factor and pipeline stages are drawn only then."""
    return at.sidebar.toggle(key="more_inputs").set_value(True).run()


# ---------------------------------------------------------------- headroom and peak factor in the scenario


def test_headroom_and_peak_factor_are_saved_in_the_scenario_and_size_the_headline():
    at = show_all(chat())
    at.sidebar.number_input(key="headroom_pct").set_value(30.0).run()
    at.sidebar.number_input(key="peak_factor").set_value(3.0).run()
    data = saved(at)
    assert data["fleet"] == {"headroom": 0.3, "peak_factor": 3.0}
    results = Scenario.from_dict(data).evaluate()
    assert results.scenario.fleet.headroom == 0.3 and results.scenario.fleet.peak_factor == 3.0
    from capacity.answers.sentence import answer
    from capacity.planning.sizing import size

    z = size(results.scenario, results)  # the entered 10 requests/s x 3, 30% spare: the one answer
    assert z.design_load_rps == 30.0 and z.headroom == 0.3
    shown = " ".join(m.value for m in at.markdown).replace("\\", "")  # shown escaped (app_views.text.plain)
    assert answer(z) in shown and "peak x3, 30% headroom" in shown
    at.sidebar.number_input(key="headroom_pct").set_value(0.0).run()
    assert "headroom" not in saved(at)["fleet"]  # 0 % is the library's default: left out, as the CLI reads it


def test_headroom_and_peak_factor_round_trip_through_link_and_file():
    at = show_all(chat())
    at.sidebar.number_input(key="headroom_pct").set_value(25.0).run()
    at.sidebar.number_input(key="peak_factor").set_value(10.0).run()
    doc = at.session_state["doc"]
    assert load_text(to_yaml(doc)) == doc                                 # saved file -> upload
    params = link_params(doc, "Fleet")
    assert params["headroom_pct"] == "0.25" and params["peak_factor"] == "10"
    again, problems = doc_from_link(params, {})
    assert problems == [] and again == doc                                # link -> sizing
    opened = start(params)                                                # the link opened in a new session
    assert opened.session_state["doc"] == doc
    hidden = " ".join(c.value for c in opened.sidebar.caption).replace("\\", "")  # shown escaped
    assert "headroom 25%" in hidden and "peak factor 10" in hidden
    show_all(opened)
    assert opened.sidebar.number_input(key="headroom_pct").value == 25.0
    assert opened.sidebar.number_input(key="peak_factor").value == 10.0


def test_fleet_section_is_validated_in_the_users_words():
    data = yaml.safe_load((ROOT / "scenarios" / "essay-001-sale-day.yaml").read_text())
    data["fleet"] = {"headroom": 20, "peak_factor": 0}
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    text = str(err.value)
    assert "fleet.headroom must be in [0, 1), got 20 (a fraction: 20% is 0.2)" in text
    assert "fleet.peak_factor must be > 0" in text


def _cli_fleet(path: Path, *args: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "capacity", "fleet", str(path), "--target-rps", "60",
                          "--gpus", "h100-sxm,a100-80gb", "--format", "json", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_capacity_fleet_honours_the_saved_fleet_section_and_the_options_override_it(tmp_path):
    at = show_all(chat())
    at.sidebar.number_input(key="headroom_pct").set_value(40.0).run()
    at.sidebar.number_input(key="peak_factor").set_value(4.0).run()
    path = tmp_path / "sizing.yaml"
    path.write_text(to_yaml(at.session_state["doc"]))
    data = yaml.safe_load(path.read_text())
    planned = fleet_options(data, target=60.0, peak_factor=4.0, headroom=0.4, gpus=["h100-sxm", "a100-80gb"])
    plain = fleet_options(data, target=60.0, gpus=["h100-sxm", "a100-80gb"])
    assert list(planned["gpus"]) != list(plain["gpus"])  # the plan matters for this load
    rows = _cli_fleet(path)
    assert [r["gpus"] for r in rows] == list(planned["gpus"])
    rows = _cli_fleet(path, "--peak", "1", "--headroom", "0")
    assert [r["gpus"] for r in rows] == list(plain["gpus"])


# ---------------------------------------------------------------- the load as tokens/day


def test_fleet_view_takes_the_load_as_tokens_per_day_and_sizes_the_same_fleet():
    at = chat()
    at.button_group(key="view").set_value("Fleet").run()
    at.radio(key="fleet_load_unit").set_value("tokens/day").run()
    # 10 requests/s of 1,200 + 250 tokens = 10 x 86,400 x 1,450 = 1.2528e9 tokens/day, shown in billions
    assert at.number_input(key="fleet_load").value == pytest.approx(1.2528)
    at.number_input(key="fleet_load").set_value(2.0).run()
    assert not at.exception and not at.error
    data = saved(at)
    rate = 2e9 / 86_400 / 1_450  # by hand: 15.96 requests/s
    assert data["workload"]["arrival_rate"] == pytest.approx(rate, rel=1e-12)
    assert at.sidebar.number_input(key="arrival_rate").value == pytest.approx(rate, rel=1e-12)
    table = fleet_options({k: v for k, v in data.items()}, tokens_per_day=2e9)
    best = table[table["meets_slo"]].iloc[0]
    assert metrics(at)["Cheapest that keeps the promises"] == f"{best['gpus']:,.0f} GPUs"
    at.radio(key="fleet_load_unit").set_value("requests/s").run()
    assert at.number_input(key="fleet_load").value == pytest.approx(rate, rel=1e-12)
    at.number_input(key="fleet_load").set_value(12.5).run()
    assert saved(at)["workload"]["arrival_rate"] == 12.5


# ---------------------------------------------------------------- the sizing's name


def test_the_name_follows_the_sizing_from_the_first_render_unless_someone_named_it():
    at = start()
    # The landing preset, the chat assistant: its name follows the sizing from the first render.
    assert saved(at)["name"] == "llama-3.1-8b on 1 x h100-sxm"
    assert at.sidebar.text_input(key="name").value == "llama-3.1-8b on 1 x h100-sxm"
    # essay 000: an unnamed 8e9-parameter model on an unnamed "80 GiB" GPU
    at.sidebar.selectbox(key="preset").select("essay 000 worked example").run()
    assert saved(at)["name"] == "8B model on 1 x 80 GiB GPU"
    at.sidebar.selectbox(key="preset").select(CHAT).run()
    assert saved(at)["name"] == "llama-3.1-8b on 1 x h100-sxm"
    at.sidebar.number_input(key="gpu_count").set_value(4).run()
    assert saved(at)["name"] == "llama-3.1-8b on 4 x h100-sxm"
    show_all(at)
    at.sidebar.number_input(key="pipeline_parallel").set_value(2).run()
    assert saved(at)["name"] == "llama-3.1-8b on 8 x h100-sxm"
    at.sidebar.text_input(key="name").input("ACME pilot").run()
    at.sidebar.selectbox(key="model").select("llama-3-70b").run()
    assert saved(at)["name"] == "ACME pilot"
    at.sidebar.text_input(key="name").input("").run()  # an emptied name goes back to naming the sizing
    assert saved(at)["name"] == "llama-3-70b on 8 x h100-sxm"


def test_a_link_or_file_keeps_a_chosen_name_and_an_automatic_one_keeps_following():
    at = chat()
    params = link_params(at.session_state["doc"])
    opened = start(params)
    opened.sidebar.selectbox(key="gpu").select("h200").run()
    assert saved(opened)["name"] == "llama-3.1-8b on 1 x h200"  # the link's name was the automatic one
    opened.sidebar.text_input(key="name").input("ACME").run()
    again = start(link_params(opened.session_state["doc"]))
    again.sidebar.selectbox(key="gpu").select("h100-sxm").run()
    assert saved(again)["name"] == "ACME"
