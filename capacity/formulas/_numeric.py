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


def one_value_or(a: np.ndarray) -> np.ndarray:
    """``a[0]`` as a zero-dimensional array where every value of the 1-D float64 ``a`` has the same bits (NaN and -0.0
    kept apart), else ``a``. Elementwise formulas give the same numbers on it, broadcast, computed once instead of
    per row (a sweep's constant inputs, a solve's arguments shared by every row)."""
    if a.ndim != 1 or a.size == 0 or a.dtype != np.float64:
        return a
    bits = a.view(np.int64)
    return np.array(a[0]) if bits[0] == bits[-1] and bool(np.all(bits == bits[0])) else a


def select(mask: ArrayLike, a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """``np.where(mask, a, b)`` for float values, bit for bit (NaN, -0.0 and inf kept), as float64 [a's unit].

    The bits are selected by xor, ``b ^ ((a ^ b) * mask)`` on their int64 views: no branch per element, so a mask as
    scattered as a table of mixed scenarios costs what a plain one does (``np.where`` is several times slower on
    such masks), in one new array. ``mask`` is a bool array; ``a`` and ``b`` broadcast with it.
    """
    mask = np.asarray(mask)
    if mask.ndim == 0 or mask.dtype != np.bool_:
        return np.where(mask, as_float(a), as_float(b))
    a, b = as_float(a), as_float(b)
    # A mask of one value (every row in range, the common case) is one copy: cheaper than the bits, and than np.where.
    every = bool(mask.all())
    if every or not mask.any():
        return np.array(np.broadcast_to(a if every else b, np.broadcast_shapes(mask.shape, a.shape, b.shape)))
    b_bits = b.view(np.int64)
    bits = np.bitwise_xor(a.view(np.int64), b_bits)
    if bits.shape == np.broadcast_shapes(bits.shape, mask.shape):
        np.multiply(bits, mask, out=bits)
    else:
        bits = np.multiply(bits, mask)
    return np.bitwise_xor(bits, b_bits, out=bits).view(np.float64)


def finite_or_none(value: object) -> float | None:
    """``value`` as a finite float, or None for inf, -inf and NaN: the one place every writer (JSON null, a blank
    CSV cell, #N/A in a workbook) turns an unbounded or undefined number into "no number"."""
    number = float(np.asarray(value, dtype=float).reshape(-1)[0]) if np.ndim(value) else float(value)  # type: ignore
    return number if math.isfinite(number) else None
