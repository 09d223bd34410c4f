"""The headline's figures as one Markdown table: labels on top, the values in bold, what each means below.

One Markdown element instead of six ``st.metric`` calls in two rows of columns. Streamlit draws ``st.metric``
(and Markdown holding raw HTML) with code the browser fetches on first use, after the sidebar widgets' code,
from a server busy running the script: on opening the page the numbers waited seconds for it. Markdown
tables are in Streamlit's main bundle. It is also one message per rerun instead of fourteen (two column
rows, six columns, six metrics). Every cell is escaped (``text.plain``): it shows exactly its characters.
"""

from __future__ import annotations

from app_views.text import plain


def figures_markdown(figures: list[tuple[str, str, str]]) -> str:
    """(label, value, meaning) triples -> a three-row Markdown table: label | **value** | small meaning."""
    return "\n".join([
        "| " + " | ".join(plain(label) for label, _, _ in figures) + " |",
        "|" + "---|" * len(figures),
        "| " + " | ".join(f"**{plain(value)}**" for _, value, _ in figures) + " |",
        "| " + " | ".join(f":small[{plain(meaning)}]" for _, _, meaning in figures) + " |",
    ])


class Figures:
    """A row of figures drawn as one ``figures_markdown`` table instead of ``st.metric`` columns, whose values
    Streamlit cuts with an ellipsis when a column is narrow ("$13.96 / h..." at 1,280 px; issue 30). Used like
    ``st.metric``: ``row = Figures(st); row.metric(label, value, help=...); row.draw()``; the help text becomes the
    figure's small line."""

    def __init__(self, where: object) -> None:
        self.where = where
        self.figures: list[tuple[str, str, str]] = []

    def metric(self, label: str, value: str, help: str | None = None) -> None:  # noqa: A002 - st.metric's name
        self.figures.append((label, value, help or ""))

    def draw(self) -> None:
        if self.figures:
            self.where.markdown(figures_markdown(self.figures))
