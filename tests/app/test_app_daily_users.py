"""Issue 30's done-when in the app: "500 daily users, 20 requests each, 10% in the peak hour" gives the same sizing
as the equivalent arrival rate (1,000 requests in the peak hour / 3,600 s = 0.278 requests/s), in the headline."""

from __future__ import annotations

import pytest

from capacity import Scenario
from tests.app.test_app import ESSAY_001, choose, headline_figures, saved, show_all, start


def test_daily_users_in_the_sidebar_size_as_the_equivalent_rate():
    at = show_all(choose(start(), ESSAY_001))
    at.sidebar.number_input(key="daily_users").set_value(500.0).run()
    at.sidebar.number_input(key="requests_per_user_per_day").set_value(20.0).run()
    at.sidebar.number_input(key="peak_hour_pct").set_value(10.0).run()
    assert not at.exception and not at.error
    doc = saved(at)
    assert doc["workload"]["daily_users"] == 500 and doc["workload"].get("arrival_rate") in (None, 0)
    by_users = headline_figures(at)
    equivalent = Scenario.from_dict(doc).workload.arrival_rate
    assert equivalent == pytest.approx(500 * 20 * 0.10 / 3600, rel=1e-12)
    at.sidebar.number_input(key="daily_users").set_value(0.0).run()
    at.sidebar.number_input(key="arrival_rate").set_value(equivalent).run()
    assert not at.exception
    assert Scenario.from_dict(saved(at)).workload.arrival_rate == pytest.approx(equivalent, rel=1e-6)
    assert headline_figures(at) == by_users
