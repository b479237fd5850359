"""The re-drive planner: from stored document and chunk states, the next event each unfinished piece needs."""

from __future__ import annotations

import pytest

from docsum_shared.events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
)
from docsum_shared.levels import SizeLevel
from docsum_shared.redrive import ChunkToRedrive, DocumentRow, plan
from docsum_shared.states import ChunkStatus, DocumentStatus

TASK, OWNER = "task-1", "alice"
_SUBMITTED_FIELDS = {"task_id", "document_id", "owner", "filename", "content_type", "blob_sha256", "size_bytes"}


def _doc(doc_id: str, status: DocumentStatus, **fields: object) -> DocumentRow:
    values: dict[str, object] = {
        "id": doc_id,
        "status": status,
        "filename": f"{doc_id}.txt",
        "content_type": "text/plain",
        "blob_sha256": f"sha-{doc_id}",
        "size_bytes": 1234,
        "text_chars": None,
        "size_level": None,
    }
    values.update(fields)
    return DocumentRow(**values)  # type: ignore[arg-type]


def _chunks(doc_id: str, *statuses: ChunkStatus) -> list[ChunkToRedrive]:
    return [ChunkToRedrive(f"{doc_id}-c{i:05d}", i, s) for i, s in enumerate(statuses)]


DocumentStep = DocumentSubmitted | DocumentParsed | ChunkCreated | ChunkSummarized | DocumentMerged


def _steps(events: list[Event]) -> list[DocumentStep]:
    """The planned events, each the next step of one document (all that a re-drive sends)."""
    steps = [e for e in events if isinstance(e, DocumentStep)]
    assert steps == events
    return steps


@pytest.mark.parametrize("status", [DocumentStatus.PENDING, DocumentStatus.PARSING])
def test_unparsed_document_is_submitted_again_with_its_blob(status: DocumentStatus) -> None:
    doc = _doc("d1", status, filename="report.pdf", content_type="application/pdf", size_bytes=4096)
    events = plan(TASK, OWNER, [doc], {})
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, DocumentSubmitted)
    assert event.model_dump(include=_SUBMITTED_FIELDS) == {
        "task_id": TASK,
        "document_id": "d1",
        "owner": OWNER,
        "filename": "report.pdf",
        "content_type": "application/pdf",
        "blob_sha256": "sha-d1",
        "size_bytes": 4096,
    }


def test_chunking_document_is_parsed_again_from_its_stored_text() -> None:
    doc = _doc("d1", DocumentStatus.CHUNKING, text_chars=9000, size_level=SizeLevel.MEDIUM)
    events = plan(TASK, OWNER, [doc], {})
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, DocumentParsed)
    assert (event.task_id, event.document_id, event.text_chars) == (TASK, "d1", 9000)
    assert event.size_level is SizeLevel.MEDIUM


def test_chunking_document_without_a_stored_level_gets_one_from_its_length() -> None:
    events = plan(TASK, OWNER, [_doc("d1", DocumentStatus.CHUNKING, text_chars=200_000)], {})
    assert len(events) == 1
    assert isinstance(events[0], DocumentParsed) and events[0].size_level is SizeLevel.LARGE


def test_redriven_events_are_root_events() -> None:
    docs = [_doc("a", DocumentStatus.PENDING), _doc("b", DocumentStatus.CHUNKING, text_chars=5)]
    events = plan(TASK, OWNER, docs, {})
    assert len(events) == 2
    assert all(e.causation_id is None and e.trace_id for e in events)


def test_unfinished_chunks_are_announced_again_and_finished_ones_are_not() -> None:
    chunks = _chunks(
        "d1",
        ChunkStatus.COMPLETED,
        ChunkStatus.PENDING,
        ChunkStatus.FAILED,
        ChunkStatus.SUMMARIZING,
        ChunkStatus.COMPLETED,
    )
    events = plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {"d1": chunks})
    created = [e for e in events if isinstance(e, ChunkCreated)]
    assert created == events
    assert [(e.chunk_id, e.chunk_index) for e in created] == [("d1-c00001", 1), ("d1-c00003", 3)]
    assert {(e.task_id, e.document_id) for e in created} == {(TASK, "d1")}


def test_document_whose_chunks_are_all_final_gets_one_chunk_summarized() -> None:
    chunks = _chunks("d1", ChunkStatus.COMPLETED, ChunkStatus.FAILED, ChunkStatus.COMPLETED)
    events = plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {"d1": chunks})
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ChunkSummarized)
    assert (event.task_id, event.document_id, event.chunk_id, event.chunk_index) == (TASK, "d1", "d1-c00002", 2)


def test_summarizing_document_without_chunk_rows_gets_nothing() -> None:
    assert plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {}) == []


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        ((DocumentStatus.COMPLETED,), DocumentOutcome.COMPLETED),
        ((DocumentStatus.FAILED, DocumentStatus.COMPLETED), DocumentOutcome.COMPLETED),
        ((DocumentStatus.COMPLETED, DocumentStatus.FAILED), DocumentOutcome.FAILED),
        ((DocumentStatus.COMPLETED, DocumentStatus.CANCELLED), DocumentOutcome.FAILED),
    ],
)
def test_all_documents_final_gets_one_document_merged(
    statuses: tuple[DocumentStatus, ...], outcome: DocumentOutcome
) -> None:
    docs = [_doc(f"d{i}", s) for i, s in enumerate(statuses)]
    events = plan(TASK, OWNER, docs, {})
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, DocumentMerged)
    assert (event.task_id, event.document_id, event.outcome) == (TASK, docs[-1].id, outcome)


@pytest.mark.parametrize("status", [DocumentStatus.COMPLETED, DocumentStatus.FAILED, DocumentStatus.CANCELLED])
def test_final_documents_beside_unfinished_ones_get_nothing(status: DocumentStatus) -> None:
    docs = [_doc("done", status), _doc("todo", DocumentStatus.PENDING)]
    events = _steps(plan(TASK, OWNER, docs, {"done": _chunks("done", ChunkStatus.PENDING)}))
    assert [(type(e), e.document_id) for e in events] == [(DocumentSubmitted, "todo")]


def test_mixed_task_moves_every_unfinished_document_one_step() -> None:
    docs = [
        _doc("a", DocumentStatus.PENDING),
        _doc("b", DocumentStatus.CHUNKING, text_chars=100, size_level=SizeLevel.SMALL),
        _doc("c", DocumentStatus.SUMMARIZING),
        _doc("d", DocumentStatus.SUMMARIZING),
        _doc("e", DocumentStatus.COMPLETED),
        _doc("f", DocumentStatus.CANCELLED),
    ]
    chunks = {
        "c": _chunks("c", ChunkStatus.COMPLETED, ChunkStatus.PENDING),
        "d": _chunks("d", ChunkStatus.COMPLETED, ChunkStatus.COMPLETED),
        "e": _chunks("e", ChunkStatus.COMPLETED),
    }
    events = _steps(plan(TASK, OWNER, docs, chunks))
    assert [(type(e).__name__, e.document_id) for e in events] == [
        ("DocumentSubmitted", "a"),
        ("DocumentParsed", "b"),
        ("ChunkCreated", "c"),
        ("ChunkSummarized", "d"),
    ]
    assert all(e.task_id == TASK for e in events)


def test_no_documents_no_events() -> None:
    assert plan(TASK, OWNER, [], {}) == []
