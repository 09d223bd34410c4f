"""Client retries lengthen the queue (essay 000: "A retry adds one more request to the same queue").

Essay 001's engine at 94% of its ceiling (6.5 requests/s, 2,000 requests, seed 0): without retries no user
gives up; clients that resend after a 1 s wait for the first token push the offered load past the ceiling,
the queue grows to hundreds and about half the users give up (measured: 5,074 attempts, 1,145 requests
waiting on average, 51% gave up); backing off by 2 s softens it (35%). With a queue limit, an immediate
retry of a 503 finds the queue still full; a retry after a backoff gets in.
"""

import pytest

from capacity import ScenarioError
from capacity.simulator import simulate
from capacity.simulator.retries import retry_summary

RUN = {"requests": 2000, "seed": 0, "rate": 6.5, "kv_allocation": "reserve"}


@pytest.fixture(scope="module")
def runs(request):
    from capacity import load_scenario
    from tests.conftest import SCENARIOS

    s = load_scenario(SCENARIOS / "essay-001-sale-day.yaml")
    settings = {
        "none": {}, "timeout": {"retries": 3, "retry_timeout": "1 s"},
        "timeout_backoff": {"retries": 3, "retry_timeout": "1 s", "retry_backoff": "2 s"},
        "limit": {"max_queued_requests": 2}, "limit_now": {"max_queued_requests": 2, "retries": 3},
        "limit_backoff": {"max_queued_requests": 2, "retries": 3, "retry_backoff": "1 s"},
    }
    # the queue-limit runs take 1,000 requests: a fixed point over 503 retries needs a run per chained retry
    return {name: simulate(s, **{**RUN, "requests": 1000 if name.startswith("limit") else 2000}, **kw)
            for name, kw in settings.items()}


def test_timeout_retries_lengthen_the_queue_and_hurt_users(runs):
    none, timeout, backoff = (retry_summary(runs[k]) for k in ("none", "timeout", "timeout_backoff"))
    assert none["attempts"] == none["requests"] == 2000 and none["gave_up_share"] == 0
    assert timeout["converged"] and timeout["retries"] > 1000
    assert timeout["attempts"] == 2000 + timeout["retries"]
    assert timeout["mean_queued"] > 100 > none["mean_queued"]  # the queue the retries built
    assert timeout["gave_up_share"] > 0.2  # more users left than without retrying
    assert backoff["attempts"] < timeout["attempts"] and backoff["mean_queued"] < timeout["mean_queued"]
    frame = runs["timeout"].requests
    assert set(frame["attempt"]) <= {0, 1, 2, 3}
    retried = frame[frame["attempt"] > 0]
    parent = frame.set_index(["origin_id", "attempt"])
    for row in retried.head(20).itertuples():  # each retry comes 1 s after the attempt before it
        before = parent.loc[(row.origin_id, row.attempt - 1)]
        assert row.arrival_s == pytest.approx(before["arrival_s"] + 1.0)


def test_a_503_retried_at_once_finds_the_queue_full(runs):
    limit, now, later = (retry_summary(runs[k]) for k in ("limit", "limit_now", "limit_backoff"))
    assert limit["rejected_attempts"] > 0 and limit["gave_up_share"] > 0
    assert now["gave_up_share"] == limit["gave_up_share"]  # the same instant, the same full queue
    assert later["gave_up_share"] < limit["gave_up_share"]
    summary = runs["limit_backoff"].summary()
    assert summary["retries_sent"] == later["retries"] and summary["retry_converged"]


def test_retry_settings_are_checked(essay001):
    with pytest.raises(ScenarioError, match="simulation.retries must be >= 0"):
        simulate(essay001, retries=-1, rate=1.0, requests=10)
    with pytest.raises(ScenarioError, match="simulation.retry_backoff"):
        simulate(essay001, retries=1, retry_backoff="soon", rate=1.0, requests=10)
