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
