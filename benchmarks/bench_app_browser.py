"""Benchmark: the app as a user feels it, in a real browser (Playwright on the system Chromium).

Two figures, each the median (and p90) of several tries against a fresh ``streamlit run app.py``:

* first number: from ``page.goto`` to the "Requests that fit" value on screen, in a new browser context
  (no cache: the browser loads and compiles Streamlit's JavaScript each time), for ``--loads`` page loads,
  after one warm-up load (the server's imports and caches). Target: 1.5 s.
* rerun: from pressing Enter in the "prompt (tokens)" box to the new "Requests that fit" value on screen
  (the value the library computes for that prompt), for ``N`` edits, each made with the page at rest (the
  previous rerun finished and drawn: Streamlit's running indicator gone). Target: 150 ms median.

Reruns are measured in three views: Summary (the landing view: text only), Memory (four Plotly charts) and
All numbers (a data grid), so the cost of the charts and of the grid shows. The first loads also count what
the browser downloads (bytes of scripts), which shows whether plotly.js (4.7 MB) was fetched.

Beside them, in the same run and interleaved, the **floor**: a Streamlit page holding one metric and one
number input, nothing else (Streamlit's own cost of a page load and of a rerun on this machine at this moment).
On a shared machine the ratio to the floor is the stable figure.

    python benchmarks/bench_app_browser.py [N] [--loads 5] [--root DIR] [--baseline DIR]

``--root`` runs another checkout's app.py (e.g. the previous release) instead of this one; ``--baseline DIR``
runs another checkout's app beside this one, interleaved with it and the floor in the same run (its figures are
labelled "baseline"), so a change is measured against the code before it under the same load.
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capacity import Scenario  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
LANDING = yaml.safe_load((ROOT / "scenarios" / "essay-000-paging.yaml").read_text())
#: The floor: Streamlit with one metric and one number input (the metric shows 3 x the prompt).
FLOOR_APP = '''import streamlit as st
st.metric("Requests that fit", f"{3 * st.session_state.get('prompt', 1500):,}")
st.number_input("prompt (tokens)", 1, 1_000_000, 1500, key="prompt")
'''
#: The "Requests that fit" value on screen: a column of the app's headline table (app_views/figures.py), or the
#: floor's st.metric.
METRIC = ('() => { for (const t of document.querySelectorAll(\'[data-testid="stMarkdownContainer"] table\')) {'
          ' const i = [...t.querySelectorAll("thead th")].map(e => e.innerText.trim()).indexOf("Requests that fit");'
          ' if (i >= 0) return t.querySelector("tbody tr").children[i].innerText.trim(); }'
          ' const m = [...document.querySelectorAll(\'[data-testid="stMetric"]\')]'
          '.find(e => e.innerText.startsWith("Requests that fit"));'
          ' return m ? m.querySelector(\'[data-testid="stMetricValue"]\').innerText.trim() : null; }')
#: The page at rest: no script running (Streamlit's running indicator is gone).
IDLE = "() => !!document.querySelector('[data-testid=\"stApp\"][data-test-script-state=\"notRunning\"]')"


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


@contextmanager
def _server(script: Path, cwd: Path):
    """``streamlit run script`` on a free port; yields its URL once healthy."""
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
                               "--server.port", str(port), "--server.address", "127.0.0.1",
                               "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                              cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


def _first_number(browser, url: str, expected: str) -> tuple[float, int]:
    """Seconds from opening the page to the first number on screen, and bytes of script fetched by then."""
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    page = context.new_page()
    scripts: list = []
    page.on("response", lambda r: scripts.append(r) if r.request.resource_type == "script" else None)
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_function(f"() => ({METRIC})() === '{expected}'", timeout=120_000, polling="raf")
    elapsed = time.perf_counter() - start
    fetched = 0
    for response in list(scripts):
        try:
            fetched += len(response.body())
        except Exception:  # noqa: BLE001 (a response still streaming or gone: not counted)
            pass
    context.close()
    return elapsed, fetched


def _open(browser, url: str, expected: str, view: str | None):
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.goto(url)
    page.wait_for_function(f"() => ({METRIC})() === '{expected}'", timeout=120_000)
    if view:
        page.locator('[data-testid="stButtonGroup"]').get_by_text(view, exact=True).click()
    page.wait_for_function(IDLE, timeout=120_000)
    return page


def _rerun(page, prompt: int, expected: str) -> float:
    box = page.get_by_label("prompt (tokens)", exact=True)
    box.fill(str(prompt))
    page.wait_for_function(IDLE, timeout=120_000)  # the page at rest before the timed edit
    page.wait_for_timeout(100)
    start = time.perf_counter()
    box.press("Enter")
    page.wait_for_function(f"() => ({METRIC})() === '{expected}'", timeout=60_000, polling="raf")
    return time.perf_counter() - start


def main(n: int = 20, loads: int = 5, root: Path = ROOT, baseline: Path | None = None) -> None:
    from playwright.sync_api import sync_playwright

    prompts = [1400 + 37 * i for i in range(n + 1)]
    expected = {p: _fits(p) for p in prompts}
    landing = _fits(LANDING["workload"]["prompt_tokens"])
    floor_value = {p: f"{3 * p:,}" for p in [1500, *prompts]}
    roots = {"app": root, **({"baseline": baseline} if baseline else {})}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack, sync_playwright() as p:
        floor_script = Path(tmp) / "floor.py"
        floor_script.write_text(FLOOR_APP)
        urls = {key: stack.enter_context(_server(where / "app.py", where)) for key, where in roots.items()}
        floor_url = stack.enter_context(_server(floor_script, Path(tmp)))
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        for url in urls.values():
            _open(browser, url, landing, None).close()            # server imports, caches
        _open(browser, floor_url, floor_value[1500], None).close()
        first: dict[str, list[float]] = {key: [] for key in [*roots, "floor"]}
        script_bytes: dict[str, int] = {}
        targets = [*((key, url, landing) for key, url in urls.items()), ("floor", floor_url, floor_value[1500])]
        for _ in range(loads):                                    # interleaved
            for key, url, value in targets:
                took, script_bytes[key] = _first_number(browser, url, value)
                first[key].append(took)
        pages = {}
        for key, url in urls.items():
            # The views this checkout has (a previous release, run with --root, may lack the Summary view).
            known = (roots[key] / "app_views" / "views.py").read_text()
            for view in ("Summary", "Memory", "All numbers"):
                if f'"{view}"' in known:
                    pages[f"{view}{' (baseline)' if key == 'baseline' else ''}"] = _open(browser, url, landing, view)
        pages["floor"] = _open(browser, floor_url, floor_value[1500], None)
        reruns: dict[str, list[float]] = {k: [] for k in pages}
        for i, prompt in enumerate(prompts):                      # interleaved
            for key, page in pages.items():
                took = _rerun(page, prompt, floor_value[prompt] if key == "floor" else expected[prompt])
                if i:  # the first edit warms each page's caches
                    reruns[key].append(took)
        browser.close()
    labels = {"app": "app", "baseline": "baseline app", "floor": "floor (one metric)"}
    for key in first:
        med, p90 = _stats(first[key])
        target = f"   target 1500 ms: {'met' if med <= 1.5 else 'NOT met'}" if key == "app" else ""
        print(f"first number after opening, {labels[key]:<20} median {med * 1e3:7.0f} ms   p90 {p90 * 1e3:7.0f} ms   "
              f"(n={loads}){target}")
        print(f"    scripts fetched before it, {labels[key]}: {script_bytes[key] / 1e6:,.2f} MB")
    for key in roots:
        print(f"first number, {labels[key]} / floor: "
              f"{statistics.median(first[key]) / statistics.median(first['floor']):5.2f}x")
    floor = statistics.median(reruns["floor"])
    for key, times in reruns.items():
        med, p90 = _stats(times)
        target = f"   target 150 ms: {'met' if med <= 0.150 else 'NOT met'}" if key in ("Summary", "Memory",
                                                                                         "All numbers") else ""
        name = key if key == "floor" else key.replace(" (baseline)", " view (baseline)") if "baseline" in key else \
            f"{key} view"
        print(f"rerun, {name:<28} median {med * 1e3:7.0f} ms   p90 {p90 * 1e3:7.0f} ms   (n={len(times)})   "
              f"/ floor {med / floor:5.2f}x{target}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=20, help="reruns timed in each view (default 20)")
    parser.add_argument("--loads", type=int, default=5, help="page loads timed (after one warm-up load)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    parser.add_argument("--baseline", type=Path, help="another checkout's app, run interleaved beside this one")
    args = parser.parse_args()
    main(args.n, args.loads, args.root.resolve(), args.baseline.resolve() if args.baseline else None)
