"""Issue 30's walk in a real browser (Playwright on the system Chromium): every view of a realistic sizing at
1,280 and 1,920 px, each checked as a reader meets it and photographed (artifacts/walk-<width>-<view>.png).

Per view: no error; nothing wider than the page or its container and no table that needs a sideways scroll; every
value axis of every chart titled, with tick labels; no code name of the glossary (``render/glossary.WORDS``) in
the visible text.
"""

from __future__ import annotations

import re

import pytest

from app_views.views import VIEWS
from capacity.render.glossary import WORDS
from tests.app.test_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    app_url,
    browser,
    open_app,
    select,
    settle,
)

PRESET = "RAG, llama-3.1-70b fp8 on 4 x H100 SXM"

#: What the page measures in the browser: page and element overflow, grids that scroll sideways, chart axes.
MEASURE = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const out = {page: document.documentElement.scrollWidth - window.innerWidth, wide: [], grids: [], axes: [],
               text: main.innerText, exceptions: main.querySelectorAll('[data-testid="stException"]').length};
  for (const el of main.querySelectorAll('[data-testid="stElementContainer"]')) {
    const r = el.getBoundingClientRect(), p = el.parentElement.getBoundingClientRect();
    if (r.width > 0 && r.right > p.right + 2) out.wide.push(el.innerText.slice(0, 60));
  }
  for (const t of main.querySelectorAll('[data-testid="stTable"]')) {
    if (t.scrollWidth > t.clientWidth + 2) out.wide.push('table: ' + t.innerText.slice(0, 60));
  }
  for (const grid of main.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller'))
    if (grid.scrollWidth > grid.clientWidth + 2) out.grids.push(grid.scrollWidth + ' > ' + grid.clientWidth);
  for (const plot of main.querySelectorAll('.js-plotly-plot')) {
    const layout = plot._fullLayout;
    if (!layout) continue;
    for (const key of Object.keys(layout)) {
      if (!/^[xy]axis\\d*$/.test(key)) continue;
      const axis = layout[key];
      if (!axis.visible || axis.showticklabels === false || axis.type === 'category') continue;
      const ticks = [...plot.querySelectorAll('.' + key.replace('axis', '') + 'tick text')].map(t => t.textContent);
      out.axes.push({chart: (layout.title && layout.title.text) || '', axis: key,
                     title: (axis.title && axis.title.text) || '', ticks: ticks});
    }
  }
  return out;
}"""

CODE_NAMES = [name for name in WORDS if "_" in name]


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_view_reads_cleanly_at_common_widths(browser, app_url, width):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 3200})
    page = context.new_page()
    try:
        open_app(page, app_url)
        select(page, "Start from a preset", PRESET)
        problems = []
        ARTIFACTS.mkdir(exist_ok=True)
        for view in VIEWS:
            page.locator('[data-testid="stButtonGroup"]').get_by_text(view, exact=True).click()
            settle(page)
            page.wait_for_timeout(500)  # Plotly draws after the script has finished
            seen = page.evaluate(MEASURE)
            page.screenshot(path=str(ARTIFACTS / f"walk-{width}-{view.replace(' ', '-').lower()}.png"))
            if seen["exceptions"]:
                problems.append(f"{view}: an exception is shown")
            if seen["page"] > 0:
                problems.append(f"{view}: the page scrolls sideways by {seen['page']} px")
            problems += [f"{view}: wider than its container: {w!r}" for w in seen["wide"]]
            problems += [f"{view}: a table scrolls sideways ({g})" for g in seen["grids"] if view != "All numbers"]
            for axis in seen["axes"]:
                if not axis["title"].strip() or not any(t.strip() for t in axis["ticks"]):
                    problems.append(f"{view}: {axis['chart']!r} {axis['axis']} has no title or no tick labels")
            text = seen["text"]
            leaked = [name for name in CODE_NAMES if re.search(rf"(?<![\w.\-/]){re.escape(name)}(?![\w\-/])", text)]
            if leaked:
                problems.append(f"{view}: code names in the text: {leaked}")
        assert not problems, "\n".join(problems)
    finally:
        context.close()
