"""The step overhead fitted to the median relative error (``capacity.planning.median_fit``).

Decode steps are "measured" with the library at a known overhead and the planner's efficiencies (as in
``test_calibration``); the fit sees the scenarios at another overhead and must find the true one, and an outlying
point must not move it.
"""

import numpy as np
import pytest

from capacity import Scenario, ScenarioError
from capacity.planning.calibration import Factors, Observation, predict
from capacity.planning.median_fit import median_overhead, weighted_median

TRUE_OVERHEAD_S = 0.004


def scenario(overhead_s: float, batch: int) -> Scenario:
    return Scenario.from_dict({"model": "llama-3.1-8b", "gpu": {"name": "h100-sxm"},
                               "serving": {"engine": "ideal", "step_overhead": overhead_s, "max_num_seqs": batch},
                               "workload": {"prompt_tokens": 1024, "output_tokens": 256}})


def steps(batches=(1, 8, 32, 64)) -> list[Observation]:
    """Decode steps measured at the true overhead, seen through scenarios at overhead 0."""
    return [Observation(scenario(0.0, b), "step_time_s",
                        float(scenario(TRUE_OVERHEAD_S, b).evaluate()["decode_step_s"]), batch_size=b)
            for b in batches]


def test_weighted_median_by_hand():
    assert weighted_median(np.array([1.0, 2.0, 10.0]), np.array([1.0, 1.0, 1.0])) == 2.0
    assert weighted_median(np.array([10.0, 1.0, 2.0]), np.array([3.0, 1.0, 1.0])) == 10.0
    # the L1 location: no other value has a smaller weighted sum of distances
    v, w = np.array([0.3, 0.9, 1.4, 2.0, 7.0]), np.array([0.5, 2.0, 1.0, 1.0, 0.2])
    m = weighted_median(v, w)
    cost = lambda x: float(np.sum(w * np.abs(v - x)))  # noqa: E731
    assert all(cost(m) <= cost(x) + 1e-12 for x in np.linspace(0.0, 8.0, 801))


def test_the_true_overhead_is_found():
    fitted = median_overhead(steps())
    assert fitted == pytest.approx(TRUE_OVERHEAD_S, rel=1e-9)
    for obs in steps():
        at = Factors.of(obs.scenario)
        assert predict(obs, Factors(at.bandwidth_efficiency, at.flops_efficiency, fitted)) == pytest.approx(
            obs.value, rel=1e-9)


def test_an_outlier_does_not_drag_it():
    """A point measured 60% slow (a different setup) moves a least-squares fit; the median fit keeps the others'
    overhead exactly, because the other points hold more than half the weight."""
    points = steps()
    bad = points[1]
    slow = Observation(bad.scenario, "step_time_s", bad.value * 1.6, batch_size=bad.batch_size)
    assert median_overhead([*points, slow]) == pytest.approx(TRUE_OVERHEAD_S, rel=1e-9)


def test_it_is_never_negative_and_refuses_nothing_to_fit():
    fast = [Observation(o.scenario, "step_time_s", o.value * 0.5, batch_size=o.batch_size) for o in steps()]
    assert median_overhead(fast) == 0.0
    with pytest.raises(ScenarioError, match="at least one"):
        median_overhead([])
