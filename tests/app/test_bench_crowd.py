"""The crowd benchmark's client (benchmarks/bench_crowd.py) speaks the installed Streamlit's protocol: two sessions,
each in its own process, open the app over its websocket, read the headline's first number, change the prompt
length and read the new one. The benchmark's timings are its own; this checks only that its clients work."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    pytest.importorskip("psutil")
    spec = importlib.util.spec_from_file_location("bench_crowd", ROOT / "benchmarks" / "bench_crowd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_clients_get_their_first_number_and_their_edits_answer():
    bench = _bench()
    with bench._server(ROOT) as (url, proc):
        runs, _ = bench.crowd(url, 2, [1500, 7000])
        assert bench.cpu_seconds(proc) > 0 and bench.rss_bytes(proc) > 0
    for run in runs:
        assert run["failed"] is None and run["errors"] == [], run
        assert 0 < run["first_s"] <= run["done_s"] and run["rerun_s"] is not None
    assert "view=Simulator" in bench.heavy_query(3) and "100000" in bench.heavy_query(3)
