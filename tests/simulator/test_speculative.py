"""Issue 29: the simulator's speculative iterations (verification + drafter passes, sampled accepted tokens) agree
with the analytic model's per-token step on essay 001's GPU with an EAGLE drafter (γ = 3, α = 0.7: E = 2.533
tokens per iteration, one extra decoder layer of 32 per drafted token)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capacity.model.scenario import Scenario, load_scenario
from capacity.simulator import simulate
from capacity.simulator.speculative import accepted_per_iteration, iterations_for

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"method": "eagle", "draft_tokens": 3, "acceptance_rate": 0.7}


def _scenario(rate: float | None = None) -> Scenario:
    raw = dict(load_scenario(ROOT / "scenarios" / "sim-essay-001-analytic.yaml").raw)
    workload = {**raw["workload"], **({"arrival_rate": rate} if rate else {})}
    return Scenario.from_dict({**raw, "serving": {**raw["serving"], "speculative": SPEC}, "workload": workload})


def test_accepted_tokens_per_iteration_average_leviathans_expectation():
    """(1 - 0.7^4) / 0.3 = 2.533 tokens per iteration, never more than γ + 1 = 4, never fewer than 1."""
    draws = accepted_per_iteration(np.random.default_rng(0), 0.7, 3, 200_000)
    assert draws.min() == 1 and draws.max() == 4
    assert draws.mean() == pytest.approx((1 - 0.7 ** 4) / 0.3, rel=0.01)
    assert iterations_for(np.random.default_rng(0), 1.0, 3, 299) == 75  # ceil(299 / 4): every draft accepted


@pytest.mark.parametrize("rate", [2.0, 4.0])
def test_speculative_simulation_agrees_with_the_analytic_model(rate):
    """Poisson load at 2 and 4 requests/s (prefill 29% and 44% of GPU time): mean TPOT, TTFT and throughput
    within 10% of ``tpot_at_load_s``, ``ttft_at_load_s`` and the arrival rate."""
    s = _scenario(rate)
    analytic = s.evaluate()
    summary = simulate(s, requests=3000).summary()
    assert summary["mean_tpot_s"] == pytest.approx(analytic["tpot_at_load_s"], rel=0.10)
    assert summary["mean_ttft_s"] == pytest.approx(analytic["ttft_at_load_s"], rel=0.10)
    assert summary["throughput_rps"] == pytest.approx(rate, rel=0.10)
    assert summary["mean_tpot_s"] < 0.5 * simulate(s.with_changes(serving={"speculative": None}),
                                                   requests=1000).summary()["mean_tpot_s"]


def test_saturated_speculative_throughput_matches_the_ceiling():
    """Every request at once: the speculating engine's throughput is the analytic ceiling (6.16 requests/s, below
    the plain 6.92: at 328 sequences verifying 4 tokens each is compute-bound)."""
    s = _scenario()
    summary = simulate(s, arrival="instant", requests=3000).summary()
    assert summary["throughput_rps"] == pytest.approx(s.evaluate()["ceiling_rps"], rel=0.05)
