"""A step overhead fitted to the median relative error: the rule that carries to configurations not fitted.

``calibration.fit_factors`` minimises squared log errors, which a few far-off groups of measurements pull (a
group 60% too fast weighs as much as ten groups 20% off). Fitted so on the silicon sample's other groups, the
step overhead per (engine, GPU family) predicted each left-out group worse than not fitting at all (TPOT MAPE
21.0% against 19.4%, docs/fidelity.md). The mean absolute relative error, the figure the validation reports, is
minimised by a weighted median instead, which outlying groups cannot drag: one overhead per engine, fitted so,
predicts each left-out group at 19.0% (docs/fidelity.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from capacity.errors import ScenarioError
from capacity.planning.calibration import Factors, Observation, terms_for


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value ``m`` minimising ``sum_i w_i |v_i - m|`` (weights >= 0, not all 0): the smallest ``v_(k)`` of the
    sorted values whose cumulative weight reaches half the total.

    Example: values (1, 2, 10), weights (1, 1, 1) -> 2; weights (1, 1, 3) -> 10.
    """
    v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    order = np.argsort(v, kind="stable")
    cumulative = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


def median_overhead(observations: Sequence[Observation]) -> float:
    """The step overhead ``o`` [s] that minimises the mean absolute relative error of the observations' times,
    each observation's efficiencies held at its own scenario's (``Factors.of``: observations on GPUs of different
    families keep their own plateaus).

    Each time is linear in the overhead, ``t_i(o) = a_i + n_i o`` (``calibration.Terms``: ``a_i`` the roofline and
    fixed terms at the efficiencies, ``n_i`` the steps paid), so

        sum_i |t_i(o) / y_i - 1| = sum_i (n_i / y_i) |o - (y_i - a_i) / n_i|

    is minimised by the weighted median of ``o_i = (y_i - a_i) / n_i`` with weights ``n_i / y_i`` (the L1
    location estimate; Edgeworth, Phil. Mag. 1888), then held at 0 or above (an overhead is not negative).
    Observations whose time does not depend on the overhead (``n_i = 0``) do not move it. Times of open-loop
    observations are linearised at their own factors (``calibration.terms_for``). Raises ``ScenarioError`` when
    no observation depends on the overhead.

    Example: two points needing 1 ms and 3 ms of overhead per step, the first at twice the second's time
    (weights 1 and 2): 3 ms.
    """
    if not observations:
        raise ScenarioError("a median overhead needs at least one measured point")
    offsets, weights = [], []
    for obs in observations:
        own = Factors.of(obs.scenario)
        no_overhead = replace(own, step_overhead_s=0.0)
        terms = terms_for(obs, own)
        steps = float(terms.overhead)
        if steps <= 0:
            continue
        measured = float(obs.measured_time)
        offsets.append((measured - terms.time(no_overhead)) / steps)
        weights.append(steps / measured)
    if not offsets:
        raise ScenarioError("no measured point depends on the step overhead")
    return max(weighted_median(np.array(offsets), np.array(weights)), 0.0)
