"""The stored form of a summary's cited sentences: each sentence, where it is in its summary's text, the
ranges of documents it rests on (a dozen or so at most) and how well they support it; as JSON for a jsonb
column, and a summary's text without its unsupported sentences.

The read model shows these, and the summarizer and the merger store them: how a summary's sentences are
mapped to their sources, and whether a source says what a sentence says, is docsum_llm.citations'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast, get_args

__all__ = [
    "ADJACENT_CHARS",
    "MAX_SOURCES",
    "CitedSentence",
    "Source",
    "Support",
    "at_most",
    "bounded",
    "from_json",
    "to_json",
    "without_unsupported",
]

# cited: the sentence is what the text it cites says. aligned: the backend did not say where it comes
# from, and docsum matched it to the text afterwards. synthesis: it joins several sources, which support
# it together (or, above a summary whose sentences are not known, none could be told). unsupported: the
# texts it was made from do not say it: most of its content words are in none of them (see
# docsum_llm.openai.citations and docsum_llm.citations.merged_sentences for the rule at each level).
Support = Literal["cited", "aligned", "synthesis", "unsupported"]
_SUPPORTS: tuple[str, ...] = get_args(Support)


@dataclass(frozen=True)
class Source:
    """A range `[start, end)` of a document's extracted text, the unit (page, paragraph or line) it
    starts in and the one it ends in; None when the document has no positions (or, for `last_page`,
    when the range was stored before its last unit was: a reader looks it up then)."""

    document_id: str
    page: int | None
    start: int
    end: int
    last_page: int | None = None


# The most sources a sentence keeps. A merged sentence takes the sources of every child sentence it
# rests on, and a model asked to cite may cite every id it was shown: a top sentence then rests on
# thousands of ranges, which every view of the task and every snapshot of its stream would carry. Past
# a dozen or so nobody reads them; 16 keeps what a reader can check (`bounded` says which).
MAX_SOURCES = 16


# Two ranges of one document this close are one passage: the characters between two sentences of it
# (a space, a line break, a paragraph's "\r\n\r\n").
ADJACENT_CHARS = 4


@dataclass(frozen=True)
class CitedSentence:
    """A sentence of a summary, where it is in that summary's text (`at`), and what it rests on."""

    text: str
    sources: tuple[Source, ...]
    support: Support
    at: tuple[int, int]


def without_unsupported(text: str, sentences: Sequence[CitedSentence]) -> tuple[str, tuple[CitedSentence, ...]]:
    """`text` without its unsupported sentences (what a task asking for `support` "strict" shows, and what
    its merges are made from), and every sentence placed in what is left: an unsupported one at the
    empty range where it was. A sentence goes with the spaces after it (before it, at the text's end),
    and a bullet's line with its mark; one not where its `at` says is kept, and its text with it."""
    cuts: list[tuple[int, int]] = []
    for sentence in sentences:
        start, end = sentence.at
        if sentence.support == "unsupported" and start < end and text[start:end] == sentence.text:
            cuts.append(_cut(text, start, end))
    if not cuts:
        return text, tuple(sentences)
    kept: list[str] = []
    cursor = 0
    for start, end in cuts:
        kept.append(text[cursor:start])
        cursor = max(cursor, end)
    kept.append(text[cursor:])

    def moved(offset: int) -> int:
        """Where a character of `text` is once the cuts are made (one inside a cut: where the cut was)."""
        removed = 0
        for start, end in cuts:
            if offset <= start:
                break
            removed += min(offset, end) - start
        return offset - removed

    placed_ = tuple(replace(s, at=(moved(s.at[0]), moved(s.at[1]))) for s in sentences)
    return "".join(kept), placed_


def _cut(text: str, start: int, end: int) -> tuple[int, int]:
    """What leaving out the sentence `text[start:end]` removes: its bullet line whole, when it is all of
    one; else the sentence and the spaces after it, or, when nothing follows it, the spaces before it."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if text[line_start:start].strip() in ("-", "*", "•") and not text[end:line_end].strip():
        if line_end < len(text):
            return line_start, line_end + 1
        return max(0, line_start - 1), line_end
    after = end
    while after < len(text) and text[after] in " \t":
        after += 1
    if after < len(text) and text[after] not in "\r\n":
        return start, after
    before = start
    while before > 0 and text[before - 1] in " \t":
        before -= 1
    return before, after


def bounded(sources: Iterable[Source], limit: int = MAX_SOURCES) -> tuple[Source, ...]:
    """At most `limit` sources that cover what `sources` cover as well as that many can. The ranges of
    one document that overlap, or lie within ADJACENT_CHARS of each other, are joined into one first
    (chunks overlap, so the sentences of neighbouring chunks cite overlapping ranges; and a sentence
    resting on a passage cites its every sentence). If more than `limit` remain, the longest are kept —
    the most text the sentence rests on; between equals, the first. In order: documents as they first
    appear, ranges by start."""
    by_document: dict[str, list[Source]] = {}
    for source in sources:
        by_document.setdefault(source.document_id, []).append(source)
    joined: list[Source] = []
    for ranges in by_document.values():
        ranges.sort(key=lambda r: (r.start, r.end))
        current = ranges[0]
        for source in ranges[1:]:
            if source.start <= current.end + ADJACENT_CHARS:
                current = _joined(current, source)
            else:
                joined.append(current)
                current = source
        joined.append(current)
    if len(joined) <= limit:
        return tuple(joined)
    longest = sorted(range(len(joined)), key=lambda i: (joined[i].start - joined[i].end, i))[:limit]
    return tuple(joined[i] for i in sorted(longest))


def at_most(sources: Sequence[Source], limit: int = MAX_SOURCES) -> tuple[Source, ...]:
    """`sources` as they are when they are few enough (each as cited), else `bounded`."""
    return tuple(sources) if len(sources) <= limit else bounded(sources, limit)


def _joined(first: Source, then: Source) -> Source:
    """One range over two of one document, `then` starting within `first` or right after it."""
    if then.end <= first.end:
        return first
    return Source(first.document_id, first.page, first.start, then.end, then.last_page)


def to_json(sentences: Sequence[CitedSentence]) -> str:
    """Mapped sentences as JSON, for a jsonb column."""
    return json.dumps(
        [
            {
                "text": s.text,
                "support": s.support,
                "at": list(s.at),
                "sources": [_source_json(x) for x in s.sources],
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
        sources = tuple(_source(*source) for source in item["sources"])
        out.append(CitedSentence(str(item["text"]), sources, cast(Support, support), (int(start), int(end))))
    return tuple(out)


def _source_json(source: Source) -> list[str | int | None]:
    """[document, page, start, end, last page]: the unit the range ends in is stored with it, so that a
    view shows it without looking it up in the document's positions; left out (4 items, as in rows
    stored before it was) only where the range has a page and not its last: a view looks that one up."""
    out: list[str | int | None] = [source.document_id, source.page, source.start, source.end]
    return out if source.page is not None and source.last_page is None else [*out, source.last_page]


def _source(document_id: str, page: int | None, start: int, end: int, last_page: int | None = None) -> Source:
    return Source(str(document_id), _unit(page), int(start), int(end), _unit(last_page))


def _unit(value: int | None) -> int | None:
    return None if value is None else int(value)
