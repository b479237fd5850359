"""Summary sentences mapped to their documents: a chunk's to ranges of its document's text, a merge's to
the sources of the sentences it quotes, checked against the texts."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from docsum_chunker.policy import CutChunk, cut
from docsum_chunker.settings import ChunkerSettings
from docsum_llm.base import Span, SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.budget import group_to_fit, next_level, part_of
from docsum_llm.citations import (
    check_sources,
    chunk_sentences,
    code_names,
    lexical_support_rate,
    lexically_supported,
    merged_sentences,
    placed,
)
from docsum_llm.extractive import ExtractiveBackend
from docsum_merger.policy import ChunkState, DocumentState, MergeChunks, decide_document, decide_task
from docsum_parser.extract import extract_text
from docsum_shared.cited import ADJACENT_CHARS, MAX_SOURCES, CitedSentence, Source, bounded, from_json, to_json
from docsum_shared.positions import Positions
from docsum_shared.states import ChunkStatus, DocumentStatus
from tests.documents import chinese_prose, english_prose

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _result(text: str, *sentences: tuple[str, int, int, int] | SummarySentence) -> SummaryResult:
    """A result whose sentences are given whole, or as (text, source, start, end): one cited range."""
    return SummaryResult(
        text,
        "m",
        sentences=tuple(s if isinstance(s, SummarySentence) else SummarySentence.quoting(*s) for s in sentences),
    )


# --- where a sentence is in its summary --------------------------------------------------------------------


def test_sentences_are_found_in_order_and_a_repeated_one_at_its_own_place() -> None:
    result = _result("Yes. No. Yes.", ("Yes.", 0, 0, 4), ("No.", 0, 5, 8), ("Yes.", 0, 10, 14))
    assert [at for _, at in placed(result)] == [(0, 4), (5, 8), (9, 13)]


def test_a_sentence_not_in_the_summary_gets_an_empty_range_where_the_search_stands() -> None:
    result = _result("One. Two.", ("One.", 0, 0, 4), ("Missing.", 0, 9, 17), ("Two.", 0, 5, 9), ("", 0, 0, 0))
    assert [at for _, at in placed(result)] == [(0, 4), (4, 4), (5, 9), (9, 9)]


# --- a chunk's sentences ----------------------------------------------------------------------------------


def test_a_chunk_sentence_cites_its_range_of_the_document_and_the_page_it_starts_on() -> None:
    document = "Page one text.\fPage two says this. And that."
    chunk_start = 15  # the chunk is document[15:]
    result = _result("Page two says this. And that.", ("Page two says this.", 0, 0, 19), ("And that.", 0, 20, 29))
    positions = Positions("page", (0, 15))
    mapped = chunk_sentences(result, "d", chunk_start, positions)
    assert mapped == (
        CitedSentence("Page two says this.", (Source("d", 2, 15, 34, 2),), "cited", (0, 19)),
        CitedSentence("And that.", (Source("d", 2, 35, 44, 2),), "cited", (20, 29)),
    )
    assert all(check_sources(s, {"d": document}) for s in mapped)
    assert [s.sources[0].page for s in chunk_sentences(result, "d", chunk_start, None)] == [None, None]


def test_a_chunk_sentence_on_several_ranges_cites_each_and_keeps_its_support() -> None:
    document = "Intro.\fKafka keeps events. Brokers copy them. Consumers read."
    two = SummarySentence("Kafka keeps events that brokers copy.", (Span(0, 0, 19), Span(0, 20, 38)), "cited")
    none = SummarySentence("Overall, a log.", (), "synthesis")
    aligned = SummarySentence("Consumers read.", (Span(0, 39, 54),), "aligned")
    result = _result(f"{two.text} {none.text} {aligned.text}", two, none, aligned)
    mapped = chunk_sentences(result, "d", 7, Positions("page", (0, 7)))
    assert mapped == (
        CitedSentence(two.text, (Source("d", 2, 7, 26, 2), Source("d", 2, 27, 45, 2)), "cited", (0, 37)),
        CitedSentence(none.text, (), "synthesis", (38, 53)),
        CitedSentence(aligned.text, (Source("d", 2, 46, 61, 2),), "aligned", (54, 69)),
    )
    assert all(check_sources(s, {"d": document}) for s in mapped)


def test_a_chunk_summary_without_sentences_maps_to_nothing() -> None:
    assert chunk_sentences(SummaryResult("an answer that says nothing of where", "llm"), "d", 0, None) == ()


def test_a_chunk_sentence_citing_another_text_is_refused() -> None:
    with pytest.raises(ValueError, match="one text"):
        chunk_sentences(_result("A.", ("A.", 1, 0, 2)), "d", 0, None)


# --- a merge's sentences ----------------------------------------------------------------------------------

S1, S2, S3 = Source("d", 1, 0, 10), Source("d", 2, 20, 30), Source("e", None, 5, 9)
CHILD = (  # the summary "Alpha one. Beta two." and its sentences
    CitedSentence("Alpha one.", (S1,), "cited", (0, 10)),
    CitedSentence("Beta two.", (S2,), "aligned", (11, 20)),
)
OTHER = (CitedSentence("Gamma.", (S3,), "cited", (0, 6)),)


def test_a_merge_sentence_quoting_one_child_sentence_takes_its_sources_and_support() -> None:
    result = _result("Beta two. Gamma.", ("Beta two.", 0, 11, 20), ("Gamma.", 1, 0, 6))
    assert merged_sentences(result, [CHILD, OTHER]) == (
        CitedSentence("Beta two.", (S2,), "aligned", (0, 9)),
        CitedSentence("Gamma.", (S3,), "cited", (10, 16)),
    )


def test_a_merge_sentence_over_several_child_sentences_is_a_synthesis_of_all_their_sources() -> None:
    result = _result("Alpha one. Beta two.", ("Alpha one. Beta two.", 0, 0, 20))
    assert merged_sentences(result, [CHILD]) == (CitedSentence("Alpha one. Beta two.", (S1, S2), "synthesis", (0, 20)),)


def test_a_merge_sentence_over_no_child_sentence_is_a_synthesis_without_sources() -> None:
    lost = (CitedSentence("Lost.", (S1,), "cited", (4, 4)),)  # not found in its summary: an empty range
    result = _result("Alpha one.", ("Alpha one.", 0, 0, 10))
    assert merged_sentences(result, [lost]) == (CitedSentence("Alpha one.", (), "synthesis", (0, 10)),)
    assert merged_sentences(result, [()]) == (CitedSentence("Alpha one.", (), "synthesis", (0, 10)),)


def test_a_merge_sentence_takes_the_weaker_of_its_own_support_and_its_one_child_sentences() -> None:
    aligned = SummarySentence("Gamma.", (Span(1, 0, 6),), "aligned")
    synthesis = SummarySentence("Alpha.", (Span(0, 0, 5),), "synthesis")
    result = _result("Gamma. Beta two. Alpha.", aligned, ("Beta two.", 0, 11, 20), synthesis)
    assert [(s.sources, s.support) for s in merged_sentences(result, [CHILD, OTHER])] == [
        ((S3,), "aligned"),  # its own, weaker than the child's "cited"
        ((S2,), "aligned"),  # the child's, weaker than its own "cited"
        ((S1,), "synthesis"),
    ]


def test_a_merge_sentence_on_several_ranges_is_a_synthesis_of_what_they_hit_or_one_hit_twice() -> None:
    across = SummarySentence("Alpha and Gamma.", (Span(0, 0, 10), Span(1, 0, 6)), "cited")
    twice = SummarySentence("Beta, two.", (Span(0, 11, 15), Span(0, 16, 20)), "cited")
    missed = SummarySentence("Nowhere.", (Span(0, 30, 40), Span(1, 7, 9)), "cited")
    result = _result("Alpha and Gamma. Beta, two. Nowhere.", across, twice, missed)
    assert merged_sentences(result, [CHILD, OTHER]) == (
        CitedSentence(across.text, (S1, S3), "synthesis", (0, 16)),
        CitedSentence(twice.text, (S2,), "aligned", (17, 27)),  # the child sentence's support
        CitedSentence(missed.text, (), "synthesis", (28, 36)),
    )


def test_a_merge_sentence_citing_a_text_without_a_child_is_refused() -> None:
    with pytest.raises(ValueError, match="merge of 1"):
        merged_sentences(_result("Gamma.", ("Gamma.", 1, 0, 6)), [CHILD])


# --- checking and storing them ----------------------------------------------------------------------------


def test_check_sources_wants_ranges_inside_their_text_and_a_cited_sentence_supported() -> None:
    texts = {"d": "Alpha one. Beta two.", "e": "xx Gamma."}
    assert check_sources(CitedSentence("Alpha one.", (Source("d", 1, 0, 10),), "cited", (0, 10)), texts)
    assert check_sources(
        CitedSentence("Gamma.", (Source("d", 1, 0, 10), Source("e", None, 3, 9)), "cited", (0, 6)), texts
    )
    assert not check_sources(CitedSentence("Beta two.", (Source("d", 1, 0, 10),), "cited", (0, 9)), texts)
    assert not check_sources(CitedSentence("Alpha one.", (Source("d", 1, 0, 40),), "cited", (0, 10)), texts)
    assert not check_sources(CitedSentence("Alpha one.", (Source("x", 1, 0, 10),), "cited", (0, 10)), texts)
    assert not check_sources(CitedSentence("Alpha one.", (), "cited", (0, 10)), texts)
    # A synthesis says more than any one source: its ranges only have to exist.
    assert check_sources(
        CitedSentence("Both of them.", (Source("d", 1, 0, 10), Source("e", None, 3, 9)), "synthesis", (0, 13)), texts
    )
    assert not check_sources(CitedSentence("Both.", (Source("e", None, 3, 10),), "synthesis", (0, 5)), texts)
    assert check_sources(CitedSentence("Nothing to go on.", (), "synthesis", (0, 17)), texts)


def test_a_cited_sentence_in_other_words_is_checked_lexically_against_its_sources_together() -> None:
    texts = {"d": "Kafka keeps events in topics. Brokers replicate the partitions."}
    first, second = Source("d", 1, 0, 29), Source("d", 1, 30, 63)
    both = CitedSentence("Brokers replicate partitions of Kafka topics and events.", (first, second), "cited", (0, 56))
    assert check_sources(both, texts)  # neither range says it alone, nor word for word
    assert not check_sources(CitedSentence(both.text, (first,), "cited", (0, 56)), texts)
    assert lexical_support_rate([both, CitedSentence(both.text, (first,), "cited", (0, 56))], texts) == 0.5
    assert lexical_support_rate([CitedSentence(both.text, (), "synthesis", (0, 56))], texts) == 0.0
    assert lexical_support_rate([], texts) == 0.0


@pytest.mark.parametrize(
    ("sentence", "supported"),
    [
        # Five content words: kafka, store, event, broker, disk. Three of them (3/5, the threshold) are enough.
        ("Kafka stored the events with brokers on disk.", True),
        ("KAFKA STORES EVENTS on brokers' disks.", True),  # case and endings do not matter
        ("Kafka stores events, on brokers.", True),  # 3 of 4 in the quoted text
        ("Kafka stores pictures with cameras on tapes.", False),  # 2 of 5
        ("Kafka stores events on cameras and tapes.", True),  # 3 of 5: at the threshold
        ("Kafka stores pictures on tapes.", False),  # 2 of 4: half is not most
        ("Kafka stores pictures with cameras on tapes and drums.", False),  # 2 of 6
        ("It is what it was.", False),  # no content word at all
        ("卡夫卡存储事件。", True),
        ("卡夫卡拍摄照片。", False),  # 卡夫卡 is three of seven characters
    ],
)
def test_lexical_support_wants_most_content_words_in_the_quoted_text(sentence: str, supported: bool) -> None:
    quoted = "Kafka stores events in topics, and brokers keep them. 卡夫卡把事件存储在主题中。"
    assert lexically_supported(quoted, sentence) is supported


# The page a local model summarized (libidn2's manual, Debian's PDF), and its sentence that named a function
# the page does not: its other words passed the lexical check.
IDN2_PAGE = (
    "Chapter 2: Library Functions 9\n2.7 Memory Handling\nidn2 free\n[Function]void idn2_free (void * ptr)\n"
    "ptr: pointer to deallocate\nCall free(3) on the given pointer."
)


@pytest.mark.parametrize(
    ("sentence", "supported"),
    [
        ("The function `idn2_free` is used to deallocate memory allocated by `idn2_malloc`.", False),
        ("The function `idn2_free` is used to deallocate memory.", True),
        ("The function IDN2_FREE deallocates the memory a pointer holds.", True),  # case does not matter
        ("Memory handling: idnFree deallocates the given pointer.", False),  # a name it does not have
        ("Memory handling: the function deallocates the given pointer.", True),  # no name of code at all
    ],
)
def test_a_sentence_naming_code_its_source_does_not_name_is_not_supported(sentence: str, supported: bool) -> None:
    assert lexically_supported(IDN2_PAGE, sentence) is supported


def test_names_of_code_are_words_joined_by_underscores_or_with_a_capital_inside() -> None:
    assert code_names("`idn2_malloc`, MAX_LEN, getElementById and ByteBuffer; COVID-19, IPv6, HTTP, __init__, x_") == {
        "idn2_malloc",
        "max_len",
        "getelementbyid",
        "bytebuffer",
    }


# --- a sentence's sources are bounded -----------------------------------------------------------------------


def _cite_every_id() -> tuple[tuple[CitedSentence, ...], tuple[CitedSentence, ...]]:
    """Two merged texts whose every sentence cites one range, as a model told to cite every id leaves
    them: 2,000 sentences over touching ranges of "d" (each range 5 characters, on pages of 1,000), and
    1,000 over ranges of "e" apart from each other, 1 to 5 characters long."""
    touching = tuple(
        CitedSentence(f"D{i}.", (Source("d", 1 + 5 * i // 1000, 5 * i, 5 * i + 5, 1 + (5 * i + 4) // 1000),), "cited",
                      (10 * i, 10 * i + 5))
        for i in range(2000)
    )  # fmt: skip
    apart = tuple(
        CitedSentence(f"E{i}.", (Source("e", None, 10 * i, 10 * i + 1 + i % 5),), "aligned", (10 * i, 10 * i + 5))
        for i in range(1000)
    )
    return touching, apart


def test_a_merge_over_thousands_of_cited_ranges_keeps_at_most_max_sources_joining_touching_ones() -> None:
    touching, apart = _cite_every_id()
    everything = SummarySentence("D0 and E0.", (Span(0, 0, 20_000), Span(1, 0, 10_000)), "cited")
    one_child = SummarySentence("D0 and D1.", (Span(0, 0, 20_000),), "cited")
    result = _result("D0 and E0. D0 and D1.", everything, one_child)
    top, of_d = merged_sentences(result, [touching, apart])
    # 3,000 ranges before: the touching 2,000 are one range (pages 1 to 10), then the longest of "e".
    assert len(top.sources) == MAX_SOURCES
    assert top.sources[0] == Source("d", 1, 0, 10_000, 10)
    assert top.sources[1:] == tuple(Source("e", None, 10 * i, 10 * i + 5) for i in range(4, 5 * (MAX_SOURCES - 1), 5))
    assert of_d.sources == (Source("d", 1, 0, 10_000, 10),) and of_d.support == "synthesis"


def test_bounded_joins_overlapping_ranges_of_one_document_only_and_keeps_the_first_of_equals() -> None:
    sources = [Source("d", 1, 0, 10, 1), Source("e", 2, 5, 8, 2), Source("d", 1, 8, 12, 2), Source("d", 1, 12, 14, 2)]
    assert bounded(sources) == (Source("d", 1, 0, 14, 2), Source("e", 2, 5, 8, 2))
    assert bounded([Source("d", 1, 0, 10, 1), Source("d", 1, 2, 4, 1)]) == (Source("d", 1, 0, 10, 1),)
    # A sentence break apart (ADJACENT_CHARS at most) is one passage; further, two.
    gap = [Source("d", 1, 0, 10, 1), Source("d", 1, 10 + ADJACENT_CHARS, 20, 2), Source("d", 2, 25, 30, 2)]
    assert bounded(gap) == (Source("d", 1, 0, 20, 2), Source("d", 2, 25, 30, 2))
    equals = [Source("d", None, 10 * i, 10 * i + 3) for i in range(5)]
    assert bounded(equals, 2) == tuple(equals[:2])


def test_a_chunk_sentence_citing_every_range_keeps_max_sources() -> None:
    many = SummarySentence("All of it.", tuple(Span(0, 7 * i, 7 * i + 2) for i in range(300)), "cited")
    [sentence] = chunk_sentences(_result("All of it.", many), "d", 0, None)
    assert len(sentence.sources) == MAX_SOURCES
    few = SummarySentence("Two.", (Span(0, 0, 5), Span(0, 5, 9)), "cited")  # few: each as cited
    [kept] = chunk_sentences(_result("Two.", few), "d", 0, None)
    assert kept.sources == (Source("d", None, 0, 5), Source("d", None, 5, 9))


def test_sources_stored_before_their_last_page_was_read_back_as_unknown() -> None:
    stored = [{"text": "Old.", "support": "cited", "at": [0, 4], "sources": [["d", 3, 10, 20]]}]
    assert from_json(json.dumps(stored)) == (CitedSentence("Old.", (Source("d", 3, 10, 20),), "cited", (0, 4)),)
    assert json.loads(to_json(from_json(json.dumps(stored))))[0]["sources"] == [["d", 3, 10, 20]]  # looked up
    known = CitedSentence("New.", (Source("d", 3, 10, 20, 4), Source("e", None, 1, 2)), "cited", (0, 4))
    assert json.loads(to_json([known]))[0]["sources"] == [["d", 3, 10, 20, 4], ["e", None, 1, 2, None]]


def test_mapped_sentences_round_trip_through_json() -> None:
    sentences = (
        *CHILD,
        CitedSentence("两个来源。", (S1, S3), "synthesis", (3, 8)),
        CitedSentence("None.", (), "synthesis", (9, 9)),
    )
    assert from_json(to_json(sentences)) == sentences
    assert from_json(to_json(())) == ()
    with pytest.raises(ValueError, match="support"):
        from_json(json.dumps([{"text": "x", "support": "guessed", "at": [0, 1], "sources": []}]))


# --- end to end, in memory, with the extractive backend ---------------------------------------------------

BACKEND = ExtractiveBackend()
SETTINGS = ChunkerSettings(chunk_chars=1500, small_max_chars=2000)
# A budget (tokens) under which the larger documents merge their chunks in a tree of two levels or more.
TREE_BUDGET = 3000


@dataclass(frozen=True)
class Document:
    text: str
    positions: Positions | None


@functools.cache
def documents() -> dict[str, Document]:
    out = {}
    for path in sorted(EXAMPLES.iterdir()):
        extracted = extract_text(path.read_bytes(), path.name)
        out[path.name] = Document(extracted.text, extracted.positions)
    out["english_prose"] = Document(english_prose(20_000, seed=7), None)
    out["chinese_prose"] = Document(chinese_prose(12_000, seed=8), None)
    return out


@dataclass(frozen=True)
class Summarized:
    """A document summarized as the pipeline does it, with the mapped sentences of every level."""

    summary: str
    sentences: tuple[CitedSentence, ...]
    levels: tuple[tuple[CitedSentence, ...], ...]  # the chunk level first, then every merge level


def _summarize_chunk(row: CutChunk) -> SummaryResult:
    c = row.chunk
    request = SummaryRequest(
        SummaryKind.CHUNK, (c.text,), context_before=c.context_before, context_after=c.context_after
    )
    return BACKEND.summarize_sync(request)


def summarized(document_id: str, budget: int | None = None) -> Summarized:
    """Cut as the chunker cuts, each chunk summarized, then merged as the merger merges: level by level
    in groups that fit `budget` (the merge tree's shape), then once over what is left."""
    document = documents()[document_id]
    rows = cut(document_id, document.text, SETTINGS)
    assert isinstance(rows, list) and len(rows) > 1
    results = [_summarize_chunk(row) for row in rows]
    mapped = [
        chunk_sentences(r, document_id, row.chunk.start, document.positions)
        for r, row in zip(results, rows, strict=True)
    ]
    levels = [tuple(s for m in mapped for s in m)]
    states = [ChunkState(row.index, ChunkStatus.COMPLETED, r.text, None) for r, row in zip(results, rows, strict=True)]
    decision = decide_document(DocumentState(document_id, document_id, DocumentStatus.SUMMARIZING, None, None), states)
    assert isinstance(decision, MergeChunks) and decision.request is not None
    request, children = decision.request, mapped
    while budget is not None:
        groups = group_to_fit(request, budget)
        if len(groups) == len(request.texts):
            break
        merged = [BACKEND.summarize_sync(part_of(request, start, end)) for start, end in groups]
        children = [merged_sentences(r, children[start:end]) for r, (start, end) in zip(merged, groups, strict=True)]
        levels.append(tuple(s for m in children for s in m))
        request = next_level(request, [r.text for r in merged])
    result = BACKEND.summarize_sync(request)
    top = merged_sentences(result, children)
    return Summarized(result.text, top, (*levels, top))


def _task(ids: Sequence[str]) -> tuple[Sequence[Summarized], tuple[CitedSentence, ...]]:
    docs = [summarized(i) for i in ids]
    states = [
        DocumentState(i, f"{i}.txt", DocumentStatus.COMPLETED, d.summary, None) for i, d in zip(ids, docs, strict=True)
    ]
    decision = decide_task("two documents", states)
    assert decision is not None and decision.request is not None
    return docs, merged_sentences(BACKEND.summarize_sync(decision.request), [d.sentences for d in docs])


def _texts() -> dict[str, str]:
    return {name: d.text for name, d in documents().items()}


@pytest.mark.parametrize("document_id", sorted(documents()))
def test_every_sentence_of_a_documents_chunks_and_merge_quotes_the_document(document_id: str) -> None:
    done = summarized(document_id)
    chunks, top = done.levels
    assert chunks and top
    assert all(s.support == "cited" and check_sources(s, _texts()) for level in done.levels for s in level)
    positions = documents()[document_id].positions
    if positions is not None:
        assert all(s.sources[0].page is not None and 1 <= s.sources[0].page <= len(positions.starts) for s in top)


@pytest.mark.parametrize("document_id", ["python-language-reference.docx", "chinese_prose"])
def test_a_merge_tree_keeps_every_sentence_cited_at_every_level(document_id: str) -> None:
    done = summarized(document_id, TREE_BUDGET)
    assert len(done.levels) >= 3  # chunks, one level of groups at least, the top
    assert all(s.support == "cited" and check_sources(s, _texts()) for level in done.levels for s in level)


def test_a_task_merge_of_two_documents_cites_both_documents() -> None:
    docs, task = _task(["kafka-overview.pdf", "chinese-essay.txt"])
    assert all(check_sources(s, _texts()) for s in task)
    assert all(s.support == "cited" for s in task)
    assert {s.sources[0].document_id for s in task} == {"kafka-overview.pdf", "chinese-essay.txt"}
    quoted = {s.sources for d in docs for s in d.sentences}
    assert all(s.sources in quoted for s in task)  # nothing a document's summary did not have
