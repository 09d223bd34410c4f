"""Parse and format physical quantities without ever confusing GB with GiB.

Every quantity in a scenario is a number in base units (bytes, bytes/s, FLOP/s,
seconds) or a string such as ``"80 GiB"``, ``"2 TB/s"``, ``"150 TFLOP/s"`` or
``"3 ms"``. Decimal prefixes (k, M, G, T, P) are powers of 1000; binary prefixes
(Ki, Mi, Gi, Ti, Pi) are powers of 1024. A bare number is taken in base units.
"""

from __future__ import annotations

import math
import re

from capacity.errors import ScenarioError

DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

#: The kinds of quantity a scenario holds, with their base unit.
BASE_UNIT = {"bytes": "B", "bandwidth": "B/s", "flops": "FLOP/s", "time": "s"}

_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"  # ASCII digits: "٣ ms" is no time
_PATTERN = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-zµ/]*)\s*$")


def _prefix_and_base(unit: str, bases: tuple[str, ...]) -> tuple[float, str] | None:
    """Split ``unit`` into a prefix factor and one of ``bases`` (e.g. 'GiB' -> 2**30, 'B')."""
    for base in bases:
        if unit.endswith(base):
            prefix = unit[: len(unit) - len(base)]
            if prefix in BINARY:
                return BINARY[prefix], base
            if prefix in DECIMAL:
                return DECIMAL[prefix], base
    return None


def _unit_factor(unit: str, kind: str) -> float | None:
    """Factor that turns one ``unit`` into base units of ``kind``; None if the unit is not of that kind."""
    if unit == "":
        return 1.0
    if kind == "time":
        return TIME.get(unit)
    if kind == "bytes":
        found = _prefix_and_base(unit, ("B",))
    elif kind == "bandwidth":
        found = _prefix_and_base(unit, ("B/s", "Bps"))
    elif kind == "flops":
        found = _prefix_and_base(unit, ("FLOP/s", "FLOPS", "flop/s", "FLOPs", "OPS", "OP/s"))
    else:
        raise ValueError(f"unknown quantity kind {kind!r}")
    return found[0] if found else None


_EXAMPLES = {"bytes": '"80 GiB" or "80 GB"', "bandwidth": '"2 TB/s"', "flops": '"150 TFLOP/s"', "time": '"3 ms"'}


def parse_quantity(value: object, kind: str, field: str = "value") -> float:
    """Return ``value`` in base units of ``kind`` (bytes, bandwidth, flops or time).

    >>> parse_quantity("80 GiB", "bytes")
    85899345920.0
    >>> parse_quantity("2 TB/s", "bandwidth")
    2000000000000.0
    """
    if isinstance(value, bool):
        raise ScenarioError(f"{field} must be a quantity like {_EXAMPLES[kind]}, got {value!r}")
    if isinstance(value, int) and abs(value) > 1e300:  # float() would overflow
        digits = int(value.bit_length() * 0.30103)
        raise ScenarioError(f"{field} must be finite, got an integer of about {digits:,} digits")
    if isinstance(value, (int, float)):
        number, factor = float(value), 1.0
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if not match:
            raise ScenarioError(f"{field} must be a quantity like {_EXAMPLES[kind]}, got {value!r}")
        factor = _unit_factor(match.group(2), kind)
        if factor is None:
            raise ScenarioError(
                f"{field} has unit {match.group(2)!r}, which is not a {kind} unit (write e.g. {_EXAMPLES[kind]})"
            )
        number = float(match.group(1))
    else:
        raise ScenarioError(f"{field} must be a quantity like {_EXAMPLES[kind]}, got {value!r}")
    result = number * factor
    if not math.isfinite(result):
        raise ScenarioError(f"{field} must be finite, got {value!r}")
    return result


def format_bytes(value: float, binary: bool = False, digits: int = 2) -> str:
    """Format a byte count as GB (decimal, default) or GiB (binary), choosing the prefix by size."""
    if value is None or not math.isfinite(value):
        return "n/a"
    table = (
        [("PiB", 2.0**50), ("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)]
        if binary
        else [("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)]
    )
    for name, factor in table:
        if abs(value) >= factor:
            return f"{value / factor:,.{digits}f} {name}"
    return f"{value:,.0f} B"


def format_time(seconds: float, digits: int = 1) -> str:
    """Format seconds as ms below one second, else s."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:,.{digits}f} ms"
    return f"{seconds:,.{max(digits, 2)}f} s"
