"""Benchmark: the app as a user feels it, in a real browser (Playwright on the system Chromium).

Two figures, each the median (and p90) of several tries against a fresh ``streamlit run app.py``:

* first number: from ``page.goto`` to the "Requests that fit" value on screen, in a new browser context
  (no cache), for ``--loads`` page loads. Target: 1.5 s.
* rerun: from pressing Enter in the "prompt (tokens)" box to the new "Requests that fit" value on screen
  (the value the library computes for that prompt), for ``N`` edits. Target: 150 ms median.

Baseline printed alongside: the same rerun measured on the landing page with the Memory view (three
Plotly charts) against the All numbers view (a table only), so the cost of the charts shows.

    python benchmarks/bench_app_browser.py [N] [--loads 5] [--root DIR]

``--root`` runs another checkout's app.py (e.g. the previous release) for a baseline on the same machine.
"""

from __future__ import annotations

import copy
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capacity import Scenario  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
LANDING = yaml.safe_load((ROOT / "scenarios" / "essay-000-paging.yaml").read_text())


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fits(prompt: int) -> str:
    data = copy.deepcopy(LANDING)
    data["workload"]["prompt_tokens"] = prompt
    return f"{Scenario.from_dict(data).evaluate()['batch_max']:,.0f}"


def _stats(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


METRIC = ('() => { const m = [...document.querySelectorAll(\'[data-testid="stMetric"]\')]'
          '.find(e => e.innerText.startsWith("Requests that fit"));'
          ' return m ? m.querySelector(\'[data-testid="stMetricValue"]\').innerText.trim() : null; }')


def main(n: int = 20, loads: int = 5, root: Path = ROOT) -> None:
    from playwright.sync_api import sync_playwright

    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(root / "app.py"), "--server.headless",
                               "true", "--server.port", str(port), "--server.address", "127.0.0.1",
                               "--server.fileWatcherType", "none"], cwd=root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        prompts = [1400 + 37 * i for i in range(n + 1)]
        expected = {p: _fits(p) for p in prompts}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            warm = browser.new_page()
            warm.goto(url)
            warm.wait_for_function(f"() => ({METRIC})() === '752'", timeout=120_000)  # imports, caches
            warm.close()
            first = []
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1600, "height": 1200})
                page = context.new_page()
                start = time.perf_counter()
                page.goto(url)
                page.wait_for_function(f"() => ({METRIC})() === '752'", timeout=60_000, polling="raf")
                first.append(time.perf_counter() - start)
                context.close()
            results = {}
            for view in ("Memory", "All numbers"):
                page = browser.new_page(viewport={"width": 1600, "height": 1200})
                page.goto(url)
                page.wait_for_function(f"() => ({METRIC})() === '752'", timeout=60_000)
                page.locator('[data-testid="stButtonGroup"]').get_by_text(view, exact=True).click()
                page.wait_for_timeout(1500)
                box = page.get_by_label("prompt (tokens)", exact=True)
                times = []
                for prompt in prompts:
                    box.fill(str(prompt))
                    page.wait_for_timeout(300)  # the page at rest before the timed edit
                    start = time.perf_counter()
                    box.press("Enter")
                    page.wait_for_function(f"() => ({METRIC})() === '{expected[prompt]}'", timeout=60_000,
                                           polling="raf")
                    times.append(time.perf_counter() - start)
                results[view] = times[1:]  # the first edit after a view change also warms that view's caches
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)
    f_med, f_p90 = _stats(first)
    print(f"first number after opening   median {f_med * 1e3:7.0f} ms   p90 {f_p90 * 1e3:7.0f} ms   (n={loads})"
          f"   target 1500 ms: {'met' if f_med <= 1.5 else 'NOT met'}")
    for view, times in results.items():
        med, p90 = _stats(times)
        print(f"rerun, {view:<12} view     median {med * 1e3:7.0f} ms   p90 {p90 * 1e3:7.0f} ms   (n={len(times)})"
              f"   target 150 ms: {'met' if med <= 0.150 else 'NOT met'}")
    memory, table = (statistics.median(results[v]) for v in ("Memory", "All numbers"))
    print(f"Memory view / All numbers view rerun: {memory / table:5.2f}x")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    loads = int(sys.argv[sys.argv.index("--loads") + 1]) if "--loads" in sys.argv else 5
    other = Path(sys.argv[sys.argv.index("--root") + 1]) if "--root" in sys.argv else ROOT
    args = [a for a in args if a != str(other)]
    main(int(args[0]) if args else 20, loads, other.resolve())
