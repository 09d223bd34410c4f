"""Errors a user can act on: each names the field, the value and what is allowed.

Every problem line is made safe to print before it is stored: control characters are escaped (a newline in a
key cannot forge a second error line), a long line is cut (a 900 kB value does not print a 900 kB line), and
an error holds at most ``MAX_PROBLEMS`` lines plus one "... and N more" (40,000 unknown keys print 21 lines).
"""

from __future__ import annotations

import functools
import reprlib
from typing import Any

#: Longest problem line kept [characters]; longer ones are cut in the middle of the value.
MAX_LINE = 300
#: Problem lines kept; the rest are counted in a last line.
MAX_PROBLEMS = 20

@functools.cache
def _escapes() -> dict[int, str]:
    """The ``str.translate`` table of the characters ``clean_line`` escapes (built on first use: ~2,100 entries)."""
    table = {i: f"\\x{i:02x}" for i in [*range(0x20), 0x7F]} | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
    table |= {i: f"\\x{i:02x}" for i in range(0x80, 0xA0)}  # C1 controls (terminal escapes)
    table |= {i: f"\\u{i:04x}" for i in (0x2028, 0x2029, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                                          0x2066, 0x2067, 0x2068, 0x2069)}  # line separators and bidi overrides
    table |= {i: f"\\u{i:04x}" for i in range(0xD800, 0xE000)}  # lone surrogates cannot be encoded
    return table


def clean_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one printable line: control, bidi and surrogate characters escaped, cut to ``limit``."""
    line = str(text)
    if not (line.isascii() and line.isprintable()):  # printable ASCII holds nothing to escape
        line = line.translate(_escapes())
    if len(line) > limit:
        keep = limit - 25
        line = f"{line[:keep]}... ({len(line) - keep:,} more characters)"
    return line


_SHOW = reprlib.Repr()
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict, _SHOW.maxlevel = 60, 60, 5, 5, 3
_SHOW.maxtuple = _SHOW.maxset = 5


def show(value: Any) -> str:
    """A short repr of a user's value for an error line (strings cut at 60 characters, containers at 5 items);
    unlike ``repr`` its cost does not grow with the value."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
    return clean_line(_SHOW.repr(value), 100)


class ScenarioError(ValueError):
    """A scenario, catalog entry or input file is invalid.

    ``problems`` holds one line per problem (cleaned, at most ``MAX_PROBLEMS`` + 1); ``str(error)`` joins them.
    """

    def __init__(self, *problems: str) -> None:
        lines = [clean_line(p) for p in problems[:MAX_PROBLEMS] if p]
        more = sum(1 for p in problems[MAX_PROBLEMS:] if p)
        if more:
            lines.append(f"... and {more:,} more problem{'s' if more > 1 else ''}")
        self.problems = lines
        super().__init__("; ".join(self.problems))
