"""The services' decisions as pure functions: no broker, no database."""

from __future__ import annotations

import pytest

from docsum_chunker.policy import chunk_id, cut
from docsum_chunker.settings import ChunkerSettings
from docsum_llm.base import SummaryKind
from docsum_merger.policy import ChunkState, DocumentState, MergeChunks, decide_document, decide_task
from docsum_parser.policy import StoredDocument, StoreText, already_done, parse
from docsum_parser.settings import ParserSettings
from docsum_shared import errors
from docsum_shared.events import (
    EVENT_TYPES,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
    TaskEvent,
    Topic,
    decode,
)
from docsum_shared.handlers import Bound, Handlers
from docsum_shared.levels import SizeLevel
from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.policy import Step, StoredChunk, next_step
from tests.documents import english_prose

PARSER = ParserSettings(_env_file=None)
CHUNKER = ChunkerSettings(_env_file=None)


def _submitted(filename: str = "a.txt") -> DocumentSubmitted:
    return DocumentSubmitted(task_id="t", document_id="d", owner="o", filename=filename, blob_sha256="x", size_bytes=1)


def test_events_round_trip_and_reject_wrong_shapes() -> None:
    event = _submitted()
    assert decode(Topic.DOCUMENT_SUBMITTED, event.to_bytes()) == event
    assert event.key() == "d"
    with pytest.raises(ValueError):
        decode(Topic.DOCUMENT_SUBMITTED, b"\x00garbage")
    with pytest.raises(ValueError):
        decode(Topic.CHUNK_CREATED, b'{"task_id": "t", "document_id": "d"}')
    assert set(EVENT_TYPES) == set(Topic)


def test_parser_stores_text_and_announces_it() -> None:
    decision = parse(_submitted(), english_prose(10_000).encode(), PARSER)
    assert isinstance(decision.write, StoreText) and decision.write.size_level == "MEDIUM"
    [parsed] = decision.emit
    assert isinstance(parsed, DocumentParsed) and parsed.text_chars == len(decision.write.text)


def test_parser_fails_a_bad_file_with_its_reason() -> None:
    decision = parse(_submitted("empty.txt"), b"", PARSER)
    assert isinstance(decision.write, errors.Fail) and "empty" in decision.write.error
    [merged] = decision.emit
    assert isinstance(merged, DocumentMerged) and merged.outcome == "FAILED"


def test_parser_emits_again_what_followed_a_stored_parse() -> None:
    parsed = already_done(_submitted(), StoredDocument(DocumentStatus.SUMMARIZING, 42, SizeLevel.SMALL, None))
    assert parsed.write is None and isinstance(parsed.emit[0], DocumentParsed) and parsed.emit[0].text_chars == 42
    failed = already_done(_submitted(), StoredDocument(DocumentStatus.FAILED, None, None, "bad"))
    assert isinstance(failed.emit[0], DocumentMerged)


def test_chunker_ids_are_derived() -> None:
    rows = cut("doc", english_prose(30_000, seed=3), CHUNKER)
    assert isinstance(rows, list)
    assert [r.id for r in rows] == [chunk_id("doc", i) for i in range(len(rows))]
    assert rows == cut("doc", english_prose(30_000, seed=3), CHUNKER)


def _chunk(
    status: ChunkStatus, doc: DocumentStatus = DocumentStatus.SUMMARIZING, task: TaskStatus = TaskStatus.PROCESSING
) -> StoredChunk:
    return StoredChunk(status, "text", "", "", doc, task)


def test_summarizer_calls_only_for_unfinished_chunks_of_live_tasks() -> None:
    assert next_step(_chunk(ChunkStatus.PENDING)) is Step.SUMMARIZE
    assert next_step(_chunk(ChunkStatus.SUMMARIZING)) is Step.SUMMARIZE  # a crash mid-call: the chunk is redone
    assert next_step(_chunk(ChunkStatus.COMPLETED)) is Step.REPORT
    assert next_step(_chunk(ChunkStatus.PENDING, task=TaskStatus.CANCELLED)) is Step.NOTHING
    assert next_step(_chunk(ChunkStatus.PENDING, task=TaskStatus.PAUSED)) is Step.NOTHING
    assert next_step(_chunk(ChunkStatus.COMPLETED, doc=DocumentStatus.COMPLETED)) is Step.NOTHING


def _doc(status: DocumentStatus, summary: str | None = None, name: str = "a.txt") -> DocumentState:
    return DocumentState(name, name, status, summary, None)


def test_merger_waits_for_every_chunk_then_merges_in_order() -> None:
    doc = _doc(DocumentStatus.SUMMARIZING)
    chunks = [ChunkState(1, ChunkStatus.COMPLETED, "second", None), ChunkState(0, ChunkStatus.PENDING, None, None)]
    assert decide_document(doc, chunks) is None
    chunks[1] = ChunkState(0, ChunkStatus.COMPLETED, "first", None)
    decision = decide_document(doc, chunks)
    assert isinstance(decision, MergeChunks) and decision.request is not None
    assert decision.request.kind is SummaryKind.DOCUMENT and decision.request.texts == ("first", "second")
    assert decide_document(doc, chunks[1:]) == MergeChunks(None, "first", cited=(None,))


def test_merger_summarizes_what_it_can_and_says_what_is_missing() -> None:
    chunks = [
        ChunkState(0, ChunkStatus.COMPLETED, "s0", None),
        ChunkState(1, ChunkStatus.FAILED, None, "provider said no"),
        ChunkState(2, ChunkStatus.COMPLETED, "s2", None),
        ChunkState(3, ChunkStatus.COMPLETED, "s3", None),
    ]
    partial = decide_document(_doc(DocumentStatus.SUMMARIZING), chunks)
    assert isinstance(partial, MergeChunks) and partial.request is not None
    assert partial.request.texts == ("s0", "s2", "s3")
    assert partial.coverage == 0.75 and partial.failed_indexes == (1,)
    assert "75%" in partial.note() and "2" in partial.note()


def test_merger_fails_the_document_when_strict_or_nothing_was_summarized() -> None:
    chunks = [ChunkState(0, ChunkStatus.COMPLETED, "s", None), ChunkState(1, ChunkStatus.FAILED, None, "said no")]
    strict = decide_document(_doc(DocumentStatus.SUMMARIZING), chunks, TaskOptions(strict=True))
    assert isinstance(strict, errors.Fail) and "said no" in strict.error and "1 of 2" in strict.error
    nothing = decide_document(_doc(DocumentStatus.SUMMARIZING), [ChunkState(0, ChunkStatus.FAILED, None, "x")])
    assert isinstance(nothing, errors.Fail)


def test_options_reach_the_requests() -> None:
    docs = [_doc(DocumentStatus.COMPLETED, "x", "a"), _doc(DocumentStatus.COMPLETED, "y", "b")]
    finish = decide_task("t", docs, TaskOptions(language="French", length="brief", style="bullets"))
    assert finish is not None and finish.request is not None
    assert (finish.request.language, finish.request.length, finish.request.style) == ("French", "brief", "bullets")


def test_task_status_follows_its_documents() -> None:
    assert decide_task(None, [_doc(DocumentStatus.COMPLETED, "s"), _doc(DocumentStatus.PARSING)]) is None
    one_failed = decide_task(None, [_doc(DocumentStatus.COMPLETED, "s"), _doc(DocumentStatus.FAILED, name="b")])
    assert one_failed is not None and one_failed.status is TaskStatus.COMPLETED_WITH_ERRORS
    assert one_failed.request is None and one_failed.summary == "s"
    all_failed = decide_task(None, [_doc(DocumentStatus.FAILED)])
    assert all_failed is not None and all_failed.status is TaskStatus.FAILED
    both = decide_task("t", [_doc(DocumentStatus.COMPLETED, "x", "a"), _doc(DocumentStatus.COMPLETED, "y", "b")])
    assert both is not None and both.status is TaskStatus.COMPLETED
    assert both.request is not None and both.request.labels == ("a", "b") and both.request.kind is SummaryKind.TASK


def test_a_document_summarized_in_part_makes_the_task_complete_with_errors() -> None:
    partial = DocumentState("a", "a.txt", DocumentStatus.COMPLETED, "x", None, coverage=0.8)
    whole = DocumentState("b", "b.txt", DocumentStatus.COMPLETED, "y", None, coverage=1.0)
    decision = decide_task("t", [partial, whole])
    assert decision is not None and decision.status is TaskStatus.COMPLETED_WITH_ERRORS
    assert decision.error == "1 of 2 documents summarized in part" and decision.request is not None


def test_only_events_of_one_on_many_function_are_taken_together() -> None:
    registry = Handlers[None]()

    @registry.on_many(ChunkSummarized, DocumentMerged, emits=())
    async def many(events: list[Event], deps: None) -> list[Event]:
        return []

    @registry.on(TaskEvent, emits=())
    async def one(event: Event, deps: None) -> list[Event]:
        return []

    summarized = ChunkSummarized(task_id="t", document_id="d", chunk_id="c", chunk_index=0)
    merged = DocumentMerged(task_id="t", document_id="d", outcome=DocumentOutcome.COMPLETED)
    ended = TaskEvent(task_id="t", status=TaskStatus.COMPLETED)
    assert registry.together([summarized, merged, summarized, ended, summarized]) == 3
    assert registry.together([ended, summarized]) == 0  # `on`: one at a time
    assert registry.together([]) == 0
    assert Bound(registry, None).takes_many and not Bound(Handlers[None](), None).takes_many


async def test_a_handler_returning_an_event_it_does_not_declare_is_stopped() -> None:
    registry = Handlers[None]()

    @registry.on(DocumentMerged, emits=(TaskEvent,))
    async def finish(event: Event, deps: None) -> list[Event]:
        return [TaskEvent(task_id=event.task_id, status=TaskStatus.COMPLETED), event]

    merged = DocumentMerged(task_id="t", document_id="d", outcome=DocumentOutcome.COMPLETED)
    with pytest.raises(TypeError, match="returned DocumentMerged, which it does not declare"):
        await registry.handle(merged, None)
    assert registry.receives == (DocumentMerged,) and registry.emits(DocumentMerged) == (TaskEvent,)


async def test_a_registry_runs_only_in_the_consumer_group_it_declares() -> None:
    from docsum_shared.consumer import ConsumerService
    from docsum_shared.settings import Settings

    registry = Handlers[None]("merger")

    @registry.on(TaskEvent, emits=())
    async def one(event: Event, deps: None) -> list[Event]:
        return []

    with pytest.raises(ValueError, match="handlers of group 'merger' run in consumer group 'summarizer'"):
        ConsumerService("summarizer", Settings(), registry.bind(None))
    service = ConsumerService("merger", Settings(), registry.bind(None))
    await service.producer.stop()
