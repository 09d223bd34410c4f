"""Typed command-line options: every value a subcommand takes is read by one of these ``argparse`` types.

Each type reads its text through the same bounded parsing as scenario fields (``capacity.inputs.numbers``:
ASCII digits, finite, in a stated range; lists of bounded length, duplicates dropped; paths without NUL and of
bounded length), so a bad option is refused by the parser, before any file is read or any work starts, with one
line naming the option, the value and what is allowed (``capacity: error: argument --headroom: must be a finite
number in [0, 1), got 'nan'``), exit 2. Each type carries ``kind`` (what it reads), so ``tests/cli/test_options.py``
finds every option of every subcommand and throws that kind's hostile values at it: a new option is covered
the day it is added, and one without a typed reader fails that test.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from capacity.errors import ScenarioError, clean_line, show
from capacity.inputs.numbers import parse_number, parse_whole

#: Longest path accepted [characters] (Linux's PATH_MAX).
MAX_PATH = 4096
#: Longest name (a GPU, a profile) [characters].
MAX_NAME = 100


def _typed(kind: str, read: Callable[[str], Any], allowed: str) -> Callable[[str], Any]:
    """An argparse type: ``read(text)``, a ScenarioError turned into argparse's one-line error."""
    def parse(text: str) -> Any:
        try:
            return read(text)
        except ScenarioError as exc:
            raise argparse.ArgumentTypeError(exc.problems[0] if exc.problems else f"must be {allowed}") from None

    parse.kind = kind  # type: ignore[attr-defined]
    parse.allowed = allowed  # type: ignore[attr-defined]
    parse.__name__ = kind
    return parse


def _interval(low: float, high: float, open_low: bool, open_high: bool) -> str:
    return f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"


def number(low: float, high: float, *, open_low: bool = False, open_high: bool = False,
           unit: str = "") -> Callable[[str], float]:
    """A finite number in the interval, e.g. ``number(0, 1, open_high=True)`` for a headroom in [0, 1)."""
    def read(text: str) -> float:
        return parse_number(text, "", low, high, open_low=open_low, open_high=open_high, unit=unit)

    allowed = f"a finite number{f' ({unit})' if unit else ''} in {_interval(low, high, open_low, open_high)}"
    parse = _typed("number", _fieldless(read), allowed)
    parse.bounds = (low, high, open_low, open_high)  # type: ignore[attr-defined]
    return parse


def whole(low: int, high: int) -> Callable[[str], int]:
    """A whole number in [low, high], ASCII digits."""
    parse = _typed("whole", _fieldless(lambda text: parse_whole(text, "", low, high)),
                   f"a whole number in [{low:,}, {high:,}]")
    parse.bounds = (low, high, False, False)  # type: ignore[attr-defined]
    return parse


def _fieldless(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """``read`` with its messages' empty field name dropped (argparse names the option itself)."""
    def inner(text: str) -> Any:
        try:
            return read(text)
        except ScenarioError as exc:
            raise ScenarioError(*(p.strip() for p in exc.problems)) from None

    return inner


def _parts(text: str, most: int, what: str) -> list[str]:
    if len(text) > most * (MAX_NAME + 1):
        raise ScenarioError(f"must list at most {most:,} {what}, got {len(text):,} characters")
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(p == "" for p in parts):
        raise ScenarioError(f"must be a comma-separated list of {what} with no empty item, got {show(text)}")
    if len(parts) > most:
        raise ScenarioError(f"must list at most {most:,} {what}, got {len(parts):,}")
    return parts


def whole_list(low: int, high: int, most: int, none: bool = False) -> Callable[[str], list[int | None]]:
    """A comma-separated list of at most ``most`` whole numbers in [low, high] (``none``: the word "none" too),
    duplicates dropped (500 copies of one value run once)."""
    what = f"whole numbers in [{low:,}, {high:,}]{' or none' if none else ''}"

    def read(text: str) -> list[int | None]:
        out: list[int | None] = []
        for part in _parts(text, most, what):
            if none and part.lower() == "none":
                out.append(None)
                continue
            try:
                out.append(parse_whole(part, "", low, high))
            except ScenarioError:
                raise ScenarioError(f"{clean_line(repr(part), 60)} is not one of the {what} (give a "
                                    f"comma-separated list)") from None
        return list(dict.fromkeys(out))

    return _typed("whole-list", read, f"a comma-separated list of at most {most:,} {what}")


def number_list(low: float, high: float, count: int | None = None, most: int | None = None, *,
                open_low: bool = False) -> Callable[[str], list[float]]:
    """Exactly ``count`` (or 1 to ``most``) comma-separated finite numbers in [low, high] (``open_low``: (low,
    high]): a day's 24 hourly rates, target utilisations."""
    ends = f"{'(' if open_low else '['}{low:g}, {high:g}]"
    what = (f"{count} comma-separated finite numbers in {ends}" if count is not None
            else f"1 to {most:,} comma-separated finite numbers in {ends}")

    def read(text: str) -> list[float]:
        parts = _parts(text, count if count is not None else most or 1, "numbers")
        if count is not None and len(parts) != count:
            raise ScenarioError(f"must be {what}, got {len(parts)}")
        if open_low and any(parse_number(p, "", low, high) == low for p in parts):
            raise ScenarioError(f"must be {what}, got {show(text)}")
        try:
            return [parse_number(p, "", low, high) for p in parts]
        except ScenarioError:
            raise ScenarioError(f"must be {what}, got {show(text)}") from None

    return _typed("number-list", read, what)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]*")


def names(most: int, what: str = "catalog names") -> Callable[[str], list[str]]:
    """A comma-separated list of at most ``most`` names (letters, digits, ``. _ + / -``), duplicates dropped
    case-insensitively (catalog lookups ignore case)."""
    def read(text: str) -> list[str]:
        out: dict[str, str] = {}
        for part in _parts(text, most, what):
            if len(part) > MAX_NAME or not _NAME.fullmatch(part):
                raise ScenarioError(f"{show(part)} is not a name (letters, digits and . _ + / -, at most "
                                    f"{MAX_NAME} characters)")
            out.setdefault(part.lower(), part)
        return list(out.values())

    return _typed("names", read, f"a comma-separated list of at most {most} {what}")


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A non-empty comma-separated list drawn from ``choices``, duplicates dropped."""
    allowed = f"a comma-separated list of {', '.join(choices)}"

    def read(text: str) -> list[str]:
        parts = _parts(text, len(choices) * 4, f"choices ({', '.join(choices)})")
        unknown = [p for p in parts if p not in choices]
        if unknown:
            raise ScenarioError(f"{show(unknown[0])} is not one of {', '.join(choices)}")
        return list(dict.fromkeys(parts))

    return _typed("choice-list", read, allowed)


def _path(text: str) -> str:
    if text == "" or "\x00" in text or len(text) > MAX_PATH:
        raise ScenarioError(f"must be a file path (not empty, no NUL byte, at most {MAX_PATH:,} characters), "
                            f"got {show(text)}")
    return text


#: A file path: not empty, no NUL byte, at most ``MAX_PATH`` characters (the file itself is checked when read).
path = _typed("path", _path, "a file path")


def _name(text: str) -> str:
    if len(text) > MAX_NAME or not _NAME.fullmatch(text):
        raise ScenarioError(f"must be a name (letters, digits and . _ + / -, at most {MAX_NAME} characters), got "
                            f"{show(text)}")
    return text


#: One name (a profile to save).
name = _typed("name", _name, "a name")


def quantity(kind: str, low: float, high: float) -> Callable[[str], float]:
    """A quantity with its unit (``"2 s"``, ``"500 ms"``) in base units, in (low, high]."""
    from capacity.inputs.units import parse_quantity

    def read(text: str) -> float:
        if len(text) > 60:
            raise ScenarioError(f"must be a {kind} like '2 s', got {show(text)}")
        value = parse_quantity(text, kind, "")
        if not math.isfinite(value) or not low < value <= high:
            raise ScenarioError(f"must be a {kind} in ({low:g}, {high:g}] s, got {show(text)}")
        return value

    return _typed("quantity", _fieldless(read), f"a {kind} in ({low:g}, {high:g}]")


def _seconds(text: str, low: float, high: float) -> float:
    """A duration: seconds as a plain number, or a time with its unit ("90 s", "15 min"), in [low, high]."""
    from capacity.inputs.units import parse_quantity

    if len(text) > 60:
        raise ScenarioError(f"must be a time like '15 s' or '2 min', got {show(text)}")
    try:
        value = parse_number(text, "") if _PLAIN.fullmatch(text.strip()) else parse_quantity(text, "time", "")
    except ScenarioError:
        raise ScenarioError(f"must be a time like '15 s' or '2 min' in [{low:g}, {high:g}] s, got {show(text)}") \
            from None
    if not math.isfinite(value) or not low <= value <= high:
        raise ScenarioError(f"must be a time in [{low:g}, {high:g}] s, got {show(text)}")
    return value


_PLAIN = re.compile(r"[-+0-9.eE]+")


def duration(low: float, high: float) -> Callable[[str], str]:
    """A duration in [low, high] seconds (a plain number is seconds); the text is returned as given, for a command
    that reads it itself."""
    def read(text: str) -> str:
        _seconds(text, low, high)
        return text

    return _typed("duration", read, f"a time in [{low:g}, {high:g}] s")


def quantity_text(kind: str, example: str) -> Callable[[str], str]:
    """A positive finite quantity of ``kind`` with its unit (``"2 GB/s"``); the text is returned as given."""
    from capacity.inputs.units import parse_quantity

    def read(text: str) -> str:
        if len(text) > 60:
            raise ScenarioError(f"must be a {kind} like '{example}', got {show(text)}")
        value = parse_quantity(text, kind, "")
        if not 0 < value < math.inf:
            raise ScenarioError(f"must be a {kind} > 0 like '{example}', got {show(text)}")
        return text

    return _typed("quantity-text", _fieldless(read), f"a {kind} like '{example}'")


def triple(*readers: Callable[[str], Any], shape: str) -> Callable[[str], str]:
    """``A:B:C`` whose parts each pass their reader (``shape`` names them, e.g. START:DURATION:FACTOR); the text
    is returned as given."""
    def read(text: str) -> str:
        parts = text.split(":")
        if len(text) > 200 or len(parts) != len(readers):
            raise ScenarioError(f"must be {shape} ({len(readers)} values separated by ':'), got {show(text)}")
        for part, reader, name in zip(parts, readers, shape.split(":"), strict=True):
            try:
                reader(part)
            except argparse.ArgumentTypeError as exc:
                raise ScenarioError(f"{name} {exc}") from None
        return text

    return _typed("triple", read, shape)


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")


def _address(text: str) -> str:
    """``tcp://HOST:PORT`` (or ``HOST:PORT``, ``tls://...``): a Dask scheduler address."""
    shown = show(text)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    host, colon, port = rest.rpartition(":")
    if not colon:
        host, port = rest, "8786"
    if (scheme not in ("tcp", "tls") or not _HOST.fullmatch(host) or not port.isascii() or not port.isdigit()
            or not 1 <= int(port[:6]) <= 65535):
        raise ScenarioError(f"must be a Dask scheduler address tcp://HOST:PORT (port 1 to 65535), got {shown}")
    return f"{scheme}://{host}:{int(port)}"


#: A Dask scheduler address, normalised to ``tcp://HOST:PORT``.
address = _typed("address", _address, "a Dask scheduler address tcp://HOST:PORT")


def kind_of(action: argparse.Action) -> str | None:
    """The kind of a parser action's typed reader (None when it has none)."""
    return getattr(action.type, "kind", None)


__all__ = ["MAX_NAME", "MAX_PATH", "address", "choice_list", "duration", "kind_of", "name", "names", "number",
           "number_list", "path", "quantity", "quantity_text", "triple", "whole", "whole_list"]
