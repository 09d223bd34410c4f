"""A day of arrivals: a piecewise-constant rate, stated and Markov-modulated bursts, Poisson or evenly spaced."""

import numpy as np
import pytest

from capacity.inputs.lengths import LengthDist
from capacity.simulator.config import SimulationConfig
from capacity.simulator.traffic import Burst, Mmpp, arrivals, day_table, per_second, rate_segments


def test_segments_multiply_the_profile_by_the_burst_that_covers_them():
    # two one-hour steps of 10 and 20 requests/s, tripled from 30 min to 1 h 30 min
    edges, rates = rate_segments([10, 20], 3600, [Burst(1800, 3600, 3.0)])
    assert edges.tolist() == [0, 1800, 3600, 5400, 7200]
    assert rates.tolist() == [10, 30, 60, 20]


def test_fixed_arrivals_are_exact_and_poisson_counts_have_the_right_mean_and_spread():
    edges, rates = rate_segments([10, 20], 3600)
    fixed = arrivals(edges, rates, np.random.default_rng(0), "fixed")
    assert len(fixed) == 10 * 3600 + 20 * 3600
    assert np.all(np.diff(fixed) > 0)
    assert per_second(fixed, 7200)[:3600].tolist() == [10.0] * 3600   # 10 each second, no noise
    # Poisson: a second's count has mean λ and variance λ (index of dispersion 1)
    counts = per_second(arrivals(edges, rates, np.random.default_rng(1)), 7200)
    first, second = counts[:3600], counts[3600:]
    assert first.mean() == pytest.approx(10, rel=0.02) and second.mean() == pytest.approx(20, rel=0.02)
    assert first.var() / first.mean() == pytest.approx(1.0, abs=0.08)


def test_mmpp_spends_its_stated_share_of_time_in_bursts():
    """An alternating process of exponential calm (mean 900 s) and burst (mean 300 s) periods is in a burst
    300 / (300 + 900) = 25% of the time, in the long run."""
    bursts = Mmpp(4.0, 300.0, 900.0).periods(2e6, np.random.default_rng(3))
    share = sum(b.duration_s for b in bursts) / 2e6
    assert share == pytest.approx(0.25, abs=0.02)
    assert all(b.factor == 4.0 for b in bursts)


def test_the_day_table_keeps_the_times_and_draws_the_lengths_of_the_simulation_block():
    times = np.array([0.5, 1.0, 7.25])
    config = SimulationConfig(prompt_tokens=LengthDist("fixed", value=100),
                              output_tokens=LengthDist("fixed", value=20))
    table = day_table(config, times)
    assert table.arrival_s.tolist() == [0.5, 1.0, 7.25]
    assert table.prompt_tokens.tolist() == [100] * 3 and table.output_tokens.tolist() == [20] * 3


def test_bad_profiles_and_bursts_are_refused():
    with pytest.raises(ValueError):
        rate_segments([10, -1])
    with pytest.raises(ValueError):
        Burst(0, 0, 2)
