"""Work on several threads (issue 17): the same values as on one, in order, with bounded work in flight."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from capacity import load_scenario
from capacity.errors import ScenarioError
from capacity.model.frame import evaluate_arrays
from capacity.planning import sweep as sweep_module
from capacity.runtime.threads import default_threads, ordered_map

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SPECS = ["serving.memory_utilization=0.1:0.95:7", "slo.tpot=20ms:200ms:5", "workload.prompt_tokens=1000:40000:3"]


def test_ordered_map_keeps_order_and_bounds_the_work_ahead():
    started: list[int] = []
    lock = threading.Lock()

    def slow(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.002 * (i % 3))  # later items often finish first
        return i * i

    seen = []
    for value in ordered_map(slow, range(40), 3):
        with lock:
            ahead = max(started) - len(seen)
        assert ahead <= 3, ahead  # at most threads + 1 items started beyond the one consumed
        seen.append(value)
    assert seen == [i * i for i in range(40)]


def test_ordered_map_raises_at_the_failing_items_turn_and_one_thread_runs_here():
    def fail_at_5(i: int) -> int:
        if i == 5:
            raise ValueError("five")
        return i

    got = []
    with pytest.raises(ValueError, match="five"):
        for value in ordered_map(fail_at_5, range(10), 2):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]
    assert list(ordered_map(lambda _: threading.get_ident(), range(3), 1)) == [threading.get_ident()] * 3


def _inputs() -> dict[str, np.ndarray]:
    """Rows of three scenarios (dense, MoE, essay 001) with varied prompts, answers, loads and promises."""
    rng = np.random.default_rng(7)
    rows = []
    for name in ("essay-001-sale-day.yaml", "long-context-mixtral-h200.yaml"):
        base = load_scenario(SCENARIOS / name).inputs()
        for _ in range(150):
            row = dict(base)
            row.update(prompt_tokens=float(rng.integers(50, 16_000)), output_tokens=float(rng.integers(20, 4_000)),
                       arrival_rate=float(rng.choice([0.0, 0.5, 5.0])), tpot_slo_s=float(rng.choice([0.02, 0.1])),
                       ttft_slo_s=float(rng.choice([0.5, 3.0, np.inf])))
            rows.append(row)
    order = rng.permutation(len(rows))
    return {key: np.array([rows[i][key] for i in order], dtype=float) for key in rows[0]}


def test_evaluate_arrays_gives_the_same_bits_on_one_thread_and_on_four():
    x = _inputs()
    one = evaluate_arrays(x, chunk_rows=16, threads=1)
    four = evaluate_arrays(x, chunk_rows=16, threads=4)
    assert one.keys() == four.keys()
    for key in one:
        a, b = np.asarray(one[key]), np.asarray(four[key])
        assert a.shape == b.shape == (300,)
        if a.dtype.kind == "f":
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), key  # bit for bit, NaN payloads too
        else:
            assert np.array_equal(a, b), key


def test_pieces_cover_every_point_once_in_order_within_their_chunks():
    for rows, chunk, threads in [(1, 65_536, 8), (100_000, 65_536, 2), (200_000, 65_536, 6), (70_000, 16_384, 16),
                                 (10, 7, 1)]:
        spans = sweep_module.pieces(rows, chunk, threads)
        assert [s[1] for s in spans] == [0] + [s[2] for s in spans[:-1]] and spans[-1][2] == rows
        assert all(s[1] // chunk == s[0] == (s[2] - 1) // chunk for s in spans)  # no piece crosses a chunk's end
        per_chunk = -(-rows // chunk)
        k = len(spans) / per_chunk
        assert len(spans) >= per_chunk and (threads > 1 or len(spans) == per_chunk)
        assert all(s[2] - s[1] >= min(sweep_module.MIN_PIECE_ROWS, chunk, rows) for s in spans[:-1]) or k == 1
    assert len(sweep_module.pieces(131_072, 65_536, 2)) == 4  # two chunks of two pieces


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_a_sweep_writes_the_same_bytes_on_one_thread_and_in_pieces_on_four(fmt, monkeypatch):
    pytest.importorskip("pyarrow")
    scenario = load_scenario(SCENARIOS / "essay-001-sale-day.yaml")

    def written(threads: int) -> bytes:
        monkeypatch.setattr(sweep_module, "default_threads", lambda: threads)
        buffer = io.BytesIO()
        sweep_module.run_to(scenario, SPECS, fmt, buffer, date="2026-01-01", progress=False, chunk_rows=32)
        return buffer.getvalue()

    monkeypatch.setattr(sweep_module, "MIN_PIECE_ROWS", 4)
    # 105 points: 3 chunks of 32 in 4 pieces of 8, the last chunk's 9 points in pieces of 8 and 1 ...
    assert len(sweep_module.pieces(105, 32, 4)) == 14
    assert written(4) == written(1)  # ... and the bytes do not change


def test_capacity_threads_sets_the_default_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv("CAPACITY_THREADS", "3")
    assert default_threads() == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("CAPACITY_THREADS", bad)
        with pytest.raises(ScenarioError, match="CAPACITY_THREADS"):
            default_threads()
    monkeypatch.delenv("CAPACITY_THREADS")
    assert default_threads() >= 1
