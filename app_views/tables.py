"""Tables that fit the page (issue 30): a formatted table drawn as an HTML table whose cells wrap, so a wide table
never needs a sideways scroll at 1,280 px (``st.dataframe``'s grid keeps each cell on one line and scrolls)."""

from __future__ import annotations

from typing import Any

import pandas as pd


def fit_table(st_: Any, table: pd.DataFrame) -> None:
    """``table`` (already formatted: text with units) as a wrapping HTML table, without the row numbers."""
    st_.table(table.style.hide(axis="index"))


__all__ = ["fit_table"]
