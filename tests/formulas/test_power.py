"""Power and energy (issue 29), derived by hand: 8 x 700 W (H100 SXM datasheet "Up to 700W") at PUE 1.3, essay
001's goodput of 5.897 requests/s of 300 tokens, electricity at $0.12/kWh."""

from __future__ import annotations

import pytest

from capacity.formulas.power import (
    energy_cost,
    energy_cost_per_hour,
    energy_per_million_tokens_kwh,
    replica_power_watts,
)


def test_replica_power_is_boards_times_pue():
    assert replica_power_watts(700, 8, 1.3) == pytest.approx(7280.0)
    assert replica_power_watts(700, 1) == 700.0


def test_energy_of_a_million_tokens():
    """700 W / (5.897 x 300 tokens/s) = 0.3957 J a token; x 1e6 / 3.6e6 = 0.1099 kWh a million."""
    kwh = energy_per_million_tokens_kwh(700.0, 5.897, 300)
    assert kwh == pytest.approx(700.0 / (5.897 * 300) * 1e6 / 3.6e6)
    assert kwh == pytest.approx(0.1099, rel=1e-3)
    assert energy_per_million_tokens_kwh(700.0, 0.0, 300) == float("inf")
    assert energy_cost(kwh, 0.12) == pytest.approx(0.01319, rel=1e-3)


def test_electricity_per_hour():
    assert energy_cost_per_hour(7280.0, 0.12) == pytest.approx(0.8736)
