"""Every download the app offers, in one registry: label -> (builder of the bytes, file suffix, MIME type).

Adding a format touches this table only. Builders take the Results and run only when their button is clicked;
they import their writers then (the XLSX writer and the report's charting libraries cost a second of imports,
which the page's first number should not wait for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capacity.fileio.files import safe_filename
from capacity.model.scenario import Results


def _csv(results: Results) -> str:
    """The report in the units the page shows (GB or GiB as chosen, ms, 4 significant digits, unit per row)."""
    from capacity.render.report import report_for, to_csv

    return to_csv(report_for(results), "human")


def _csv_base(results: Results) -> str:
    """The report in base units at full precision (B, s, requests/s), for analysts' own arithmetic."""
    from capacity.render.report import report_for, to_csv

    return to_csv(report_for(results), "base")


def _xlsx(results: Results) -> bytes:
    from capacity.render.report import report_for
    from capacity.render.xlsx import workbook_bytes

    return workbook_bytes(report_for(results))


def _json(results: Results) -> str:
    from capacity.render.report import report_for, to_json

    return to_json(report_for(results))


def _customer_report(results: Results) -> str:
    """The customer report for the scenario's load, sized with its fleet section (peak factor, headroom)."""
    from capacity.render.customer_report import customer_report_html

    plan = results.scenario.fleet
    return customer_report_html(results, peak_factor=plan.peak_factor, headroom=plan.headroom)


def _customer_pdf(results: Results) -> bytes:
    """The customer report printed to PDF (A4) by headless Chromium, as ``capacity report -o FILE.pdf`` does."""
    from capacity.render.customer_report import html_to_pdf

    return html_to_pdf(_customer_report(results))


def pdf_available() -> bool:
    """Whether this server can print the report to PDF: the playwright package and a Chromium are installed."""
    import importlib.util
    import shutil
    from pathlib import Path

    return importlib.util.find_spec("playwright") is not None and bool(
        shutil.which("chromium") or Path("/usr/bin/chromium").exists())


#: label -> (results -> file content, suffix, MIME type)
EXPORTS: dict[str, tuple[Callable[[Results], Any], str, str]] = {
    "Report (CSV)": (_csv, ".csv", "text/csv"),
    "Report (CSV, base units)": (_csv_base, ".base.csv", "text/csv"),
    "Report (XLSX, live formulas)": (_xlsx, ".xlsx",
                                     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "Report (JSON)": (_json, ".json", "application/json"),
    "Customer report (HTML)": (_customer_report, ".html", "text/html"),
    "Customer report (PDF)": (_customer_pdf, ".pdf", "application/pdf"),
}


def render_downloads(where: Any, results: Results, name: str) -> None:
    """One button per format, each file named after the scenario's name (PDF where this server can print it).

    A download does not rerun the page (``on_click="ignore"``): the file is built from the results on the page, and
    a rerun would only redraw the same sizing (and, under load, redraw the buttons while the browser waits for its
    file)."""
    row = where.container(horizontal=True, gap="small")  # one element (columns(n) would be n + 1)
    for label, (build, suffix, mime) in EXPORTS.items():
        if suffix == ".pdf" and not pdf_available():
            continue
        row.download_button(label, lambda build=build: build(results), safe_filename(name, suffix), mime=mime,
                            key=f"export_{suffix}", width="stretch", on_click="ignore")
