"""The customer report in a real browser: Chromium opens the file offline, Plotly draws every chart, the numbers
read on screen are the library's, and the page prints to a PDF.

Skipped when Chromium is absent, unless CAPACITY_REQUIRE_BROWSER=1 (tests/app/test_browser.py's launch helper).
Screenshots go to artifacts/report.png (screen) and artifacts/report-print.png (print media, A4 width).
"""

import math
import re
from pathlib import Path

from capacity import load_scenario
from capacity.answers.fleet_answer import fleet_answer
from capacity.render.customer_report import CHARTS_DRAWN, customer_report_html, html_to_pdf
from tests.app.test_browser import CHROMIUM, FLAGS, _need_browser

ROOT = Path(__file__).resolve().parents[2]


def test_report_opens_offline_draws_charts_and_prints(tmp_path):
    sync_api = _need_browser()
    results = load_scenario(ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml").evaluate()
    document = customer_report_html(results)
    page_file = tmp_path / "sizing.html"
    page_file.write_text(document, encoding="utf-8")
    expected = fleet_answer(results)
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 900, "height": 1200})
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_file.as_uri(), wait_until="load")
            page.wait_for_function(CHARTS_DRAWN, timeout=30_000)
            assert errors == []
            assert all(url.startswith("file://") for url in requests), requests
            assert page.locator(".chart .main-svg").count() >= 3 * 2  # Plotly draws two SVG layers per chart
            assert page.locator('[data-key="fleet:gpus"]').inner_text() == f"{expected.fleet.gpus:,}"
            goodput = page.locator('[data-key="sizing:replica_goodput_rps"]').first.inner_text()
            assert goodput == f"{expected.sizing.replica_goodput_rps:,.2f} req/s"
            assert "How sure we are" in page.inner_text("body")
            page.screenshot(path=str(artifacts / "report.png"), full_page=True)
            page.emulate_media(media="print")
            page.set_viewport_size({"width": 794, "height": 1123})  # A4 at 96 px per inch
            page.screenshot(path=str(artifacts / "report-print.png"), full_page=True)
            overflow = page.evaluate("document.documentElement.scrollWidth")
            assert overflow <= 794, f"the printed page is {overflow} px wide, wider than A4"
        finally:
            browser.close()
    pdf = html_to_pdf(document, chromium=CHROMIUM)
    assert pdf.startswith(b"%PDF-")
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    # The fleet table sizes every catalog GPU type beside the scenario's (issue 14 took the catalog from 9 to 17
    # GPUs: 13 pages); the bound catches a print layout that breaks apart, not the catalog's growth.
    assert 2 <= pages <= 16, pages
    (artifacts / "report.pdf").write_bytes(pdf)
    assert (artifacts / "report.png").stat().st_size > 10_000
    assert not math.isnan(results["goodput_rps"])
