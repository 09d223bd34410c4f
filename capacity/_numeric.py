"""Plain numbers out for plain numbers in: the formula functions serve spreadsheets and arrays alike."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

F = TypeVar("F", bound=Callable)


def scalar_out(func: F) -> F:
    """Return a Python float where ``func`` would return a zero-dimensional numpy array; arrays pass through."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        result = func(*args, **kwargs)
        if isinstance(result, np.ndarray) and result.ndim == 0:
            return result.item()
        return result

    return wrapper  # type: ignore[return-value]


def as_float(x: ArrayLike) -> np.ndarray:
    """``x`` as a float numpy array (a zero-dimensional one for a scalar): what every formula function computes on."""
    return np.asarray(x, dtype=float)


def finite_or_none(value: object) -> float | None:
    """``value`` as a finite float, or None for inf, -inf and NaN: the one place every writer (JSON null, a blank
    CSV cell, #N/A in a workbook) turns an unbounded or undefined number into "no number"."""
    number = float(np.asarray(value, dtype=float).reshape(-1)[0]) if np.ndim(value) else float(value)  # type: ignore
    return number if math.isfinite(number) else None
