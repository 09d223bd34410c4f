"""Text from users shown as written (issue 32): a URL typed into a name was made a clickable link by Markdown's
autolinks; ``plain`` breaks the patterns with an invisible word joiner and escapes the rest."""

import re

from app_views.text import plain


def test_urls_and_addresses_typed_into_a_name_are_not_links():
    shown = plain("see https://evil.example/x, www.evil.example or me@evil.example")
    # GFM autolinks need "scheme://", "www." or "user@host" verbatim: each is broken by U+2060
    assert not re.search(r"[a-z]\\?://|www\\?\.|\w\\?@", shown), shown
    assert shown.replace("\u2060", "").replace("\\", "") == "see https://evil.example/x, www.evil.example or " \
                                                            "me@evil.example"


def test_plain_text_is_unchanged_apart_from_escapes():
    assert plain("H100 SXM x 2").replace("\\", "") == "H100 SXM x 2"
