"""A real browser: start the app headless, drive it with Playwright on the system Chromium, check every flow.

Skipped when /usr/bin/chromium is absent, unless CAPACITY_REQUIRE_BROWSER=1 (set by .ci/run,
which installs Chromium from Debian), where a missing browser fails the test.
Screenshots are saved to artifacts/ (app.png: the landing page after a catalog choice).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from capacity import Scenario

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
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
    _need_browser()
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


@pytest.fixture(scope="module")
def browser(app_url):
    sync_api = _need_browser()
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser, app_url):
    context = browser.new_context(viewport={"width": 1600, "height": 1400}, accept_downloads=True)
    page = context.new_page()
    yield page
    context.close()


# ---------------------------------------------------------------- driving Streamlit


def settle(page) -> None:
    """Wait until the script has finished its rerun (Streamlit marks the app with its run state)."""
    try:
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="running"]', timeout=1500)
    except Exception:  # noqa: BLE001 - the rerun may have finished before we looked
        pass
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=60_000)
    # Every element drawn: the headline shows before the widgets' code has arrived (each widget shows a skeleton
    # until then), so a test reading a widget waits for them.
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=60_000)


def open_app(page, url: str) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_text("Requests that fit").first.wait_for(timeout=60_000)
    settle(page)


@contextmanager
def opened_share_link(browser, page):
    """``page``'s share link opened in a second page: it shows the same headline and says it came from a link."""
    link, before = page.url, headline(page)
    other = browser.new_page(viewport={"width": 1600, "height": 1400})
    try:
        open_app(other, link)
        assert headline(other) == before
        assert preset_shown(other) == "loaded from the share link"
        yield other
    finally:
        other.close()


def select(page, label: str, option: str) -> None:
    """Choose ``option`` in the select box labelled ``label``. A box low in a long sidebar is scrolled to first, and
    opened again where its list did not show (a click that landed while the page redrew)."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text(label, exact=True)).first
    box.scroll_into_view_if_needed()
    wanted = page.get_by_role("option", name=option, exact=True)
    for _ in range(3):
        box.click()
        try:
            wanted.wait_for(timeout=5_000)
            break
        except Exception:  # noqa: BLE001 - the list did not open: close whatever did, and click again
            page.keyboard.press("Escape")
    wanted.click()
    settle(page)


def show_all_inputs(page) -> None:
    """Turn on "Show all inputs": the rarely changed inputs are drawn only then (app_views/sidebar.py)."""
    page.locator('[data-testid="stCheckbox"]').get_by_text("Show all inputs", exact=True).click()
    settle(page)


def hidden_inputs(page) -> str:
    """The sidebar's caption listing the inputs not drawn, with their values."""
    return page.locator('[data-testid="stSidebar"]').get_by_text("Not shown").inner_text()


def number(page, label: str, value: float) -> None:
    field = page.get_by_label(label, exact=True)
    field.fill(str(value))
    field.press("Enter")
    settle(page)


#: The value shown under ``label``: a column of the headline's figures table (app_views/figures.py), or a view's
#: st.metric.
FIGURE_JS = """label => {
  for (const table of document.querySelectorAll('[data-testid="stMarkdownContainer"] table')) {
    const at = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim()).indexOf(label);
    if (at >= 0) return table.querySelector('tbody tr').children[at].innerText.trim();
  }
  for (const box of document.querySelectorAll('[data-testid="stMetric"]'))
    if (box.innerText.includes(label)) return box.querySelector('[data-testid="stMetricValue"]').innerText.trim();
  return null;
}"""


def metric(page, label: str) -> str:
    page.wait_for_function(f"label => ({FIGURE_JS})(label) !== null", arg=label, timeout=60_000)
    return page.evaluate(FIGURE_JS, label)


def headline(page) -> dict[str, str]:
    return {label: metric(page, label) for label in ("Requests that fit", "Ceiling", "Goodput under promises")}


def preset_shown(page) -> str:
    """The entry the "Start from a preset" box shows."""
    return page.get_by_role("combobox", name="Start from a preset", exact=True).input_value().strip()


def expected(results) -> dict[str, str]:
    # The headline renders the one answer: one replica of the layout it chooses (the stated one without a load).
    from capacity.planning.sizing import mode_rates, size

    z = size(results.scenario, results)
    return {"Requests that fit": f"{z.replica['batch_max']:,.0f}",
            "Ceiling": f"{mode_rates(z.replica, z.mode)[0]:,.2f} req/s",
            "Goodput under promises": f"{z.replica_goodput_rps:,.2f} req/s"}


def save(page, tmp_path: Path) -> Path:
    """Click "Save scenario (YAML)" and return the downloaded file."""
    with page.expect_download() as download:
        page.get_by_role("button", name="Save scenario (YAML)").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    return path


def shoot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.wait_for_timeout(1000)  # let Plotly draw before the picture
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


# ---------------------------------------------------------------- flows


def test_landing_preset_then_catalog_model_gpu_and_tp_equals_the_cli_of_the_saved_yaml(page, app_url, tmp_path):
    open_app(page, app_url)
    select(page, "Start from a preset", "essay 000 worked example")
    assert metric(page, "Requests that fit") == "752"  # essay 000 with its 1,200-token shared prefix
    select(page, "Model", "llama-3-70b")
    select(page, "GPU", "h100-sxm")
    number(page, "tensor parallel", 4)
    path = save(page, tmp_path)
    data = yaml.safe_load(path.read_text())
    assert data["model"]["name"] == "llama-3-70b" and data["gpu"] == {"name": "h100-sxm", "count": 4}
    results = Scenario.from_dict(data).evaluate()
    assert headline(page) == expected(results)
    assert headline(page)["Requests that fit"] == "835"  # the catalog choice, not the preset's 16 GiB weights
    shoot(page, "app.png")
    assert (ARTIFACTS / "app.png").stat().st_size > 10_000


def test_unit_switch_leaves_the_sizing_unchanged(page, app_url, tmp_path):
    open_app(page, app_url)
    select(page, "Start from a preset", "essay 000 worked example")
    before = headline(page)
    page.locator('[data-testid="stRadio"]').get_by_text("GB", exact=True).click()
    settle(page)
    assert headline(page) == before
    assert "weights 17.18 GB" in hidden_inputs(page)  # 16 GiB shown in GB
    show_all_inputs(page)
    assert page.get_by_label("weights (GB)", exact=True).input_value() == "17.18"
    data = yaml.safe_load(save(page, tmp_path).read_text())
    assert data["model"]["weights"] == "16 GiB" and data["units"] == "GB"


def test_yaml_upload_round_trips(page, app_url, tmp_path):
    source = yaml.safe_load((ROOT / "scenarios" / "rag-llama-3.1-70b-4xh100.yaml").read_text())
    source["name"] = "ACME RAG pilot"
    source["gpu"]["price_per_hour"] = 2.5
    upload = tmp_path / "acme.yaml"
    upload.write_text(yaml.safe_dump(source, sort_keys=False))
    open_app(page, app_url)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(upload))
    page.get_by_text("Loaded acme.yaml").first.wait_for(timeout=30_000)
    settle(page)
    assert headline(page) == expected(Scenario.from_dict(source).evaluate())
    # The preset box says where the sizing came from, not the landing preset it replaced (left from issue 13).
    assert preset_shown(page) == "loaded from acme.yaml"
    saved = save(page, tmp_path)
    assert saved.name == "ACME_RAG_pilot.yaml" or saved.name.startswith("ACME")
    back = yaml.safe_load(saved.read_text())
    assert back == {**source, "model": {**source["model"], "name": "llama-3.1-70b"},
                    "gpu": {**source["gpu"], "name": "h100-sxm"}}


def test_engine_and_front_end_chosen_on_screen_are_the_saved_scenarios_and_the_link_keeps_them(page, browser, app_url,
                                                                                               tmp_path):
    """A user picks TensorRT-LLM behind NVIDIA Dynamo's front end for the chat preset: the saved file names both, the
    page's headline is ``capacity``'s for that file, the TTFT at the load is later than behind the engine's own server
    by the latency measured behind Dynamo, and the share link opens the same sizing with the same choices."""
    from capacity.inputs import engines

    open_app(page, app_url)
    select(page, "Start from a preset", "chat assistant, llama-3.1-8b on 1 x H100 SXM")
    select(page, "serving engine", "TensorRT-LLM")
    show_all_inputs(page)
    own = Scenario.from_dict(yaml.safe_load(save(page, tmp_path).read_text())).evaluate()
    select(page, "front end", "NVIDIA Dynamo front end")
    data = yaml.safe_load(save(page, tmp_path).read_text())
    assert (data["serving"]["engine"], data["serving"]["front_end"]) == ("tensorrt-llm", "dynamo")
    results = Scenario.from_dict(data).evaluate()
    assert headline(page) == expected(results)
    latency = engines.SILICON_REQUEST_LATENCY_S["tensorrt-llm"]
    assert float(results["ttft_at_load_s"]) == pytest.approx(float(own["ttft_at_load_s"]) + latency, rel=1e-12)
    # The preset states vLLM's memory utilisation, which replaces TensorRT-LLM's rule; the way back to the engine's
    # rule draws its own slider (the KV pool a share of the memory the weights leave free) at its default
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_text("memory utilisation", exact=True).count() == 1
    back = sidebar.get_by_role("button", name="Use the engine's default").first  # under memory utilisation
    back.scroll_into_view_if_needed()
    back.click()
    settle(page)
    share = sidebar.get_by_text("KV share of free memory", exact=True)
    share.scroll_into_view_if_needed()
    assert share.is_visible() and sidebar.get_by_text("memory utilisation", exact=True).count() == 0
    data = yaml.safe_load(save(page, tmp_path).read_text())
    assert "memory_utilization" not in data["serving"]
    assert headline(page) == expected(Scenario.from_dict(data).evaluate())
    shoot(page, "app-engine.png")
    with opened_share_link(browser, page) as other:
        show_all_inputs(other)
        shown = {label: other.get_by_role("combobox", name=label, exact=True).input_value().strip()
                 for label in ("serving engine", "front end")}
        assert shown == {"serving engine": "TensorRT-LLM", "front end": "NVIDIA Dynamo front end"}


def test_share_link_carries_the_sizing_and_the_view(page, browser, app_url):
    open_app(page, app_url)
    select(page, "Start from a preset", "chat assistant, llama-3.1-8b on 1 x H100 SXM")
    number(page, "prompt (tokens)", 2000)
    page.locator('[data-testid="stButtonGroup"]').get_by_text("Promise", exact=True).click()
    settle(page)
    page.wait_for_function("() => window.location.search.includes('view=Promise') "
                           "&& window.location.search.includes('prompt_tokens=2000')")
    with opened_share_link(browser, page) as other:
        other.get_by_text("In flight at goodput").first.wait_for(timeout=30_000)  # the Promise view is open


def test_bad_link_values_are_named_inline_not_a_traceback(page, app_url):
    open_app(page, f"{app_url}/?memory_utilization=5&model=abc")
    text = page.locator('[data-testid="stAlert"]').all_inner_texts()
    joined = " ".join(text)
    assert "memory utilisation" in joined and "abc" in joined
    assert "Traceback" not in page.content()
    landing = yaml.safe_load((ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").read_text())
    assert headline(page) == expected(Scenario.from_dict(landing).evaluate())  # the landing sizing, unchanged


def test_salesperson_walk_name_fleet_plan_tokens_per_day_and_link(page, browser, app_url, tmp_path):
    # Issue 13 (rest): the sizing is named after itself from the first render; headroom and peak factor are saved;
    # the Fleet view takes tokens/day; a link reopens the same sizing, plan and view.
    open_app(page, app_url)
    # the landing sizing: a catalog model on a priced catalog GPU (issue 30), named after itself
    assert page.get_by_label("Scenario name", exact=True).input_value() == "llama-3.1-8b on 1 x h100-sxm"
    assert metric(page, "Monthly cost").startswith("$")
    shoot(page, "walk-1-landing.png")
    select(page, "Start from a preset", "chat assistant, llama-3.1-8b on 1 x H100 SXM")
    select(page, "Model", "llama-3-70b")
    number(page, "tensor parallel", 4)
    assert page.get_by_label("Scenario name", exact=True).input_value() == "llama-3-70b on 4 x h100-sxm"
    show_all_inputs(page)
    number(page, "headroom (% spare)", 25)
    number(page, "peak factor (sale day = 10)", 3)
    page.locator('[data-testid="stButtonGroup"]').get_by_text("Fleet", exact=True).click()
    settle(page)
    page.locator('[data-testid="stRadio"]').get_by_text("tokens/day", exact=True).click()
    settle(page)
    number(page, "load (billion tokens/day, input + output)", 2)
    page.get_by_text("Cheapest that keeps the promises").first.wait_for(timeout=60_000)
    shoot(page, "walk-2-fleet-tokens-per-day.png")
    path = save(page, tmp_path)
    assert path.name.startswith("llama-3-70b")
    data = yaml.safe_load(path.read_text())
    assert data["name"] == "llama-3-70b on 4 x h100-sxm"
    assert data["fleet"] == {"headroom": 0.25, "peak_factor": 3}
    assert data["workload"]["arrival_rate"] == pytest.approx(2e9 / 86_400 / (1_200 + 250), rel=1e-12)
    assert headline(page) == expected(Scenario.from_dict(data).evaluate())
    page.wait_for_function("() => window.location.search.includes('view=Fleet')")
    with opened_share_link(browser, page) as other:
        assert "headroom 25%" in hidden_inputs(other) and "peak factor 3" in hidden_inputs(other)
        show_all_inputs(other)
        assert other.get_by_label("headroom (% spare)", exact=True).input_value() == "25.00"
        other.get_by_text("Cheapest that keeps the promises").first.wait_for(timeout=60_000)  # Fleet view open
        shoot(other, "walk-3-link.png")
