"""What each support label promises, at every level: a chunk summary's sentences against the chunk's
sentences, a merge's against its children's; an unsupported sentence marked by the CLI, and left out of
the text (and of the merges above) for a task asking for `support` "strict"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.exceptions import RequestValidationError

from docsum_cli import main as cli
from docsum_cli.footnotes import printable
from docsum_gateway.routers.tasks import _form
from docsum_llm.base import Span, SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.citations import merged_sentences
from docsum_llm.openai.citations import cited_sentences, numbered
from docsum_merger.policy import ChunkState, DocumentState, MergeChunks, decide_document
from docsum_shared.cited import CitedSentence, Source, without_unsupported
from docsum_shared.events import DocumentSubmitted, Topic, decode
from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus
from tests.cli_doubles import recording_gateway

CHUNK = SummaryRequest(
    SummaryKind.CHUNK,
    ("Kafka stores data on disk. Brokers run in clusters. Consumers poll for records. Producers send batches.",),
)


def test_a_chunk_sentence_is_cited_a_synthesis_of_several_or_unsupported() -> None:
    numbers = numbered(CHUNK)
    found = [
        ("Kafka stores data on disk.", ("S1",)),  # copied from the sentence it cites
        ("Kafka brokers, consumers and producers.", ()),  # one word from each of three sentences
        ("Penguins juggle violet umbrellas at midnight.", ("S1",)),  # words in no sentence shown
        ("It is so.", ("S2",)),  # no content word at all: nothing in it is supported
    ]
    assert cited_sentences(found, numbers) == (
        SummarySentence("Kafka stores data on disk.", (Span(0, 0, 26),), "cited"),
        SummarySentence(
            "Kafka brokers, consumers and producers.", (Span(0, 0, 26), Span(0, 27, 51), Span(0, 52, 79)), "synthesis"
        ),
        SummarySentence("Penguins juggle violet umbrellas at midnight.", (), "unsupported"),
        SummarySentence("It is so.", (), "unsupported"),
    )


S1, S2, S3 = Source("d", 1, 0, 20), Source("d", 2, 30, 50), Source("e", None, 0, 20)
LEFT = (  # the summary "Rain fell in May. Dragons ate the harvest." and its sentences
    CitedSentence("Rain fell in May.", (S1,), "cited", (0, 17)),
    CitedSentence("Dragons ate the harvest.", (), "unsupported", (18, 42)),
)
RIGHT = (CitedSentence("The river rose in June.", (S3,), "aligned", (0, 23)),)


def _merge(text: str, *sentences: SummarySentence) -> SummaryResult:
    return SummaryResult(text, "m", sentences=sentences)


def test_a_merge_sentence_joining_two_children_is_a_synthesis_and_one_they_do_not_say_unsupported() -> None:
    joined = SummarySentence(
        "Rain fell in May and the river rose in June.", (Span(0, 0, 17), Span(1, 0, 23)), "aligned"
    )
    # Its ranges hit a supported child and an unsupported one: only the supported one counts, and it
    # does not say "dragons" nor "harvest".
    invented = SummarySentence("Dragons ate the harvest in June.", (Span(0, 18, 42), Span(1, 0, 23)), "cited")
    # The merge's backend found nothing of it in the merge's texts.
    unsaid = SummarySentence("Wolves sang.", (Span(0, 0, 17), Span(1, 0, 23)), "unsupported")
    text = f"{joined.text} {invented.text} {unsaid.text}"
    out = merged_sentences(_merge(text, joined, invented, unsaid), [LEFT, RIGHT])
    assert [(s.text, s.support, s.sources) for s in out] == [
        (joined.text, "synthesis", (S1, S3)),
        (invented.text, "unsupported", (S3,)),
        (unsaid.text, "unsupported", (S1, S3)),
    ]
    # One child sentence, unsupported: what rests on it is too.
    (restated,) = merged_sentences(
        _merge("Dragons ate it.", SummarySentence.quoting("Dragons ate it.", 0, 18, 42)), [LEFT]
    )
    assert restated.support == "unsupported"


def test_strict_leaves_unsupported_sentences_out_of_the_text_and_of_the_merge_above() -> None:
    summary = "Rain fell in May. Dragons ate the harvest."
    text, placed = without_unsupported(summary, LEFT)
    assert text == "Rain fell in May."
    assert [s.at for s in placed] == [(0, 17), (17, 17)]  # kept whole, each placed in what is left
    bullets = "- Rain fell in May.\n- Dragons ate the harvest.\n- The end came."
    cut = (
        CitedSentence("Rain fell in May.", (S1,), "cited", (2, 19)),
        CitedSentence("Dragons ate the harvest.", (), "unsupported", (22, 46)),
        CitedSentence("The end came.", (S2,), "cited", (49, 62)),
    )
    text, placed = without_unsupported(bullets, cut)
    assert text == "- Rain fell in May.\n- The end came."
    assert [text[a:b] for a, b in (s.at for s in placed)] == ["Rain fell in May.", "", "The end came."]

    doc = DocumentState("d", "report.pdf", DocumentStatus.SUMMARIZING, None, None)
    chunks = [
        ChunkState(0, ChunkStatus.COMPLETED, summary, None, LEFT),
        ChunkState(1, ChunkStatus.COMPLETED, "The river rose in June.", None, RIGHT),
    ]
    everything = decide_document(doc, chunks, TaskOptions())
    strict = decide_document(doc, chunks, TaskOptions(support="strict"))
    assert isinstance(everything, MergeChunks) and isinstance(strict, MergeChunks)
    assert everything.request is not None and everything.request.texts[0] == summary  # the default keeps them
    assert strict.request is not None and strict.request.texts == ("Rain fell in May.", "The river rose in June.")
    assert strict.cited[0] is not None and [s.at for s in strict.cited[0]] == [(0, 17), (17, 17)]


def test_the_cli_marks_an_unsupported_sentence() -> None:
    summary = "Rain fell in May. Dragons ate the harvest. Wolves sang."
    sentences = [
        {"text": "Rain fell in May.", "support": "cited", "at": [0, 17], "sources": [_place(3)]},
        {"text": "Dragons ate the harvest.", "support": "unsupported", "at": [18, 42], "sources": []},
        {"text": "Wolves sang.", "support": "unsupported", "at": [43, 55], "sources": [_place(5)]},
    ]
    assert printable(summary, sentences) == (
        "Rain fell in May.[1] Dragons ate the harvest.[unsupported] Wolves sang.[2, unsupported]\n\n"
        "[1] report.pdf, p. 3\n[2] report.pdf, p. 5 (unsupported)"
    )


def _place(page: int) -> dict[str, object]:
    return {"document_id": "d", "filename": "report.pdf", "unit": "page", "page": page, "last_page": page,
            "start": 0, "end": 9}  # fmt: skip


def test_support_is_asked_by_the_cli_the_form_and_intake_and_is_all_unless_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sent = recording_gateway(monkeypatch)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert cli.main(["summarize", "--no-wait", "--support", "strict", str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", str(doc)]) == 0
    assert sent[0]["support"] == "strict" and "support" not in sent[1]  # the default is the gateway's
    assert _form({"support": ["strict"]}).support == "strict" and _form({}).support == "all"
    with pytest.raises(RequestValidationError):
        _form({"support": ["some"]})
    message = {"task_id": "crm:1", "document_id": "crm:1:1", "owner": "crm", "filename": "a.txt", "task_documents": 1}
    strict = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"support": "strict"}}).encode())
    assert isinstance(strict, DocumentSubmitted) and strict.options is not None and strict.options.support == "strict"
    older = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"style": "bullets"}}).encode())
    assert isinstance(older, DocumentSubmitted) and older.options is not None and older.options.support == "all"
    assert TaskOptions.from_stored('{"strict": true}').support == "all"  # a task stored before it was asked
