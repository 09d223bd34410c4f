"""Benchmark: the app's rerun time after a slider change (Streamlit AppTest, headless).

Prints the median and p90 of N reruns that each move the memory-utilisation slider, and the
first (cold) run as the baseline. AppTest runs the script in-process, so the figure includes
Streamlit's own script overhead but not the browser's rendering or the websocket. AppTest
compiles the script afresh on every run, which a server does once per app; the benchmark
shares one script cache across runs, as the server does (pass --recompile to measure AppTest's
own way too).

    python benchmarks/bench_app.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest, app_test

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def main(n: int = 30, recompile: bool = False) -> None:
    if not recompile:
        shared = ScriptCache()
        app_test.ScriptCache = lambda: shared  # one compiled script for all runs, as a server keeps it
    start = time.perf_counter()
    at = AppTest.from_file(APP, default_timeout=120).run()
    cold = time.perf_counter() - start
    times = []
    for i in range(n):
        value = 0.80 + 0.15 * (i % 2) + 0.001 * i  # a new value each time: no cache hit on the evaluation
        start = time.perf_counter()
        at.sidebar.slider(key="memory_utilization").set_value(round(value, 3)).run()
        times.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    times.sort()
    median, p90 = statistics.median(times), times[int(0.9 * (len(times) - 1))]
    print(f"cold first run      {cold * 1e3:8.1f} ms")
    print(f"rerun after slider  median {median * 1e3:8.1f} ms   p90 {p90 * 1e3:8.1f} ms   (n={n})")
    print(f"cold / median       {cold / median:8.1f}x")
    print(f"target              {'met' if median < 0.150 else 'NOT met'}: median under 150 ms")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 30, recompile="--recompile" in sys.argv)
