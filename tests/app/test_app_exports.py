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
