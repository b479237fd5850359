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

Above `supports`, the sentences of a chunk's summary are mapped to ranges of their document's text
(`chunk_sentences`), and the sentences of a merge to the sources of the sentences they quote
(`merged_sentences`); `check_sources` is what a mapped sentence is measured by.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from ..positions import Positions, position_of
from ..text import is_cjk_char
from .base import SummaryResult, SummarySentence
from .extractive import _strip_marks, non_prose_line

# cited: the sentence quotes its sources. aligned: it was matched to them afterwards, not quoted (a
# backend that does not say where its sentences come from; nothing here makes it yet). synthesis: it
# joins several sources, or none could be told.
Support = Literal["cited", "aligned", "synthesis"]
_SUPPORTS: tuple[str, ...] = get_args(Support)


@dataclass(frozen=True)
class Source:
    """A range `[start, end)` of a document's extracted text, and the unit (page, paragraph or line)
    it starts in; None when the document has no positions."""

    document_id: str
    page: int | None
    start: int
    end: int


@dataclass(frozen=True)
class CitedSentence:
    """A sentence of a summary, where it is in that summary's text (`at`), and what it rests on."""

    text: str
    sources: tuple[Source, ...]
    support: Support
    at: tuple[int, int]


def placed(result: SummaryResult) -> list[tuple[SummarySentence, tuple[int, int]]]:
    """Each sentence of `result` with its range in `result.text`, searched in order from where the one
    before ended. One not found there gets the empty range at that point: it overlaps nothing, so no
    merge above can take a source through it."""
    out: list[tuple[SummarySentence, tuple[int, int]]] = []
    cursor = 0
    for sentence in result.sentences:
        found = result.text.find(sentence.text, cursor) if sentence.text else -1
        if found < 0:
            out.append((sentence, (cursor, cursor)))
            continue
        cursor = found + len(sentence.text)
        out.append((sentence, (found, cursor)))
    return out


def chunk_sentences(
    result: SummaryResult, document_id: str, chunk_start: int, positions: Positions | None
) -> tuple[CitedSentence, ...]:
    """A chunk summary's sentences with their ranges in the document (the chunk is the document's text
    from `chunk_start` on); the page is the unit the range starts in."""
    out: list[CitedSentence] = []
    for sentence, at in placed(result):
        if sentence.source != 0:
            raise ValueError(f"a chunk's request has one text; a sentence cites text {sentence.source}")
        start, end = chunk_start + sentence.start, chunk_start + sentence.end
        page = position_of(positions, start) if positions is not None else None
        out.append(CitedSentence(sentence.text, (Source(document_id, page, start, end),), "cited", at))
    return tuple(out)


def merged_sentences(result: SummaryResult, children: Sequence[Sequence[CitedSentence]]) -> tuple[CitedSentence, ...]:
    """A merge's sentences, given `children[i]`: the mapped sentences of the summary that was the
    merge's text i. A sentence takes the sources of the child sentences its range overlaps: of one,
    that one's support too; of several, or of none, it is a synthesis. No source is made up here."""
    out: list[CitedSentence] = []
    for sentence, at in placed(result):
        if not 0 <= sentence.source < len(children):
            raise ValueError(f"a sentence cites text {sentence.source} of a merge of {len(children)}")
        hits = [c for c in children[sentence.source] if _overlap(c.at, (sentence.start, sentence.end))]
        if len(hits) == 1:
            out.append(CitedSentence(sentence.text, hits[0].sources, hits[0].support, at))
            continue
        sources = tuple(dict.fromkeys(s for hit in hits for s in hit.sources))
        out.append(CitedSentence(sentence.text, sources, "synthesis", at))
    return tuple(out)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two ranges share a character; an empty range shares none."""
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def check_sources(sentence: CitedSentence, document_texts: Mapping[str, str]) -> bool:
    """Whether every source's range lies in its document's text and, for a cited sentence, at least one
    of them says what the sentence says (`supports`)."""
    for source in sentence.sources:
        text = document_texts.get(source.document_id)
        if text is None or not 0 <= source.start <= source.end <= len(text):
            return False
    if sentence.support != "cited":
        return True
    return any(supports(document_texts[s.document_id][s.start : s.end], sentence.text) for s in sentence.sources)


def to_json(sentences: Sequence[CitedSentence]) -> str:
    """Mapped sentences as JSON, for a jsonb column."""
    return json.dumps(
        [
            {
                "text": s.text,
                "support": s.support,
                "at": list(s.at),
                "sources": [[x.document_id, x.page, x.start, x.end] for x in s.sources],
            }
            for s in sentences
        ],
        ensure_ascii=False,
    )


def from_json(data: str) -> tuple[CitedSentence, ...]:
    """What `to_json` wrote; ValueError on anything else."""
    out: list[CitedSentence] = []
    for item in json.loads(data):
        support = item["support"]
        if support not in _SUPPORTS:
            raise ValueError(f"unknown support {support!r}")
        start, end = item["at"]
        sources = tuple(Source(str(d), None if p is None else int(p), int(a), int(b)) for d, p, a, b in item["sources"])
        out.append(CitedSentence(str(item["text"]), sources, cast(Support, support), (int(start), int(end))))
    return tuple(out)


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
