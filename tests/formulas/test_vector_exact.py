"""The vectorised path's shortcuts change no bit (issue 17).

``frame.evaluate_arrays`` passes an input holding one value in every row of a slice as a scalar
(``_numeric.one_value_or``), the row solver does the same with its per-row arguments, and
``memory.blocks_for`` divides whole numbers without the floor division. Each is pinned here against an
independent reference: the scalar path row by row (``analyse`` on one row's numbers), Python's integer
arithmetic, and numpy's floor division.
"""

from __future__ import annotations

import numpy as np
import pytest

from capacity import load_scenario
from capacity.formulas import memory
from capacity.formulas._numeric import one_value_or
from capacity.model.analysis import analyse
from capacity.model.frame import evaluate_arrays
from capacity.planning.sweep import make_grid

ESSAY001 = "scenarios/essay-001-sale-day.yaml"
MIXTRAL = "scenarios/long-context-mixtral-h200.yaml"


def bits(value: object) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value, dtype=float)).view(np.int64)


@pytest.mark.parametrize("path", [ESSAY001, MIXTRAL])
def test_a_grid_with_constant_columns_equals_the_scalar_path_bit_for_bit(path):
    grid = make_grid(load_scenario(path), ["slo.tpot=10ms:300ms:12", "workload.arrival_rate=0:50:9",
                                           "slo.ttft=0.2:3:3"])
    x = grid.inputs()
    assert sum(np.all(v == v[0]) for v in x.values()) > 30  # most columns constant: the scalar shortcut runs
    table = evaluate_arrays(x, chunk_rows=50, text=False)
    for i in range(0, grid.rows, 7):
        alone = analyse({k: v[i] for k, v in x.items()}, text=False)
        wrong = [k for k, v in alone.items() if bits(v) != bits(table[k][i])]
        assert wrong == [], (i, wrong)


def test_rows_of_mixed_models_with_some_constant_columns_equal_the_scalar_path():
    first = make_grid(load_scenario(ESSAY001), ["workload.prompt_tokens=100:8000:6", "slo.tpot=20ms:100ms:4"]).inputs()
    second = make_grid(load_scenario(MIXTRAL), ["workload.prompt_tokens=100:8000:6", "slo.tpot=20ms:100ms:4"]).inputs()
    x = {k: np.concatenate([first[k], second[k]]) for k in first}  # dense and MoE rows, some inputs shared
    table = evaluate_arrays(x, text=False)
    for i in range(len(x["layers"])):
        alone = analyse({k: v[i] for k, v in x.items()}, text=False)
        assert [k for k, v in alone.items() if bits(v) != bits(table[k][i])] == [], i


def test_one_value_or_keeps_bits_apart():
    assert one_value_or(np.full(5, 2.5)).shape == ()
    assert float(one_value_or(np.full(5, 2.5))) == 2.5
    assert one_value_or(np.array([0.0, -0.0])).shape == (2,)  # equal under ==, not the same number to 1/x
    assert one_value_or(np.array([1.0, 1.0, 2.0])).shape == (3,)
    assert one_value_or(np.full(3, np.nan)).shape == ()
    assert one_value_or(np.zeros(0)).shape == (0,)
    assert one_value_or(np.arange(3)).shape == (3,)  # not float64: left alone


def test_blocks_for_whole_numbers_is_the_integer_ceiling():
    tokens = np.concatenate([np.arange(0, 5000), 2**52 - 1 - np.arange(0, 50), [1800, 17, 16, 1]]).astype(float)
    for size in (1, 7, 16, 32, 1000):
        got = memory.blocks_for(tokens, float(size))
        assert got.tolist() == [-(-int(t) // size) for t in tokens]


def test_blocks_for_other_values_is_the_floor_division():
    rng = np.random.default_rng(7)
    tokens = np.concatenate([rng.uniform(-1e6, 1e6, 500), np.round(rng.uniform(0, 1e6, 500)),
                             [0.0, -0.0, 2.0**52, 2.0**53 + 2, 1e18, np.inf, -np.inf, np.nan, 16.5]])
    sizes = rng.choice([16.0, 32.0, 3.0, 0.5, 2.0**52, np.inf], tokens.size)
    with np.errstate(all="ignore"):
        expected = -np.floor_divide(-tokens, sizes)
        for size in (sizes, 16.0):
            assert np.array_equal(bits(memory.blocks_for(tokens, size)), bits(-np.floor_divide(-tokens, size)))
    assert np.array_equal(bits(memory.blocks_for(tokens, sizes)), bits(expected))
    assert bits(memory.blocks_for(-0.0, 16.0)) == bits(-0.0)
