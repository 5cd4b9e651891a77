"""Text in the report page's tables: escaped, and broken across lines only between words."""

from __future__ import annotations

import html
import re

_SPACES = re.compile(r"(\s+)")
# Characters a browser may break a line next to inside a word (UAX #14 as Chromium applies it: after a hyphen,
# dash, slash, bar, "?", "!", "}", "+", "%", "$", "\\"), and any non-ASCII character (CJK breaks between letters).
_BREAKABLE = re.compile("[-/|?!}+%$\\\\\u2010-\u2015\u2026]|[^\x00-\x7f]")
# A word this long (a generated job name, a long node list) is marked "long": in print only, where nothing can
# scroll, it may break inside so that its table fits the page.
LONG_WORD = 20


def words_whole(text: str) -> str:
    """`text` escaped for a table cell, each word kept whole: a line may break at a space, never inside a word.

    A browser also breaks a line after "-", "/" or "|" and between CJK characters ("GPU-" / "hours",
    "user00/" / "0"), so a word holding such a character (_BREAKABLE) is wrapped in <span class=w>, which the
    page's CSS keeps on one line (white-space:nowrap). A table too wide for its column then scrolls in its own
    container rather than breaking a word (in print, a word of LONG_WORD characters or more,
    <span class='w long'>, breaks where it must)."""
    out = []
    for part in _SPACES.split(text):
        if len(part) >= LONG_WORD and not part.isspace():
            out.append(f"<span class='w long'>{html.escape(part)}</span>")
        elif not part or part.isspace() or not _BREAKABLE.search(part):
            out.append(html.escape(part))
        else:
            out.append(f"<span class=w>{html.escape(part)}</span>")
    return "".join(out)
