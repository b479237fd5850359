"""The figures of the citation evaluation (eval/citations.py), as functions of mapped sentences.

Nothing here needs the `eval` dependency group: the lexical measure is passed in (`Precision`: ROUGE-1
precision from `rouge-score` in the evaluation), so the unit tests run without it.

- validity: of all sources, the share whose range lies in its document's text and whose quoted text
  matches the sentence (`Match`: `citations.supports` for a system that quotes, the lexical check for
  one that does not);
- coverage: of all sentences, the share labelled cited, aligned, synthesis or unsupported; a summary
  whose backend did not say where its sentences come from has sentences with no label (counted by
  `sentence_spans`);
- supported by their labels: of the labelled sentences, the share labelled cited, aligned or synthesis
  (not unsupported: the pipeline's own check, `citations.lexically_supported`, at every level);
- lexical support: of all sentences, the share whose sources' quoted texts, together, contain the
  sentence's words (`Precision` of the sentence against them at least the threshold);
- gold recall: of the gold source sentences found in the input (`find_gold`), the share that a source
  range of the summary overlaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from docsum_shared.cited import CitedSentence, Source, Support
from docsum_shared.text import sentence_spans

# (sentence, quoted text) -> the share of the sentence's words found in the quoted text
Precision = Callable[[str, str], float]
# (quoted text, sentence) -> whether the quoted text says what the sentence says
Match = Callable[[str, str], bool]
Span = tuple[int, int]
SUPPORTS: tuple[Support, ...] = ("cited", "aligned", "synthesis", "unsupported")


@dataclass(frozen=True)
class Share:
    hits: int
    total: int

    @property
    def value(self) -> float | None:
        return self.hits / self.total if self.total else None

    def __add__(self, other: Share) -> Share:
        return Share(self.hits + other.hits, self.total + other.total)


NONE = Share(0, 0)


def total(shares: Iterable[Share]) -> Share:
    return sum(shares, NONE)


@dataclass(frozen=True)
class Mapped:
    """A summary's text and its sentences with their sources; None when the backend did not say."""

    text: str
    sentences: tuple[CitedSentence, ...] | None


def sentence_count(summary: Mapped) -> int:
    """The summary's sentences: the mapped ones, else as many as the text has."""
    return len(summary.sentences) if summary.sentences is not None else len(sentence_spans(summary.text))


def quoted(source: Source, texts: Mapping[str, str]) -> str | None:
    """The text a source's range quotes; None when the range is not in its document's text."""
    text = texts.get(source.document_id)
    if text is None or not 0 <= source.start <= source.end <= len(text):
        return None
    return text[source.start : source.end]


def validity(summary: Mapped, texts: Mapping[str, str], match: Match) -> Share:
    """Of the summary's sources, those whose range exists and whose quoted text matches their sentence."""
    hits = count = 0
    for sentence in summary.sentences or ():
        for source in sentence.sources:
            count += 1
            text = quoted(source, texts)
            hits += text is not None and match(text, sentence.text)
    return Share(hits, count)


def lexical_match(precision: Precision, threshold: float) -> Match:
    """The lexical check as a `Match`: the sentence's words are (mostly) in the quoted text."""
    return lambda text, sentence: precision(sentence, text) >= threshold


def coverage(summary: Mapped) -> dict[Support, Share]:
    """Per label, the share of the summary's sentences that have it."""
    n = sentence_count(summary)
    labels = [s.support for s in summary.sentences or ()]
    return {support: Share(labels.count(support), n) for support in SUPPORTS}


def labelled_supported(summary: Mapped) -> Share:
    """Of the summary's labelled sentences, those its backend and merges did not label unsupported."""
    labels = [s.support for s in summary.sentences or ()]
    return Share(sum(1 for label in labels if label != "unsupported"), len(labels))


def with_sources(summary: Mapped) -> Share:
    """The share of the summary's sentences that have at least one source."""
    return Share(sum(1 for s in summary.sentences or () if s.sources), sentence_count(summary))


def lexical_support(summary: Mapped, texts: Mapping[str, str], precision: Precision, threshold: float) -> Share:
    """The share of the summary's sentences whose sources' quoted texts, together, hold at least
    `threshold` of the sentence's words (ROUGE-1 precision of the sentence against them)."""
    hits = 0
    for sentence in summary.sentences or ():
        quotes = [q for q in (quoted(s, texts) for s in sentence.sources) if q is not None]
        hits += bool(quotes) and precision(sentence.text, "\n".join(quotes)) >= threshold
    return Share(hits, sentence_count(summary))


def find_gold(sentences: Sequence[str], text: str) -> list[Span | None]:
    """Where each sentence is in `text`, whitespace ignored (ACLSum's sentences are tokenized, with
    spaces around punctuation); None when it is not there. The first occurrence is taken."""
    kept = [i for i, c in enumerate(text) if not c.isspace()]
    squeezed = "".join(text[i] for i in kept)
    out: list[Span | None] = []
    for sentence in sentences:
        needle = "".join(sentence.split())
        at = squeezed.find(needle) if needle else -1
        out.append(None if at < 0 else (kept[at], kept[at + len(needle) - 1] + 1))
    return out


def gold_recall(summaries: Iterable[Mapped], gold: Mapping[str, Sequence[Span]]) -> Share:
    """Of the gold spans (per document), those that a source range of the summaries overlaps."""
    ranges: dict[str, list[Span]] = {}
    for summary in summaries:
        for sentence in summary.sentences or ():
            for s in sentence.sources:
                ranges.setdefault(s.document_id, []).append((s.start, s.end))
    hits = count = 0
    for document_id, spans in gold.items():
        cited = ranges.get(document_id, [])
        for span in spans:
            count += 1
            hits += any(_overlap(span, r) for r in cited)
    return Share(hits, count)


def _overlap(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]
