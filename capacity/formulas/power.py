"""Power and energy: what the GPUs draw, the energy of a million tokens and what the electricity costs.

The catalog states each GPU's board power (``tdp_watts``: the datasheet's maximum or typical board power, each with
its source). Without a measured draw at the operating load the planner takes every GPU at that full board power all
the time: an upper bound on the energy, since decode that waits on memory draws less than its limit. ``pue``
(power usage effectiveness, The Green Grid, *PUE: A Comprehensive Examination of the Metric*, white paper 49,
2012: facility power over IT power) scales the boards to the facility; 1 counts the boards alone (no host CPUs,
network or cooling).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from capacity.formulas._numeric import as_float as _f
from capacity.formulas._numeric import select

#: Joules in a kilowatt-hour [J/kWh].
JOULES_PER_KWH = 3.6e6


def replica_power_watts(board_power_watts: ArrayLike, gpus: ArrayLike, pue: ArrayLike = 1.0) -> np.ndarray:
    """Power of one replica: ``P_board x GPUs x PUE`` [W]. 8 x 700 W H100s at PUE 1.3: 7,280 W."""
    return _f(board_power_watts) * _f(gpus) * _f(pue)


def energy_per_million_tokens_kwh(power_watts: ArrayLike, rate_rps: ArrayLike,
                                  output_tokens: ArrayLike) -> np.ndarray:
    """Energy of a million output tokens: ``P / (λ A) x 1e6 / 3.6e6`` [kWh] (P watts over λ A tokens/s: joules per
    token). Infinite when the rate is 0. Essay 001's GPU at 700 W and 5.897 requests/s of 300 tokens: 0.110 kWh.
    Excel: ``=power_watts/(rate_rps*output_tokens)*1E6/3.6E6``."""
    tokens_per_s = _f(rate_rps) * _f(output_tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        return select(tokens_per_s > 0, _f(power_watts) / tokens_per_s * 1e6 / JOULES_PER_KWH, np.inf)


def energy_cost(energy_kwh: ArrayLike, price_per_kwh: ArrayLike) -> np.ndarray:
    """Electricity cost of an energy: ``kWh x $/kWh`` [$]. 0.110 kWh at $0.12/kWh: $0.0132."""
    return _f(energy_kwh) * _f(price_per_kwh)


def energy_cost_per_hour(power_watts: ArrayLike, price_per_kwh: ArrayLike) -> np.ndarray:
    """Electricity cost of a power drawn for an hour: ``P / 1000 x $/kWh`` [$/h]. 7,280 W at $0.12: $0.874/h."""
    return _f(power_watts) / 1e3 * _f(price_per_kwh)


__all__ = ["JOULES_PER_KWH", "energy_cost", "energy_cost_per_hour", "energy_per_million_tokens_kwh",
           "replica_power_watts"]
