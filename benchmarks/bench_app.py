"""Benchmark: the app's server-side rerun time after an input change (Streamlit AppTest, headless, no browser).

Prints the median and p90 of N reruns that each change the prompt length (a new sizing each time: no cache
hit on the evaluation), and the first run of a fresh process (imports included) as the baseline. AppTest runs
the script in-process, so the figure is the script's own time plus Streamlit's, without the websocket or the
browser's rendering: the real-browser figures (first number on screen, rerun to new number on screen) are
``benchmarks/bench_app_browser.py``.

How the script is compiled. A Streamlit server keeps one ``ScriptCache`` per process (``Runtime``), so it
compiles ``app.py`` once. AppTest builds a new ``ScriptCache`` for every run inside ``LocalScriptRunner``
(``streamlit.testing.v1.local_script_runner``), so out of the box it compiles the script on every rerun. An
earlier version of this benchmark patched ``app_test.ScriptCache``, a name ``LocalScriptRunner`` never looks
up, and measured the recompiling runs while saying it did not. This version replaces the name the runner
does use and counts the compilations: the run stops if ``app.py`` was compiled more than once. ``--recompile``
measures AppTest's own way (one compilation per run) for comparison. ``app.py`` is a three-line shim, so the
two differ by well under a millisecond; the count is there so the figure is what it says.

    python benchmarks/bench_app.py [N] [--view NAME] [--recompile]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest, local_script_runner

APP = str(Path(__file__).resolve().parent.parent / "app.py")


class CountingCache(ScriptCache):
    """A ScriptCache that counts how often it compiles (a miss compiles the file)."""

    compiled = 0

    def get_bytecode(self, script_path: str):  # noqa: ANN201 (Streamlit's own signature)
        with self._lock:
            missing = str(Path(script_path).resolve()) not in self._cache
        if missing:
            CountingCache.compiled += 1
        return super().get_bytecode(script_path)


def main(n: int = 30, view: str = "Memory", recompile: bool = False) -> None:
    shared = CountingCache()
    # The name LocalScriptRunner looks up: one cache for every run (as the server's Runtime), or a new one each.
    local_script_runner.ScriptCache = CountingCache if recompile else (lambda: shared)
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
    runs = n + 2
    if not recompile and CountingCache.compiled != 1:
        raise SystemExit(f"app.py was compiled {CountingCache.compiled} times in {runs} runs: the shared script "
                         "cache did not take effect, so this is not the server's way")
    times.sort()
    median, p90 = statistics.median(times), times[int(0.9 * (len(times) - 1))]
    way = "compiled on every run (AppTest's way)" if recompile else "compiled once (the server's way)"
    print(f"app.py compiled {CountingCache.compiled} time(s) in {runs} runs: {way}")
    print(f"first run of a fresh process (imports included)   {cold * 1e3:8.1f} ms")
    print(f"rerun after an input change ({view} view)  median {median * 1e3:8.1f} ms   p90 {p90 * 1e3:8.1f} ms"
          f"   (n={n})")
    print(f"first run / rerun median   {cold / median:8.1f}x")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    chosen = sys.argv[sys.argv.index("--view") + 1] if "--view" in sys.argv else "Memory"
    args = [a for a in args if a != chosen]
    main(int(args[0]) if args and args[0].isdigit() else 30, chosen, "--recompile" in sys.argv)
