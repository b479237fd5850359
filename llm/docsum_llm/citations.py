"""Whether a summary sentence is what the text it cites says.

An extractive summary quotes: each of its sentences is a range of its input, in the input's own words.
The extractive backend changes a quoted range in few ways only, and `supports` allows exactly those:

- page furniture (a page number, "Page 3 of 9", a copyright line: see `non_prose_line`) on a line of
  its own inside the range is dropped, with its line break;
- a bullet, list number, footnote mark or stray closing bracket in front (`strip_marks`), and the
  "#" marks around a heading, are dropped;
- a word hyphenated at a line end ("de-\\nfined", lower-case letters on both sides) is joined, with
  or without its hyphen (see `dehyphenate`);
- a run of whitespace stands for a run of whitespace, of any kind and length; a run with a line
  break in it between two CJK characters may also be dropped (CJK text has no spaces);
- a sentence cut short ends in "…", and cites the part it kept.

Nothing else: no other character may be added, dropped or changed, case included.

An LLM does not quote: it rewords. `lexically_supported` is the looser test its sentences meet: most of
a sentence's content words (case-folded, lightly stemmed, each CJK character a word of its own) are
in the text it cites, and every name of code it uses (`code_names`: `idn2_malloc`, `getElementById`) is.

Above them, the sentences of a chunk's summary are mapped to ranges of their document's text
(`chunk_sentences`), and the sentences of a merge to the sources of the sentences they rest on
(`merged_sentences`); `check_sources` is what a mapped sentence is measured by, and
`lexical_support_rate` what a whole summary is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import get_args

from docsum_shared.cited import CitedSentence, Source, Support, at_most, bounded
from docsum_shared.positions import Positions, position_of
from docsum_shared.text import is_cjk_char, words

from .base import SummaryResult, SummarySentence
from .extractive import non_prose_line, strip_marks

__all__ = [
    "check_sources",
    "chunk_sentences",
    "lexical_support_rate",
    "lexically_supported",
    "merged_sentences",
    "placed",
    "supports",
]

_SUPPORTS: tuple[str, ...] = get_args(Support)
# Weakest last: a merged sentence is never better supported than the child sentence it rests on.
_STRENGTH = {support: rank for rank, support in enumerate(_SUPPORTS)}


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
    from `chunk_start` on); a range's page is the unit it starts in."""
    out: list[CitedSentence] = []
    for sentence, at in placed(result):
        sources: list[Source] = []
        for span in sentence.spans:
            if span.source != 0:
                raise ValueError(f"a chunk's request has one text; a sentence cites text {span.source}")
            start, end = chunk_start + span.start, chunk_start + span.end
            if positions is None:
                sources.append(Source(document_id, None, start, end))
                continue
            first, last = position_of(positions, start), position_of(positions, max(start, end - 1))
            sources.append(Source(document_id, first, start, end, last))
        out.append(CitedSentence(sentence.text, at_most(sources), sentence.support, at))
    return tuple(out)


def merged_sentences(result: SummaryResult, children: Sequence[Sequence[CitedSentence]]) -> tuple[CitedSentence, ...]:
    """A merge's sentences, given `children[i]`: the mapped sentences of the summary that was the
    merge's text i. A sentence takes the sources of the child sentences its ranges overlap: of one,
    that one's support too (or its own, when weaker); of several, it is a synthesis when the supported
    ones among them (all but the unsupported) support it together (`lexically_supported`), else
    unsupported; of none, a synthesis (nothing could be told: the texts' sentences are not known). A
    sentence its backend found unsupported by the merge's texts stays so. No source is made up here."""
    out: list[CitedSentence] = []
    for sentence, at in placed(result):
        hits: dict[tuple[int, int], CitedSentence] = {}
        for span in sentence.spans:
            if not 0 <= span.source < len(children):
                raise ValueError(f"a sentence cites text {span.source} of a merge of {len(children)}")
            for i, child in enumerate(children[span.source]):
                if _overlap(child.at, (span.start, span.end)):
                    hits[(span.source, i)] = child
        if len(hits) == 1:
            (hit,) = hits.values()
            support = max(sentence.support, hit.support, key=_STRENGTH.__getitem__)
            out.append(CitedSentence(sentence.text, at_most(hit.sources), support, at))
            continue
        sources = bounded(s for hit in hits.values() for s in hit.sources)
        out.append(CitedSentence(sentence.text, sources, _merged_support(sentence, list(hits.values())), at))
    return tuple(out)


def _merged_support(sentence: SummarySentence, hits: Sequence[CitedSentence]) -> Support:
    """The support of a merge's sentence that rests on several child sentences, or on none."""
    if sentence.support == "unsupported":
        return "unsupported"
    if not hits:
        return "synthesis"
    together = "\n".join(hit.text for hit in hits if hit.support != "unsupported")
    return "synthesis" if lexically_supported(together, sentence.text) else "unsupported"


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two ranges share a character; an empty range shares none."""
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def check_sources(sentence: CitedSentence, document_texts: Mapping[str, str]) -> bool:
    """Whether every source's range lies in its document's text and, for a cited sentence, one of them
    says what the sentence says (`supports`), or they say it together in other words
    (`lexically_supported`)."""
    for source in sentence.sources:
        text = document_texts.get(source.document_id)
        if text is None or not 0 <= source.start <= source.end <= len(text):
            return False
    if sentence.support != "cited":
        return True
    quoted = [document_texts[s.document_id][s.start : s.end] for s in sentence.sources]
    return any(supports(q, sentence.text) for q in quoted) or lexically_supported("\n".join(quoted), sentence.text)


def lexical_support_rate(sentences: Sequence[CitedSentence], document_texts: Mapping[str, str]) -> float:
    """The share of `sentences` that their sources, read together, support lexically, whatever their
    label: how much of a summary its citations back up. A sentence without sources, or with one out of
    its document's range, is unsupported; no sentences at all, a rate of 0."""
    supported = 0
    for sentence in sentences:
        quoted: list[str] = []
        for source in sentence.sources:
            text = document_texts.get(source.document_id)
            if text is None or not 0 <= source.start <= source.end <= len(text):
                quoted = []
                break
            quoted.append(text[source.start : source.end])
        supported += bool(quoted) and lexically_supported("\n".join(quoted), sentence.text)
    return supported / len(sentences) if sentences else 0.0


# A sentence is supported when at least this share of its content words are in the text it cites: a
# reworded sentence keeps most of its source's words, one that says something else keeps few.
LEXICAL_SUPPORT = Fraction(3, 5)
# Words that say little of what a sentence is about (case-folded).
_STOPWORDS = frozenset(
    """a about above after again all also an and any are as at be been before being below between both
    but by can could did do does doing during each few for from further had has have having he her here
    hers him his how i if in into is it its itself just may me might more most must my no nor not of off
    on once only or other our ours out over own same shall she should so some such than that the their
    theirs them then there these they this those through to too under until up upon very was we were
    what when where which while who whom why will with within without would you your""".split()
)
_CJK_STOPWORDS = frozenset("的了是在和与及或也就都而之其这那有为以于个")
# A name of code: letters and digits joined by "_" (not at either end), or a word with a lower-case letter
# followed by a capital (camelCase, PascalCase with a second capital).
_CODE_NAME_RE = re.compile(r"(?<!\w)(?:[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[A-Za-z]*[a-z][A-Z][A-Za-z0-9]*)(?!\w)")
# Suffixes a light stem drops (the first that fits), and what takes their place.
_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ings", ""), ("ing", ""), ("ed", ""), ("ly", ""), ("s", ""))
_MIN_STEM = 3


def lexically_supported(quoted: str, sentence: str) -> bool:
    """Whether most of `sentence`'s content words (at least `LEXICAL_SUPPORT` of them) are in `quoted`,
    and every name of code it uses (`code_names`) is; a sentence without any content word is not
    supported."""
    words = content_words(sentence)
    if not words:
        return False
    if (names := code_names(sentence)) and not names <= code_names(quoted):  # the quoted text read only then
        return False  # an API, file or setting the source does not name: a model's invention, however worded
    return len(words & content_words(quoted)) >= LEXICAL_SUPPORT * len(words)


def code_names(text: str) -> set[str]:
    """The names of code in `text` (case-folded): words joined by "_" (`idn2_malloc`, `MAX_LEN`) and
    words with a capital inside (`getElementById`, `ByteBuffer`). A model that rewords a technical text
    keeps them as they are, or it names something else: a sentence that names one its source does not
    has no support for it, whatever else it shares."""
    return {m.casefold() for m in _CODE_NAME_RE.findall(text)}


def content_words(text: str) -> set[str]:
    """The words of `text` that say what it is about: case-folded, stemmed lightly, stop words and
    one-letter words left out; a CJK character is a word of its own."""
    found: set[str] = set()
    for word in words(text.casefold()):
        if len(word) == 1 and is_cjk_char(word):
            if word not in _CJK_STOPWORDS:
                found.add(word)
        elif word not in _STOPWORDS and (len(word) > 1 or word.isdigit()):
            found.add(_stem(word))
    return found


def _stem(word: str) -> str:
    """`word` without an inflection's ending, and without a final "e": "stores", "stored", "storing"
    and "store" are all "stor"."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            word = word[: -len(suffix)] + replacement
            break
    return word[:-1] if word.endswith("e") and len(word) > _MIN_STEM else word


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
        unmarked = strip_marks(text).strip()
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
