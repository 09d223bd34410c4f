"""The Workloads view through AppTest: its numbers are the library's for a two-class sizing (chat + RAG)."""

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app_views.state import presets
from app_views.workloads import LOAD_FRACTIONS, shown_classes
from capacity import Scenario
from capacity.answers.guidance import queue_limits, ttft_target_s
from capacity.model.mix import mix_model
from capacity.model.mix_curves import knee, load_curve
from capacity.model.percentiles import sizing
from capacity.planning.daily import diurnal_rates, plan_scenario_day
from tests.app.test_app import APP

MIX = "chat + RAG mix, llama-3.1-8b on H100 SXM"
ESSAY_001 = "essay 001 sale-day napkin"


def scenario_of(preset: str) -> Scenario:
    return Scenario.from_dict(yaml.safe_load(presets()[preset].read_text()))


def open_view(preset: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.sidebar.selectbox(key="preset").select(preset).run()
    at.button_group(key="view").set_value("Workloads").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


@pytest.fixture(scope="module")
def mix_view():
    return open_view(MIX)


def shown(at: AppTest) -> dict[str, str]:
    from tests.app.test_app import metrics

    return metrics(at)


def test_the_view_shows_the_library_per_class_sizing(mix_view):
    scenario = scenario_of(MIX)
    table = sizing(scenario).set_index("class")
    metrics = shown(mix_view)
    assert metrics["Goodput at the promised percentile"] == f"{table.loc['all', 'goodput_rps']:,.2f} req/s" \
        == "5.71 req/s"
    assert metrics["Mean-based goodput"] == f"{table.loc['all', 'mean_goodput_rps']:,.2f} req/s" == "7.05 req/s"
    assert metrics["Ceiling of the mix"] == f"{table.loc['all', 'ceiling_rps']:,.2f} req/s"
    assert metrics["Classes"] == "2"
    cells = mix_view.table[0].value.set_index("class")
    assert list(cells.index) == ["chat", "rag", "whole mix"]
    for name in ("chat", "rag"):
        assert cells.loc[name, "goodput at its percentile"] == f"{table.loc[name, 'goodput_rps']:,.2f} req/s"
        assert cells.loc[name, "mean-based goodput"] == f"{table.loc[name, 'mean_goodput_rps']:,.2f} req/s"
        assert cells.loc[name, "p99 TPOT at the mix goodput"] == f"{table.loc[name, 'p99_tpot_s'] * 1e3:,.1f} ms"
        assert cells.loc[name, "arrivals at the mix goodput"] == f"{table.loc[name, 'class_rps']:,.2f} req/s"
    assert cells.loc["chat", "promise"] == "TPOT <= 50.0 ms at p99"
    assert cells.loc["rag", "promise"] == "TTFT <= 2,000.0 ms at p90"
    # chat binds at its p99 TPOT: 50 ms exactly at the mix goodput, below its mean-based goodput
    assert cells.loc["chat", "p99 TPOT at the mix goodput"] == "50.0 ms"
    assert shown_classes(sizing(scenario)).equals(mix_view.table[0].value)


def test_the_view_shows_the_knee_the_day_and_the_guidance(mix_view):
    scenario = scenario_of(MIX)
    at = knee(load_curve(scenario, LOAD_FRACTIONS))
    metrics = shown(mix_view)
    assert metrics["Knee load"] == f"{at['rate_rps']:,.2f} req/s"
    assert metrics["Output at the knee"] == f"{at['output_tokens_per_s']:,.0f} tokens/s"
    assert len(mix_view.get("plotly_chart")) == 3  # concurrency, knee, day
    # a day from 4 to 40 requests/s; the headroom of the scenario's fleet section (the sidebar's)
    mix_view.number_input(key="workloads_peak_rps").set_value(40.0).run()
    headroom = scenario.fleet.headroom
    plan = plan_scenario_day(scenario, diurnal_rates(40.0, 10.0), headroom)
    mean = plan_scenario_day(scenario, diurnal_rates(40.0, 10.0), headroom, mean_based=True)
    metrics = shown(mix_view)
    assert metrics["GPUs at the peak"] == f"{plan.peak_gpus:,.0f}" and plan.peak_gpus > mean.peak_gpus
    assert metrics["GPU-hours a day, following the profile"] == f"{plan.gpu_hours:,.0f} GPU h"
    assert metrics["GPU-hours a day, provisioned for the peak"] == f"{plan.peak_gpu_hours:,.0f} GPU h"
    assert metrics["Following the profile saves"] == f"{plan.saving:.0%}"
    text = " ".join(m.value for m in mix_view.markdown)
    summary = plan.summary()
    assert f"${summary['cost_per_day']:,.2f} a day following the profile" in text.replace("\\", "")
    mix = mix_model(scenario)
    limits = queue_limits(mix, ttft_target_s(mix))
    assert f"{limits['max_queued_requests']:,} requests or {limits['max_queued_tokens']:,} prompt tokens" in \
        text.replace("\\", "")
    guidance = mix_view.table[1].value
    assert list(guidance["symptom"]) == ["TTFT rises", "TPOT rises", "503 errors", "concurrency ceiling"]


def test_a_single_shape_without_percentile_shows_one_goodput():
    at = open_view(ESSAY_001)
    metrics = shown(at)
    assert metrics["Goodput at the promised percentile"] == metrics["Mean-based goodput"] == "5.90 req/s"
    assert metrics["Classes"] == "1"
