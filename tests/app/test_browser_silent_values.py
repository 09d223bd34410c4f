"""Issue 27 in a real browser (Playwright on the system Chromium): after another model and GPU, the landing preset's
hidden shared prefix is named above the views, the preset box says the sizing moved, the downloaded CSV report gives
the prefix's source as the preset, and the reset button takes it back to none. Screenshot: artifacts/silent.png."""

import csv
import io
import shutil

from tests.app.test_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    app_url,
    browser,
    open_app,
    page,
    select,
    settle,
    shoot,
)

PRESET = "essay 000 worked example"


def csv_sources(page, tmp_path) -> dict[str, str]:  # noqa: F811 - a page
    """Click "Report (CSV)" and read its input table: quantity -> source.

    A click that lands while the rerun after the previous action redraws the button is lost (no download event), and
    after a reset the button was sometimes not clickable for 30 s (covered while the page redraws): settle, then
    send the button its click event directly, up to three times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    button = page.get_by_role("button", name="Report (CSV)", exact=True)
    for attempt in range(3):
        settle(page)
        button.wait_for(state="visible", timeout=60_000)
        try:
            with page.expect_download(timeout=60_000) as download:
                button.click(timeout=10_000) if attempt == 0 else button.dispatch_event("click")
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    path = tmp_path / "report.csv"
    download.value.save_as(path)
    rows = csv.DictReader(io.StringIO(path.read_text()))
    return {row["quantity"]: row["source"] for row in rows if row["section"] == "input"}


def test_the_hidden_prefix_is_named_reported_as_the_presets_and_reset(page, app_url, tmp_path):  # noqa: F811
    open_app(page, app_url)
    select(page, "Start from a preset", PRESET)  # essay 000: its 1,200-token shared prefix hides under a new model
    select(page, "Model", "llama-3.1-8b")
    select(page, "GPU", "h100-sxm")
    main = page.locator('[data-testid="stMain"]')
    alert = main.locator('[data-testid="stAlert"]').filter(has_text="shared prefix 1,200 tokens")
    assert f"shared prefix 1,200 tokens (from the preset '{PRESET}')" in alert.first.inner_text()
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert f"Modified from the preset '{PRESET}': model, GPU" in sidebar.inner_text()
    shoot(page, "silent.png")
    shutil.copy(ARTIFACTS / "silent.png", "/tmp/appsilent.png")
    assert csv_sources(page, tmp_path)["shared_prefix_tokens"] == f"preset: {PRESET}"
    main.get_by_role("button", name="Reset to shared prefix 0 tokens").click()
    settle(page)
    assert main.locator('[data-testid="stAlert"]').filter(has_text="shared prefix 1,200").count() == 0
    # The source after the reset ("default") is checked through the app's report in AppTest
    # (tests/app/test_app_silent_values.py): a second download right after the reset's rerun was lost in Chromium in
    # about one run of three, whatever the wait.
