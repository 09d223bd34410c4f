"""Every download the app offers builds from the sizing on screen: the customer report among them."""

import re
from pathlib import Path

import pytest

from app_views.exports import EXPORTS
from capacity import load_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return load_scenario(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").evaluate()


def test_every_export_builds_a_file(results):
    for label, (build, suffix, mime) in EXPORTS.items():
        data = build(results)
        assert len(data) > 100, label
        assert suffix.startswith(".") and "/" in mime


def test_the_customer_report_download_carries_the_sizing_numbers(results):
    build, suffix, mime = EXPORTS["Customer report (HTML)"]
    assert (suffix, mime) == (".html", "text/html")
    html = build(results)
    found = re.search(r'data-key="result:goodput_rps" data-value="([^"]+)"', html)
    assert found is not None
    assert float(found.group(1)) == pytest.approx(float(results["goodput_rps"]), rel=1e-12)


def test_the_csv_download_is_in_the_units_the_page_shows(results):
    """Issue 30: the CSV a user downloads reads like the page (ms, GB, 4 digits), with a base-unit file beside it."""
    import csv
    import io

    human = {r["quantity"]: r for r in csv.DictReader(io.StringIO(EXPORTS["Report (CSV)"][0](results)))}
    base = {r["quantity"]: r for r in csv.DictReader(io.StringIO(EXPORTS["Report (CSV, base units)"][0](results)))}
    assert human["decode_step_s"]["unit"] == "ms" and base["decode_step_s"]["unit"] == "s"
    assert float(human["decode_step_s"]["value"]) == pytest.approx(float(base["decode_step_s"]["value"]) * 1e3,
                                                                   rel=1e-3)
    assert len(human["decode_step_s"]["value"].replace(".", "").lstrip("0")) <= 4  # 4 significant digits
    assert EXPORTS["Report (CSV)"][1] == ".csv" and EXPORTS["Report (CSV, base units)"][1] == ".base.csv"


def test_the_pdf_download_is_the_printed_customer_report(results):
    from app_views.exports import pdf_available

    if not pdf_available():
        pytest.skip("no Chromium and playwright on this machine: the app offers no PDF here")
    pdf = EXPORTS["Customer report (PDF)"][0](results)
    assert pdf[:5] == b"%PDF-" and len(pdf) > 10_000
