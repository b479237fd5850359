"""Text as every format leaves it: one normalization for plain text, PDF pages and Word blocks alike."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence

from docsum_shared.text import fold_compatibility, without_lone_surrogates

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]")  # NUL etc.; keeps \t \n \v \f \r for below
_HSPACE = re.compile(r"[^\S\n]+")  # any whitespace except newline (incl. NBSP, ideographic space)
_SOFT_HYPHEN_AT_EOL = re.compile(r"\u00ad[^\S\n]*\n")
# What the normalization turns into a line break, each match one break.
_LINE_BREAK = re.compile(r"\r\n|[\r\n\f\v]")


def normalize(text: str) -> str:
    """Unix newlines, no control chars, single spaces, at most one blank line in a row, no lone surrogate.

    Leading indentation survives (as spaces) so indented code such as "    # comment" is not
    mistaken for a Markdown heading downstream. Ligatures and other presentation forms are folded
    (`fold_compatibility`; CJK full-width punctuation is kept). A soft hyphen shows only where a line
    breaks, so it becomes "-" there and disappears elsewhere. A lone surrogate (which a PDF's ToUnicode
    map can yield) becomes U+FFFD: every format's text passes here, and nothing else could store it.
    """
    return _assemble(_normalized_lines(text))[0]


def normalize_keeping(text: str, starts: Sequence[int]) -> tuple[str, list[int]]:
    """`normalize(text)`, and where each offset of `starts` is in it.

    Each offset must be where a line of `text` starts (after "\\n", "\\r\\n", "\\r", "\\f", "\\v", or at
    0), or the length of `text`. Every line of `text` stays one line (or goes, if blank), so a line start
    maps exactly: to where that line starts in the result, or for a line left empty to where the next
    non-empty line starts (the end of the result if none does).
    """
    line_starts = [0, *(m.end() for m in _LINE_BREAK.finditer(text))]
    lines = []
    for offset in starts:
        index = bisect_left(line_starts, offset)
        if index < len(line_starts) and line_starts[index] == offset:
            lines.append(index)
        elif offset == len(text):
            lines.append(len(line_starts))  # past the last line: the end of the result
        else:
            raise ValueError(f"offset {offset} is not where a line starts")
    result, line_offsets = _assemble(_normalized_lines(text))
    return result, [line_offsets[i] for i in lines]


def _normalized_lines(text: str) -> list[str]:
    """The lines of `text`, each normalized on its own (blank lines become ""): one per line break + 1."""
    text = without_lone_surrogates(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\v", "\n")
    text = _SOFT_HYPHEN_AT_EOL.sub("-\n", text).replace("\u00ad", "")
    text = fold_compatibility(_CONTROL.sub("", text)).expandtabs(4)
    return [_normalize_line(line) for line in text.split("\n")]


def _assemble(lines: list[str]) -> tuple[str, list[int]]:
    """The lines joined, without blank lines at either end and with at most one blank line in a row; and
    where each line starts in that text, an empty line where the next non-empty one does, plus one more
    entry, the text's length."""
    parts: list[str] = []
    offsets = [-1] * (len(lines) + 1)
    end = 0
    blank = False  # a blank line since the last non-empty one
    for index, line in enumerate(lines):
        if not line:
            blank = bool(parts)
            continue
        if parts:
            parts.append("\n\n" if blank else "\n")
            end += len(parts[-1])
        offsets[index] = end
        parts.append(line)
        end += len(line)
        blank = False
    following = end
    for index in range(len(lines), -1, -1):
        if offsets[index] < 0:
            offsets[index] = following
        else:
            following = offsets[index]
    return "".join(parts), offsets


def _normalize_line(line: str) -> str:
    body = line.lstrip()
    if not body:
        return ""
    indent = len(line) - len(body)
    return " " * indent + _HSPACE.sub(" ", body).rstrip()
