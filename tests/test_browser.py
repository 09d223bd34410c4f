"""A real browser: start the app headless, drive it with Playwright on the system Chromium, check the numbers.

Skipped when /usr/bin/chromium is absent, unless CAPACITY_REQUIRE_BROWSER=1 (set by .ci/run,
which installs Chromium from Debian), where a missing browser fails the test.
The screenshot is saved to artifacts/app.png.
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _need_browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CAPACITY_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (CAPACITY_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Streamlit app did not start within 60 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_headline_numbers_render_in_chromium(app_url, tmp_path):
    sync_api = _need_browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.goto(app_url, wait_until="domcontentloaded")
        page.get_by_text("Requests that fit").first.wait_for(timeout=60_000)
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="Requests that fit").first
        assert "752" in metric.inner_text()  # essay 000 with its 1,200-token shared prefix
        ceiling = page.locator('[data-testid="stMetric"]').filter(has_text="Ceiling").first
        assert "req/s" in ceiling.inner_text()
        page.get_by_text("What would move it").first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)  # let Plotly draw before the picture
        artifacts = ROOT / "artifacts"
        artifacts.mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts / "app.png"), full_page=True)
        browser.close()
    assert (ROOT / "artifacts" / "app.png").stat().st_size > 10_000
