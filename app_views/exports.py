"""Every download the app offers, in one registry: label -> (builder of the bytes, file suffix, MIME type).

Adding a format touches this table only. Builders take the Results and run only when their button is clicked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capacity.customer_report import customer_report_html
from capacity.files import safe_filename
from capacity.report import report_for, to_csv, to_json
from capacity.scenario import Results
from capacity.xlsx import workbook_bytes

#: label -> (results -> file content, suffix, MIME type)
EXPORTS: dict[str, tuple[Callable[[Results], Any], str, str]] = {
    "Report (CSV)": (lambda r: to_csv(report_for(r)), ".csv", "text/csv"),
    "Report (XLSX, live formulas)": (lambda r: workbook_bytes(report_for(r)), ".xlsx",
                                     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "Report (JSON)": (lambda r: to_json(report_for(r)), ".json", "application/json"),
    "Customer report (HTML)": (customer_report_html, ".html", "text/html"),
}


def render_downloads(where: Any, results: Results, name: str) -> None:
    """One button per format, each file named after the scenario's name."""
    cols = where.columns(len(EXPORTS))
    for col, (label, (build, suffix, mime)) in zip(cols, EXPORTS.items(), strict=True):
        col.download_button(label, lambda build=build: build(results), safe_filename(name, suffix), mime=mime,
                            key=f"export_{suffix}", width="stretch")
