"""Text as every format leaves it: one normalization for plain text, PDF pages and Word blocks alike."""

from __future__ import annotations

import re

from docsum_shared.text import fold_compatibility, without_lone_surrogates

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]")  # NUL etc.; keeps \t \n \v \f \r for below
_HSPACE = re.compile(r"[^\S\n]+")  # any whitespace except newline (incl. NBSP, ideographic space)
_BLANK_RUNS = re.compile(r"\n{3,}")
_SOFT_HYPHEN_AT_EOL = re.compile(r"\u00ad[^\S\n]*\n")


def normalize(text: str) -> str:
    """Unix newlines, no control chars, single spaces, at most one blank line in a row, no lone surrogate.

    Leading indentation survives (as spaces) so indented code such as "    # comment" is not
    mistaken for a Markdown heading downstream. Ligatures and other presentation forms are folded
    (`fold_compatibility`; CJK full-width punctuation is kept). A soft hyphen shows only where a line
    breaks, so it becomes "-" there and disappears elsewhere. A lone surrogate (which a PDF's ToUnicode
    map can yield) becomes U+FFFD: every format's text passes here, and nothing else could store it.
    """
    text = without_lone_surrogates(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\v", "\n")
    text = _SOFT_HYPHEN_AT_EOL.sub("-\n", text).replace("\u00ad", "")
    text = fold_compatibility(_CONTROL.sub("", text)).expandtabs(4)
    text = "\n".join(_normalize_line(line) for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip("\n")


def _normalize_line(line: str) -> str:
    body = line.lstrip()
    if not body:
        return ""
    indent = len(line) - len(body)
    return " " * indent + _HSPACE.sub(" ", body).rstrip()
