"""``_numeric.select`` is ``np.where`` for floats, bit for bit: the formula functions use it on the scattered masks
of a table of mixed scenarios (issue 17), so every value must be the one ``np.where`` picks, NaN, -0.0 and inf
included, whatever broadcasts."""

from __future__ import annotations

import numpy as np
import pytest

from capacity.formulas._numeric import select

SPECIAL = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 5e-324, -1.5, 2.0**1023, 1.0 / 3.0])


@pytest.mark.parametrize("mask_shape, a_shape, b_shape", [
    ((400,), (400,), (400,)), ((400,), (), (400,)), ((400,), (400,), ()), ((400,), (), ()),
    ((7, 400), (400,), (7, 1)), ((7, 1), (400,), (7, 400)), ((400,), (1,), (400,)),
])
def test_select_picks_the_bits_np_where_picks(mask_shape, a_shape, b_shape):
    rng = np.random.default_rng(11)
    mask = rng.uniform(size=mask_shape) < 0.5
    a = rng.choice(SPECIAL, size=a_shape) if a_shape else np.float64(-0.0)
    b = rng.choice(SPECIAL, size=b_shape) if b_shape else np.float64(np.nan)
    want, got = np.where(mask, a, b), select(mask, a, b)
    assert got.dtype == np.float64 and got.shape == want.shape
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("value", [True, False])
def test_a_mask_of_one_value_gives_a_new_array_of_the_one_side(value):
    rng = np.random.default_rng(13)
    a, b = rng.choice(SPECIAL, size=(3, 50)), rng.choice(SPECIAL, size=50)
    mask = np.full((3, 50), value)
    got = select(mask, a, b)
    assert np.array_equal(got.view(np.int64), np.where(mask, a, b).view(np.int64))
    got[:] = 1.0  # a new array: the inputs stay as they were
    assert not np.shares_memory(got, a) and not np.shares_memory(got, b)
    assert select(np.full(4, value), 2.0, -0.0).view(np.int64).tolist() == np.where(np.full(4, value), 2.0,
                                                                                  -0.0).view(np.int64).tolist()


def test_select_takes_views_and_strided_inputs_and_leaves_them_alone():
    rng = np.random.default_rng(12)
    base = rng.choice(SPECIAL, size=(50, 40))
    a, b = base[::2, 1::3], np.broadcast_to(base[0, :13], (25, 13))
    mask = (rng.uniform(size=(50, 26)) < 0.3)[::2, ::2]
    before = base.copy()
    assert np.array_equal(select(mask, a, b).view(np.int64), np.where(mask, a, b).view(np.int64))
    assert np.array_equal(base.view(np.int64), before.view(np.int64))


def test_select_on_a_scalar_mask_or_integers_is_np_where():
    assert select(True, 1.5, 2.5) == 1.5 and select(np.bool_(False), 1.5, 2.5) == 2.5
    assert np.array_equal(select(np.array([1, 0]), np.array([1.0, 2.0]), 3.0), [1.0, 3.0])
    assert np.array_equal(select(np.array([True, False]), np.array([1, 2]), 3), [1.0, 3.0])
