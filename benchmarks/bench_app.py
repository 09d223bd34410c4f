"""Benchmark: the app's server-side rerun time after an input change (Streamlit AppTest, headless, no browser).

Prints the median and p90 of N reruns that each change the prompt length (a new sizing each time: no cache
hit on the evaluation), and the first (cold) run as the baseline. AppTest runs the script in-process, so the
figure is the script's own time plus Streamlit's, without the websocket or the browser's rendering: the
real-browser figures (first number on screen, rerun to new number on screen) are
``benchmarks/bench_app_browser.py``.

Streamlit 1.67 compiles the script file again on every rerun (its script cache is per run), so ``app.py``
is a three-line shim and the page lives in ``app_views`` modules, which Python compiles once per process.
This benchmark measures it that way, as the server runs it; it does not share a compiled script between
runs (an earlier version did, which the server never does).

    python benchmarks/bench_app.py [N] [--view NAME]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def main(n: int = 30, view: str = "Memory") -> None:
    start = time.perf_counter()
    at = AppTest.from_file(APP, default_timeout=120).run()
    cold = time.perf_counter() - start
    at.button_group(key="view").set_value(view).run()
    times = []
    for i in range(n):
        start = time.perf_counter()
        at.sidebar.number_input(key="prompt_tokens").set_value(1400 + 37 * i).run()
        times.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    times.sort()
    median, p90 = statistics.median(times), times[int(0.9 * (len(times) - 1))]
    print(f"cold first run      {cold * 1e3:8.1f} ms")
    print(f"rerun after an input change ({view} view)  median {median * 1e3:8.1f} ms   p90 {p90 * 1e3:8.1f} ms"
          f"   (n={n})")
    print(f"cold / median       {cold / median:8.1f}x")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    chosen = sys.argv[sys.argv.index("--view") + 1] if "--view" in sys.argv else "Memory"
    main(int(args[0]) if args and args[0].isdigit() else 30, chosen)
