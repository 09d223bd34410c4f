"""One CSV neutraliser for every CSV the product writes (evaluate, sweep, fleet, simulate).

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel and
LibreOffice (OWASP, "CSV Injection"): a GPU named ``=1+1`` would be evaluated, and ``=HYPERLINK(...)`` could
send data away. ``neutralise`` prefixes such a cell with ``'``, which spreadsheets show as text. Numbers are
never touched (they are written as numbers, not text), so every numeric column reads back unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported by the functions that take a DataFrame (a sweep's CSV needs only neutralise)
    import pandas as pd

#: A text cell starting with one of these is a formula to Excel/LibreOffice (OWASP "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def neutralise(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would run it as a formula; otherwise unchanged."""
    return "'" + text if text.startswith(FORMULA_START) else text


def neutralise_value(value: Any) -> Any:
    """``neutralise`` for a text value; any other value unchanged."""
    return neutralise(value) if isinstance(value, str) else value


def neutralise_frame(table: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``table`` whose text cells and column names are neutralised (numeric columns untouched)."""
    import pandas as pd

    safe = table.copy()
    for col in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[col]) and not pd.api.types.is_bool_dtype(safe[col]):
            safe[col] = safe[col].map(neutralise_value)
    safe.columns = [neutralise_value(c) for c in safe.columns]
    return safe


def frame_to_csv(table: pd.DataFrame, **options: Any) -> str:
    """``table.to_csv(index=False, **options)`` after ``neutralise_frame``."""
    return neutralise_frame(table).to_csv(index=False, **options)


__all__ = ["FORMULA_START", "frame_to_csv", "neutralise", "neutralise_frame", "neutralise_value"]
