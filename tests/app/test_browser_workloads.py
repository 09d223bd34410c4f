"""The Workloads view in a real browser (Playwright on the system Chromium): the chat + RAG preset's per-class
sizing and its day, as the library gives them. Screenshot: artifacts/workloads.png."""

import yaml

from app_views.state import presets
from capacity import Scenario
from capacity.model.percentiles import sizing
from capacity.planning.daily import diurnal_rates, plan_scenario_day
from tests.app.test_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    app_url,
    browser,
    metric,
    number,
    page,
    select,
    settle,
    shoot,
)

MIX = "chat + RAG mix, llama-3.1-8b on H100 SXM"


def test_workloads_view_shows_the_mix_per_class(page, app_url):  # noqa: F811 - fixtures
    scenario = Scenario.from_dict(yaml.safe_load(presets()[MIX].read_text()))
    whole = sizing(scenario).iloc[-1]
    page.goto(app_url, wait_until="domcontentloaded")  # open_app's wait, longer: the machine may be busy
    page.get_by_text("Requests that fit").first.wait_for(timeout=180_000)
    settle(page)
    select(page, "Start from a preset", MIX)
    page.locator('[data-testid="stButtonGroup"]').get_by_text("Workloads", exact=True).click()
    settle(page)
    page.get_by_text("Goodput at the promised percentile").first.wait_for(timeout=60_000)
    assert metric(page, "Goodput at the promised percentile") == f"{whole['goodput_rps']:,.2f} req/s" == "5.71 req/s"
    assert metric(page, "Mean-based goodput") == f"{whole['mean_goodput_rps']:,.2f} req/s" == "7.05 req/s"
    number(page, "peak requests/s (noon)", 40)
    plan = plan_scenario_day(scenario, diurnal_rates(40.0, 10.0), scenario.fleet.headroom)  # the sidebar's headroom
    assert metric(page, "GPUs at the peak") == f"{plan.peak_gpus:,.0f}"
    assert metric(page, "Following the profile saves") == f"{plan.saving:.0%}"
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 3
    shoot(page, "workloads.png")
    assert (ARTIFACTS / "workloads.png").stat().st_size > 10_000
    page.get_by_text("Operating guidance").first.scroll_into_view_if_needed()
    shoot(page, "workloads-day.png")
