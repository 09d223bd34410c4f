"""Text the app shows that came from users or libraries: escaped so it renders as written.

Streamlit renders labels, messages and markdown as Markdown: an uploaded scenario name or an error quoting
``![x](http://...)`` would otherwise fetch an image, and ``$`` would start LaTeX. ``plain`` escapes every
ASCII punctuation character with a backslash (CommonMark allows that for all of them) and drops raw HTML.
"""

from __future__ import annotations

import re

_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&\"'=^%@,;?/])")


#: Where GitHub-flavoured Markdown would make a link of bare text: ``scheme://``, ``www.`` and ``user@host``.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z])(?=://)|(?<=www)(?=\.)|(?=@)")
#: An invisible character that breaks those patterns (U+2060 WORD JOINER): the text reads the same, no link.
_JOINER = "\u2060"


def plain(text: object) -> str:
    """``text`` as Markdown that shows exactly these characters (no links, images, HTML, LaTeX or emphasis; a URL
    typed into a name is shown, not made clickable)."""
    return _PUNCTUATION.sub(r"\\\1", _AUTOLINK.sub(_JOINER, str(text))).replace("\n", "  \n")
