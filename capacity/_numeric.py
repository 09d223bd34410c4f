"""Plain numbers out for plain numbers in: the formula functions serve spreadsheets and arrays alike."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

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
