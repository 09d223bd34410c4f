"""The simulator's time estimate follows the event loop that will run (``config.compiled_loop_runs``), and the
compiled loop can be loaded ahead of the runs that need it (``scheduler.load_compiled_loop``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from capacity.errors import ScenarioError
from capacity.model.scenario import load_scenario
from capacity.runtime.budget import time_budget
from capacity.simulator import config as sim_config
from capacity.simulator import scheduler, simulate
from capacity.simulator.config import compiled_loop_runs, config_from_scenario

ROOT = Path(__file__).resolve().parents[2]
DENSE = ROOT / "tests" / "data" / "search-llama-8b.yaml"      # dense model, no shared prefix: compiled loop
PREFIX = ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml"   # a shared system prompt: compiled loop
MIXTRAL = ROOT / "scenarios" / "long-context-mixtral-h200.yaml"  # MoE: the Python loop
MIX = ROOT / "scenarios" / "mix-chat-rag-h100.yaml"  # workload classes with prefix hit rates


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("numba")
    from capacity.simulator import compiled

    compiled.load()
    assert scheduler.compiled_loop_loaded() and scheduler.load_compiled_loop()
    return compiled


def _values(scenario, **overrides):
    """The settings as ``config_from_scenario`` hands them to the estimate (base units)."""
    config = config_from_scenario(scenario, **overrides)
    return {k: getattr(config, k) for k in config.__slots__}


def test_the_estimate_is_the_compiled_loops_where_that_loop_will_run(loaded):
    dense = load_scenario(DENSE)
    # 100,000 requests: Python loop 100,000 x 30 us + 2 ms = 3.0 s, over a 2 s budget; compiled loop
    # 100,000 x 4 us + 2 ms = 0.4 s, within it
    with time_budget(2.0):
        with pytest.raises(ScenarioError, match=r"about 3\.0 s"):
            config_from_scenario(dense, "python", requests=100_000)
        assert config_from_scenario(dense, requests=100_000).requests == 100_000
        assert config_from_scenario(dense, "compiled", requests=100_000).requests == 100_000
    assert sim_config.work_problems({"requests": 100_000}, 16, compiled=False) == []
    with time_budget(0.3):
        assert "about 0.4 s" in sim_config.work_problems({"requests": 100_000}, 16, compiled=True)[0]
        assert "about 3.0 s" in sim_config.work_problems({"requests": 100_000}, 16, compiled=False)[0]


@pytest.mark.parametrize("path,overrides", [
    (DENSE, {}), (DENSE, {"chunked_prefill": True}), (DENSE, {"cost_model": "teaching"}),
    (DENSE, {"max_queued_requests": 3, "rate": 200.0}), (DENSE, {"policy": "static"}),
    (DENSE, {"record_tokens": True}), (DENSE, {"shared_prefix_tokens": 200}), (PREFIX, {}), (MIXTRAL, {}),
    (DENSE, {"turns": 3}), (MIX, {}),
    (DENSE, {"cpu_offload": "20 GB", "offload_bandwidth": "50 GB/s", "shared_prefix_tokens": 100}),
])
def test_the_estimate_names_the_loop_that_runs(loaded, path, overrides):
    scenario = load_scenario(path)
    expected = compiled_loop_runs(_values(scenario, requests=200, **overrides), scenario)
    with time_budget(30.0):  # under a budget "auto" runs the compiled loop only once it is loaded: it is
        result = simulate(scenario, requests=200, **overrides)
    assert result.event_loop.startswith("compiled") == expected, (result.event_loop, expected)
    if (path == DENSE and not overrides) or path == PREFIX:
        assert expected  # the case the estimate is for does occur, shared prefixes (the preset's prompt) included


def test_without_the_kernel_loaded_the_estimate_is_the_python_loops(monkeypatch):
    dense = load_scenario(DENSE)
    monkeypatch.setattr(scheduler, "compiled_loop_loaded", lambda: False)
    assert not compiled_loop_runs(_values(dense), dense)
    with time_budget(2.0), pytest.raises(ScenarioError, match=r"about 3\.0 s"):
        config_from_scenario(dense, requests=100_000)


def test_load_compiled_loop_loads_it_in_the_background_once():
    pytest.importorskip("numba")
    code = ("import sys; sys.path.insert(0, '.')\n"
            "from capacity.simulator import scheduler\n"
            "assert not scheduler.compiled_loop_loaded()\n"
            "assert scheduler.load_compiled_loop() is False\n"
            "first = scheduler._loader\n"
            "scheduler.load_compiled_loop()\n"
            "assert scheduler._loader is first\n"  # one loader per process
            "first.join(120)\n"
            "assert scheduler.compiled_loop_loaded() and scheduler.load_compiled_loop()\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=180)


def test_the_app_loads_the_compiled_loop_only_once_the_simulator_view_has_answered():
    """The server itself never imports numba: its simulations run on worker processes, which load the loop
    (app_views/server.py). Run on the session's thread (CAPACITY_APP_WORKERS=0), the loop starts loading once the
    Simulator view has answered."""
    pytest.importorskip("numba")
    code = ("import os, sys; sys.path.insert(0, '.')\n"
            "from streamlit.testing.v1 import AppTest\n"
            "from capacity.simulator import scheduler\n"
            "at = AppTest.from_file('app.py', default_timeout=60)\n"
            "at.run()\n"
            "assert not at.exception\n"
            "assert scheduler._loader is None and 'numba' not in sys.modules\n"  # the landing view: nothing
            "at = AppTest.from_file('app.py', default_timeout=120)\n"
            "at.query_params['view'] = 'Simulator'\n"
            "at.run()\n"
            "assert not at.exception and not at.error, [e.value for e in at.error]\n"
            "assert at.dataframe and scheduler._loader is None and 'numba' not in sys.modules\n"  # on a worker
            "os.environ['CAPACITY_APP_WORKERS'] = '0'\n"
            "at = AppTest.from_file('app.py', default_timeout=120)\n"
            "at.query_params['view'] = 'Simulator'\n"
            "at.run()\n"
            "assert not at.exception and not at.error, [e.value for e in at.error]\n"
            "assert scheduler._loader is not None\n"
            "scheduler._loader.join(120)\n"
            "assert scheduler.compiled_loop_loaded()\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300)


def test_a_budget_spent_by_earlier_work_is_named_not_called_a_limit_of_zero():
    """The app's simulation pair runs two policies under one budget: when the first used it up, the second is refused
    with the time left of that budget (and the budget's length), not "the limits are 0.0 s"."""
    import time

    with time_budget(0.05):
        time.sleep(0.06)
        problem = sim_config.work_problems({"requests": 100_000}, 16, compiled=False)[0]
    assert "about 3.0 s, and 0.0 s of this request's time budget of 0.05 s are left (the work before it" in problem
    assert "the limit is" not in problem
    with time_budget(2.0):
        problem = sim_config.work_problems({"requests": 100_000}, 16, compiled=False)[0]
    assert "about 3.0 s; the limit is 2.0 s (this request's time budget)" in problem
    # outside any budget the run's own limits apply (300 s): the same run passes
    assert sim_config.work_problems({"requests": 100_000}, 16, compiled=False) == []
