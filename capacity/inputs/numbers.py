"""Numbers typed by a user (command-line options, benchmark-file cells): ASCII decimal text, finite, bounded.

Python's ``float`` and ``int`` read more than a user means: ``float("nan")``, ``float("1e999")`` (infinity),
``float("١٢")`` (Arabic-Indic digits, 12), ``float("1_000")``, and ``"²".isdigit()`` is true while ``int("²")``
fails; ``int`` of 5,000 digits raises past Python's digit limit. Every number a user types is read here instead:
at most ``MAX_TEXT`` characters of ``[+-]digits[.digits][e[+-]digits]`` in ASCII, finite, inside a stated range;
anything else is one ScenarioError naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
import re

from capacity.errors import ScenarioError, show

#: A decimal number in ASCII digits only (``re.ASCII``: ``\\d`` would match any script's digits).
NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)
#: Longest number text accepted [characters]; ``-1.234567890123456789e-300`` has 26.
MAX_TEXT = 40
#: Largest whole number accepted anywhere (a count, a size): 10^15, beyond any count the planner takes.
WHOLE_MAX = 10**15


def _interval(low: float, high: float, open_low: bool, open_high: bool) -> str:
    return f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"


def parse_number(text: object, field: str, low: float = -math.inf, high: float = math.inf, *,
                 open_low: bool = False, open_high: bool = False, unit: str = "") -> float:
    """``text`` as a finite float in the interval (``low``/``high``, ends open or closed); ScenarioError naming
    ``field`` otherwise. Numbers (not text) are checked the same way."""
    allowed = f"a finite number{f' ({unit})' if unit else ''} in {_interval(low, high, open_low, open_high)}"
    if isinstance(text, bool):
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    if isinstance(text, int) and abs(text) > 1e300:
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    if isinstance(text, (int, float)):
        value = float(text)
    elif isinstance(text, str) and len(text) <= MAX_TEXT and NUMBER.fullmatch(text.strip()):
        value = float(text.strip())
    else:
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    if (not math.isfinite(value) or value < low or value > high or (open_low and value == low)
            or (open_high and value == high)):
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    return value


def parse_whole(text: object, field: str, low: int = 0, high: int = WHOLE_MAX) -> int:
    """``text`` as a whole number in [``low``, ``high``] written in ASCII digits (``"2.0"`` and ``2.0`` are
    accepted, ``"2.5"``, ``"²"`` and ``"٣"`` are not); ScenarioError naming ``field`` otherwise."""
    allowed = f"a whole number in [{low:,}, {high:,}]"
    if isinstance(text, bool):
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    if isinstance(text, int):
        value = text
    else:
        try:
            number = parse_number(text, field) if isinstance(text, (str, float)) else math.nan
        except ScenarioError:
            number = math.nan
        if not math.isfinite(number) or number != math.floor(number) or abs(number) > WHOLE_MAX:
            raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
        value = int(number)
    if not low <= value <= high:
        raise ScenarioError(f"{field} must be {allowed}, got {show(text)}")
    return value


__all__ = ["MAX_TEXT", "NUMBER", "WHOLE_MAX", "parse_number", "parse_whole"]
