"""Axis ticks a person reads: round values with their magnitude and unit ("2 ms", "500 ms", "1 s", "$20k").

Plotly's own ticks on a log axis label the minor steps with bare digits ("4, 8, 2, 3, 7, 1") and on overlaid
linear axes can fall on values like 223/446/669 ms; every chart the app and the report draw takes its ticks here
instead. A log axis gets the 1-2-5 steps of each decade between the data's bounds; a linear axis the smallest step
of 1, 2, 2.5 or 5 x 10^k that gives at most ``count`` intervals, from zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: How a tick value is written, by the kind of quantity on the axis.
KINDS = ("ms", "count", "money", "rate")


def label(value: float, kind: str) -> str:
    """One tick's text: ``ms`` values in ms below 1 s and in s above ("500 ms", "2 s"); ``money`` in $ with k/M
    ("$500", "$20k", "$1.5M"); ``count`` and ``rate`` with k/M above a thousand ("50", "2k", "1.5M")."""
    if kind not in KINDS:
        raise ValueError(f"tick kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "ms":
        if abs(value) >= 1000:
            return f"{_short(value / 1000)} s"
        return f"{_short(value)} ms"
    prefix = "$" if kind == "money" else ""
    for factor, suffix in ((1e9, "G" if kind != "money" else "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{prefix}{_short(value / factor)}{suffix}"
    return f"{prefix}{_short(value)}"


def _short(x: float) -> str:
    """A round tick value without trailing zeros: 2 -> "2", 2.5 -> "2.5", 0.05 -> "0.05"."""
    if x == 0:
        return "0"
    text = f"{x:.3g}"
    if "e" in text:
        text = f"{x:.{max(0, -math.floor(math.log10(abs(x))) + 2)}f}".rstrip("0").rstrip(".")
    return text


def log_ticks(values: Iterable[float], kind: str) -> dict[str, Any]:
    """``tickvals`` and ``ticktext`` at 1, 2 and 5 x 10^k from below the smallest to above the largest positive
    finite value (a log axis); empty when there is none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if not finite:
        return {}
    low, high = math.floor(math.log10(min(finite))), math.ceil(math.log10(max(finite)))
    ticks = [m * 10.0**k for k in range(low, high + 1) for m in (1, 2, 5)]
    lo = max(t for t in ticks if t <= min(finite))
    hi = min((t for t in ticks if t >= max(finite)), default=ticks[-1])
    shown = [t for t in ticks if lo <= t <= hi]
    return {"tickmode": "array", "tickvals": shown, "ticktext": [label(t, kind) for t in shown]}


def linear_ticks(values: Iterable[float], kind: str, count: int = 6) -> dict[str, Any]:
    """``tickvals`` and ``ticktext`` from zero at the smallest step of 1, 2, 2.5 or 5 x 10^k giving at most
    ``count`` intervals up to the largest finite value (a linear axis from zero); empty when there is none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    top = max(finite, default=0.0)
    if not top > 0:
        return {}
    raw = top / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    shown = [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]
    return {"tickmode": "array", "tickvals": shown, "ticktext": [label(t, kind) for t in shown],
            "range": [0, shown[-1] * 1.02]}


__all__ = ["KINDS", "label", "linear_ticks", "log_ticks"]
