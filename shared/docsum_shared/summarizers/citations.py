"""Whether a summary sentence is what the text it cites says.

An extractive summary quotes: each of its sentences is a range of its input, in the input's own words.
The extractive backend changes a quoted range in few ways only, and `supports` allows exactly those:

- page furniture (a page number, "Page 3 of 9", a copyright line: see `non_prose_line`) on a line of
  its own inside the range is dropped, with its line break;
- a bullet, list number, footnote mark or stray closing bracket in front (`_strip_marks`), and the
  "#" marks around a heading, are dropped;
- a word hyphenated at a line end ("de-\\nfined", lower-case letters on both sides) is joined, with
  or without its hyphen (see `dehyphenate`);
- a run of whitespace stands for a run of whitespace, of any kind and length; a run with a line
  break in it between two CJK characters may also be dropped (CJK text has no spaces);
- a sentence cut short ends in "…", and cites the part it kept.

Nothing else: no other character may be added, dropped or changed, case included.
"""

from __future__ import annotations

from ..text import is_cjk_char
from .extractive import _strip_marks, non_prose_line

_ELLIPSIS = "…"


def supports(quoted: str, sentence: str) -> bool:
    """Whether `sentence` is `quoted`'s own, changed only as the module docstring says."""
    if not sentence:
        return False
    shown = [sentence]
    if sentence.endswith(_ELLIPSIS) and len(sentence) > 1:
        shown.append(sentence[: -len(_ELLIPSIS)])
    return any(_same(reading, s) for reading in _readings(quoted) for s in shown)


def _readings(quoted: str) -> list[str]:
    """`quoted` as the backend may have read it: with or without its furniture lines, its marks."""
    lines = quoted.split("\n")
    bases = [quoted]
    if len(lines) > 2:
        inner = [line for line in lines[1:-1] if non_prose_line(line) != "furniture"]
        if len(inner) < len(lines) - 2:
            bases.append("\n".join([lines[0], *inner, lines[-1]]))
    out: list[str] = []
    for base in bases:
        text = base.strip()
        unmarked = _strip_marks(text).strip()
        out.extend((text, unmarked, unmarked.strip("# \t")))
    return out


def _hyphen_break(text: str, i: int) -> int:
    """Where the next line's word starts when `text[i]` is the hyphen of a word broken at a line end
    (lower-case letters on both sides, letters only before it); else -1."""
    if text[i : i + 2] != "-\n" or i == 0 or not text[i - 1].islower():
        return -1
    j = i - 1
    while j > 0 and text[j - 1].isalpha():
        j -= 1
    if j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
        return -1  # "x_y-", "3a-": not a word of letters
    k = i + 2
    while k < len(text) and text[k] in " \t":
        k += 1
    return k if k < len(text) and text[k].islower() else -1


def _same(quoted: str, sentence: str) -> bool:
    i = k = 0
    n, m = len(quoted), len(sentence)
    while i < n:
        c = quoted[i]
        if c.isspace():
            end = i
            while end < n and quoted[end].isspace():
                end += 1
            if k < m and sentence[k].isspace():
                while k < m and sentence[k].isspace():
                    k += 1
            elif not (
                "\n" in quoted[i:end] and 0 < i and end < n and is_cjk_char(quoted[i - 1]) and is_cjk_char(quoted[end])
            ):
                return False
            i = end
            continue
        word = _hyphen_break(quoted, i)
        if word >= 0 and not (k + 1 < m and sentence[k] == "-" and sentence[k + 1].isspace()):
            if k < m and sentence[k] == "-":
                k += 1  # the hyphen kept: "event-driven"
            i = word
            continue
        if k >= m or sentence[k] != c:
            return False
        i += 1
        k += 1
    return k == m
