"""Bounded work in the app: every evaluation, view and simulation runs under a time budget
(``capacity.runtime.budget``).

Issue 18: a 10^12-layer config.json or a huge simulation request in one session must be refused or cut off
with an inline message, never pin a core and slow the other sessions.
"""

import json
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from capacity.errors import ScenarioError
from capacity.model.scenario import load_scenario
from capacity.runtime import budget
from capacity.runtime.budget import BudgetExceeded, time_budget
from capacity.simulator import simulate
from tests.app.test_app import headline_figures

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
BASE = ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml"


def test_check_is_a_no_op_without_a_budget_and_raises_once_one_runs_out():
    budget.check()
    assert budget.remaining_s() == float("inf")
    with time_budget(0.05):
        budget.check()
        assert 0 < budget.remaining_s() <= 0.05
        time.sleep(0.06)
        with pytest.raises(BudgetExceeded, match="time budget of 0.05 s"):
            budget.check()
    budget.check()  # the budget ends with its block


def test_a_nested_budget_never_extends_the_outer_one_and_budgets_are_per_thread():
    with time_budget(0.2):
        outer = budget.deadline()
        with time_budget(100):
            assert budget.deadline() == outer
        with time_budget(0.01):
            assert budget.deadline() < outer
        assert budget.deadline() == outer
        seen = []
        thread = threading.Thread(target=lambda: seen.append(budget.deadline()))
        thread.start()
        thread.join()
        assert seen == [float("inf")]  # another session's thread is not cut by this one's budget
    with pytest.raises(ValueError):
        with time_budget(0):
            pass


def test_the_estimate_refuses_a_simulation_longer_than_the_budget_before_any_work():
    scenario = load_scenario(BASE)
    # estimate: 100,000 requests x 30 us + 1,000 replicas x 2 ms = 5 s (simulator.config.work_problems; the
    # Python loop, asked for: where the compiled loop is loaded in this process it would be 0.4 + 2 = 2.4 s)
    start = time.perf_counter()
    refused = r"about 5\.0 s; the limit is [12]\.\d s \(this request's time budget\)"
    with time_budget(2.0), pytest.raises(ScenarioError, match=refused):
        simulate(scenario, event_loop="python", policy="continuous", rate=20.0, requests=100_000, replicas=1_000)
    assert time.perf_counter() - start < 0.5
    # without a budget (the command line) the same run is within the 300 s plausibility limit: not refused up front
    from capacity.simulator.config import config_from_scenario
    config_from_scenario(scenario, policy="continuous", rate=20.0, requests=100_000, replicas=1_000)


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_a_simulation_that_runs_past_its_budget_is_stopped(policy, monkeypatch):
    from capacity.simulator import config

    # An estimate that lets the run through (as one that is too optimistic on a busy machine would): the hard
    # deadline must stop it anyway. 200,000 requests take seconds even at 100,000 simulated requests/s.
    monkeypatch.setattr(config, "_S_PER_REQUEST", 0.0)
    monkeypatch.setattr(config, "_S_PER_REQUEST_COMPILED", 0.0)
    scenario = load_scenario(BASE)
    start = time.process_time()  # CPU time: other jobs on a shared machine stretch wall time, not this
    with pytest.raises(BudgetExceeded), time_budget(0.05):
        simulate(scenario, policy=policy, rate=500.0, requests=200_000)
    assert time.process_time() - start < 1.0  # the budget plus the granularity of the checks (~0.2-0.3 s here)


def _app(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(params)
    return at


def _run_timed(at: AppTest) -> tuple[float, str]:
    """Run the app once: (seconds it took, its error messages joined); it must not raise."""
    start = time.perf_counter()
    at.run()
    took = time.perf_counter() - start
    assert not at.exception
    return took, " ".join(e.value for e in at.error)


def test_app_a_huge_simulation_request_gets_an_inline_message_within_the_budget():
    from app_views.main import BUDGET_S

    # The simulation block reaches the app through the link's ``extra`` (or an upload): 1,000 replicas and
    # 100,000 requests, about 5 s by the estimate (static batching, simulated first, runs in the Python loop), over
    # the simulator view's budget of 4 s.
    at = _app({"extra": json.dumps({"simulation": {"replicas": 1000, "requests": 100000, "rate": 50}}),
               "view": "Simulator"})
    took, errors = _run_timed(at)
    assert "would take about" in errors and "simulate fewer requests" in errors, errors
    assert "Traceback" not in errors and "/" not in errors.replace("requests/s", "")
    assert took < BUDGET_S + 10  # app start-up plus evaluation; the simulation itself is refused up front
    assert headline_figures(at)  # the headline is still shown above the refused view


def test_app_a_simulation_past_its_deadline_is_cut_off_with_an_inline_message(monkeypatch):
    # The app's budget is made tiny and the estimate lets the run through: the hard deadline must cut it off
    # (200,000 requests take seconds even at 100,000 simulated requests/s). The estimate is patched in this process
    # only, so the simulation runs here too (CAPACITY_APP_WORKERS=0); a worker's own deadline is
    # tests/app/test_app_server.py's.
    from app_views import simulator
    from capacity.simulator import config

    monkeypatch.setenv("CAPACITY_APP_WORKERS", "0")
    monkeypatch.setattr(simulator, "SIMULATION_BUDGET_S", 0.3)
    monkeypatch.setattr(config, "_S_PER_REQUEST", 0.0)
    monkeypatch.setattr(config, "_S_PER_REQUEST_COMPILED", 0.0)
    at = _app({"extra": json.dumps({"simulation": {"requests": 200000, "rate": 500}}), "view": "Simulator"})
    took, errors = _run_timed(at)
    assert "time budget" in errors and "stopped" in errors, errors
    assert took < 15
    assert headline_figures(at)


def test_app_config_json_with_10_to_the_12_layers_is_refused_inline_at_once():
    at = AppTest.from_file(APP, default_timeout=60).run()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 10**12,
              "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "intermediate_size": 14336}
    at.sidebar.selectbox(key="model").select("custom").run()
    # the landing model is custom already (no change): its numbers and the paste box show with all inputs
    at.sidebar.toggle(key="more_inputs").set_value(True).run()
    start = time.perf_counter()
    at.sidebar.text_area(key="config_json").input(json.dumps(config)).run()
    assert time.perf_counter() - start < 10
    assert not at.exception
    errors = " ".join(e.value for e in at.sidebar.error)
    assert "num\\_hidden\\_layers" in errors or "num_hidden_layers" in errors, errors
    assert headline_figures(at)  # still usable: the previous sizing's headline


def _pool_by_hand(pool, requests, shared, private, partial):
    """The pool block by block, as the layout is described: shared prefix once, each request's private blocks
    (its last one partial when so), then free."""
    from capacity.model.pool_picture import FREE, PARTIAL, PRIVATE, SHARED

    out = []
    if requests > 0:
        out += [SHARED] * min(shared, pool)
    for _ in range(requests):
        out += [PRIVATE] * (private - 1) + ([PARTIAL if partial else PRIVATE] if private else [])
    out = out[:pool]
    return out + [FREE] * (pool - len(out))


def test_pool_owners_are_computed_without_building_the_pool():
    import random

    from capacity.model.pool_picture import LABELS, block_owners, owner_counts

    rng = random.Random(18)
    for _ in range(500):
        case = (rng.randint(0, 120), rng.randint(0, 20), rng.randint(0, 30), rng.randint(0, 9), rng.random() < 0.5)
        expected = _pool_by_hand(*case)
        assert block_owners(*case).tolist() == expected, case
        assert owner_counts(*case) == {label: expected.count(code) for code, label in LABELS.items()}, case
    # a tiny model on an 80 GB GPU: a pool of ~10^9 blocks and 13 million requests, counted in microseconds
    start = time.perf_counter()
    counts = owner_counts(1_200_000_000, 13_000_000, 0, 91, True)
    assert time.perf_counter() - start < 0.1
    assert counts["private, partly used last block"] == 13_000_000 and sum(counts.values()) == 1_200_000_000


def test_app_a_tiny_model_with_millions_of_requests_renders_at_once():
    # Re-audit of issue 18: a pasted config.json of a one-unit model made the Memory view build its 10^9-block
    # pool picture (50 s and gigabytes, every rerun, in every session that opened the link).
    at = _app({"model": "custom", "layers": "1", "kv_heads": "1", "head_dim": "1", "params_b": "0.001"})
    start = time.perf_counter()
    at.run()
    assert not at.exception
    assert time.perf_counter() - start < 20
    # millions of requests fit in the KV pool (the headline shows the running batch, which an engine profile caps)
    from capacity import Scenario

    assert Scenario.from_dict(at.session_state["doc"]).evaluate()["max_requests_paged"] > 1_000_000
    assert int(headline_figures(at)["Requests that fit"].replace(",", "")) >= 1024
