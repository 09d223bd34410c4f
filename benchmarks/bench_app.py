"""Benchmark: the app's rerun time after a slider change (Streamlit AppTest, headless).

Prints the median and p90 of N reruns that each move the memory-utilisation slider, and the
first (cold) run as the baseline. AppTest runs the script in-process, so the figure includes
Streamlit's own script overhead but not the browser's rendering or the websocket.

    python benchmarks/bench_app.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def main(n: int = 30) -> None:
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
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
