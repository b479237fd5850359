"""Text as every format leaves it: one normalization for plain text, PDF pages and Word blocks alike."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from docsum_shared.text import fold_compatibility, without_lone_surrogates

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]")  # NUL etc.; keeps \t \n \v \f \r for below
_BLANK_RUNS = re.compile(r"\n{3,}")
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
    return _joined(_normalized_lines(text))


def normalize_keeping(text: str, starts: Sequence[int]) -> tuple[str, list[int]]:
    """`normalize(text)`, and where each offset of `starts` is in it.

    The offsets must not decrease, and each must be where a line of `text` starts (after "\\n", "\\r\\n",
    "\\r", "\\f", "\\v", or at 0) or be the length of `text`. Every line of `text` stays one line (or goes,
    if blank), so a line start maps exactly: to where that line starts in the result, or for a line left
    empty to where the next non-empty line starts (the end of the result if none does).
    """
    lines = _normalized_lines(text)
    line_offsets = _line_offsets(lines)
    breaks = break_ends(text, _LINE_BREAK)
    line, line_start = 0, 0  # the line whose start was reached last
    mapped = []
    for offset in starts:
        while line_start < offset and (found := next(breaks, None)) is not None:
            line, line_start = line + 1, found
        if line_start == offset:
            mapped.append(line_offsets[line])
        elif offset == len(text):
            mapped.append(line_offsets[-1])
        else:
            raise ValueError(f"offset {offset} is not where a line starts (or comes before the one before it)")
    return _joined(lines), mapped


def break_ends(text: str, breaks: re.Pattern[str]) -> Iterator[int]:
    """Where each match of `breaks` ends in `text`: a pattern of line breaks ("\\r\\n", "\\r", "\\n", and
    "\\f" and "\\v" if it likes). Where "\\n" is the text's only one, `str.find` finds them (a regex takes
    ~15 times as long on a long text)."""
    if "\r" in text or "\f" in text or "\v" in text:
        return (m.end() for m in breaks.finditer(text))
    return _newline_ends(text)


def _newline_ends(text: str) -> Iterator[int]:
    at = text.find("\n")
    while at != -1:
        yield at + 1
        at = text.find("\n", at + 1)


def _normalized_lines(text: str) -> list[str]:
    """The lines of `text`, each normalized on its own (a blank line becomes ""): one per line break + 1."""
    if text.isascii():  # Python's own flag, known without a scan: no surrogate, soft hyphen or ligature
        text = _CONTROL.sub("", _unix_breaks(text))
    else:
        text = _unix_breaks(without_lone_surrogates(text))
        text = _SOFT_HYPHEN_AT_EOL.sub("-\n", text).replace("\u00ad", "")
        text = fold_compatibility(_CONTROL.sub("", text))
    return [_normalize_line(line) for line in text.expandtabs(4).split("\n")]


def _unix_breaks(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\v", "\n")


def _joined(lines: list[str]) -> str:
    text = "\n".join(lines)
    return (_BLANK_RUNS.sub("\n\n", text) if "\n\n\n" in text else text).strip("\n")


def _line_offsets(lines: list[str]) -> list[int]:
    """Where each line starts in `_joined(lines)`, an empty line where the next non-empty one does; and
    one more entry, the length of that text."""
    offsets = [0] * (len(lines) + 1)
    end = 0  # of the text so far
    first_empty = 0  # the first of the empty lines since the last non-empty one
    for index, line in enumerate(lines):
        if line:
            # Text before: one line break, or two for the blank line that empty lines leave.
            start = end + (2 if index > first_empty else 1) if end else 0
            offsets[first_empty : index + 1] = [start] * (index + 1 - first_empty)
            end, first_empty = start + len(line), index + 1
    offsets[first_empty:] = [end] * (len(lines) + 1 - first_empty)
    return offsets


def _normalize_line(line: str) -> str:
    body = line.lstrip()
    if not body:
        return ""
    indent = len(line) - len(body)
    # str.split() splits at what `\s` matches (str.isspace: NBSP, ideographic space…): one space between words.
    return " " * indent + " ".join(body.split())
