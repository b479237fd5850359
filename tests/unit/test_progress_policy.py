"""The progress log's policy: which entries an event adds, in which order, under which keys; and the
recorder's handler that appends them (on the repository's fake)."""

from __future__ import annotations

from datetime import UTC, datetime

from docsum_gateway.progress.recorder.handlers import Deps, Known, record
from docsum_gateway.progress.recorder.policy import (
    LoggedChunk,
    document_percent,
    entries_for,
    keys_at_most,
    task_percent,
)
from docsum_shared.events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    TaskEvent,
)
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel.schemas import (
    BatchProgress,
    ChunkProgress,
    DocumentView,
    Estimate,
    Recovery,
    TaskView,
    Usage,
)
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from tests.fakes.recorder import FakeDocument, FakeProgressLog, FakeTask

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _doc(doc_id: str, status: str = "SUMMARIZING", done: int = 0, total: int | None = 4) -> DocumentView:
    return DocumentView(
        document_id=doc_id, filename=f"{doc_id}.txt", status=status, size_level="MEDIUM", text_chars=9000,
        chunks=ChunkProgress(done=done, failed=0, total=total), summary=None, summary_model=None, error=None,
        coverage=None, failed_chunks=[], usage=Usage(),
    )  # fmt: skip


def _view(*docs: DocumentView, status: str = "PROCESSING", redrives: int = 0) -> TaskView:
    return TaskView(
        task_id="t1", title=None, status=status, created_at=T0, updated_at=T0, summary=None, summary_model=None,
        error=None, options=TaskOptions(), usage=Usage(llm_calls=3, cost_usd=0.5),
        estimate=Estimate(remaining_chunks=2, prompt_tokens=10, cost_usd=0.1, eta_s=4.0),
        recovery=Recovery(redrives=redrives), documents=list(docs),
    )  # fmt: skip


def test_an_event_brings_the_milestones_before_it_in_order() -> None:
    view = _view(_doc("d1", done=1))
    event = ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0)
    entries = entries_for(event, view, [LoggedChunk("c1", "d1", 0, "COMPLETED")])
    assert [e.kind for e in entries] == [
        "task-started", "document-started", "document-parsed", "chunks-created", "chunk-summarized",
    ]  # fmt: skip
    assert entries[-1].key == "chunk:c1:COMPLETED" and entries[-1].body["chunk_index"] == 0
    assert entries[-1].body["percent"] == round(10 + 85 * 1 / 4, 1) and entries[-1].body["eta_s"] == 4.0
    assert entries[-1].body["usage"]["cost_usd"] == 0.5
    # The same event again gives the same keys: the store keeps one entry per key.
    again = entries_for(event, view, [LoggedChunk("c1", "d1", 0, "COMPLETED")])
    assert [e.key for e in again] == [e.key for e in entries]


def test_a_chunk_reset_by_a_retry_is_not_told_ended_and_a_later_end_is_a_new_entry() -> None:
    event = ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0)
    pending = entries_for(event, _view(_doc("d1")), [LoggedChunk("c1", "d1", 0, "PENDING")])
    assert "chunk-summarized" not in [e.kind for e in pending]
    failed = entries_for(event, _view(_doc("d1")), [LoggedChunk("c1", "d1", 0, "FAILED")])[-1]
    completed = entries_for(event, _view(_doc("d1")), [LoggedChunk("c1", "d1", 0, "COMPLETED")])[-1]
    assert (failed.kind, completed.kind) == ("chunk-failed", "chunk-summarized") and failed.key != completed.key


def test_the_task_end_comes_after_every_end_it_implies() -> None:
    view = _view(_doc("d1", "COMPLETED", 2, 2), _doc("d2", "FAILED", 0, None), status="COMPLETED_WITH_ERRORS")
    chunks = [LoggedChunk("c2", "d1", 1, "COMPLETED"), LoggedChunk("c1", "d1", 0, "COMPLETED")]
    kinds = [
        e.kind for e in entries_for(TaskEvent(task_id="t1", status=TaskStatus.COMPLETED_WITH_ERRORS), view, chunks)
    ]
    assert kinds[-1] == "task-done" and kinds.index("document-done") < kinds.index("task-done")
    assert kinds.count("chunk-summarized") == 2 and "document-failed" in kinds
    # A retry ends the task again: a new entry, told apart by the re-drive count.
    again = entries_for(TaskEvent(task_id="t1", status=TaskStatus.COMPLETED), _view(status="COMPLETED", redrives=1))
    first = entries_for(TaskEvent(task_id="t1", status=TaskStatus.COMPLETED), _view(status="COMPLETED"))
    assert again[-1].key != first[-1].key and again[-1].body["percent"] == 100.0


def test_each_pause_and_resume_is_its_own_entry() -> None:
    view = _view(_doc("d1"))
    pauses = [TaskEvent(task_id="t1", status=TaskStatus.PAUSED) for _ in range(2)]
    keys = {entries_for(p, view)[-1].key for p in pauses}
    assert len(keys) == 2
    resumed = entries_for(TaskEvent(task_id="t1", status=TaskStatus.PROCESSING, detail={"action": "resume"}), view)
    retried = entries_for(TaskEvent(task_id="t1", status=TaskStatus.PROCESSING, detail={"action": "retry"}), view)
    assert (resumed[-1].kind, retried[-1].kind) == ("resumed", "retried")
    assert entries_for(pauses[0], view)[-1].body["status"] == "PAUSED"


def _batch(done: int, state: str = "waiting") -> BatchProgress:
    return BatchProgress(
        lines=10, done=done, waiting=10 - done, sent_back=0, dropped=0, batches=1, submitted_at=T0,
        deadline=None, state=state,
    )  # fmt: skip


def test_each_move_of_a_tasks_batch_is_its_own_entry_carrying_the_batch() -> None:
    moved = TaskEvent(task_id="t1", status=TaskStatus.PROCESSING, detail={"batch": "3 of 10 lines done"})
    first = entries_for(moved, _view(_doc("d1")).model_copy(update={"batch": _batch(3)}))[-1]
    same = entries_for(moved, _view(_doc("d1")).model_copy(update={"batch": _batch(3)}))[-1]
    later = entries_for(moved, _view(_doc("d1")).model_copy(update={"batch": _batch(7)}))[-1]
    assert first.kind == later.kind == "batch-moved" and first.key == same.key != later.key
    assert first.body["batch"]["done"] == 3 and later.body["batch"]["done"] == 7
    assert first.body["status"] == "PROCESSING"
    # A task without batch lines (a replayed event, say) tells nothing of a batch, and no resume either.
    assert [e.kind for e in entries_for(moved, _view(_doc("d1")))] == ["task-started"]


def test_each_page_being_read_is_its_own_entry_while_its_document_is_read() -> None:
    def read(page: int) -> TaskEvent:
        note = {"document_id": "d1", "note": f"reading page {page} of 9 (OCR)"}
        return TaskEvent(task_id="t1", status=TaskStatus.PROCESSING, detail={"reading": note})

    reading = _doc("d1", status="PARSING", total=None).model_copy(update={"text_chars": None, "reading": "x"})
    *_, first = entries_for(read(3), _view(reading))
    *_, later = entries_for(read(4), _view(reading))
    assert first.kind == later.kind == "document-reading" and first.key != later.key
    assert first.body["reading"] == "reading page 3 of 9 (OCR)" and first.body["document_id"] == "d1"
    # Told after the text was stored (nothing is being read any more): nothing new, and no resume either.
    kinds = [e.kind for e in entries_for(read(9), _view(_doc("d1")))]
    assert "document-reading" not in kinds and "resumed" not in kinds


def test_a_document_end_that_no_longer_holds_adds_nothing() -> None:
    merged = DocumentMerged(task_id="t1", document_id="d1", outcome=DocumentOutcome.FAILED)
    kinds = [e.kind for e in entries_for(merged, _view(_doc("d1", "SUMMARIZING")))]  # retried since
    assert "document-failed" not in kinds and "document-done" not in kinds


def test_percent() -> None:
    assert document_percent(_doc("d", "PARSING", total=None).model_copy(update={"text_chars": None})) == 0.0
    assert document_percent(_doc("d", "CHUNKING", total=None)) == 5.0
    assert document_percent(_doc("d", done=4)) == 95.0 and document_percent(_doc("d", "COMPLETED")) == 100.0
    assert task_percent(_view(_doc("a", "COMPLETED"), _doc("b", done=4))) == 97.5
    assert task_percent(_view(_doc("a", "COMPLETED"), status="COMPLETED")) == 100.0
    assert task_percent(_view(_doc("a", "COMPLETED"))) == 99.0  # 100 only once the task is final
    submitted = DocumentSubmitted(
        task_id="t1", document_id="d9", owner="o", filename="x", blob_sha256="0" * 64, size_bytes=1
    )
    assert [e.kind for e in entries_for(submitted, _view(_doc("d1")))] == ["task-started"]  # unknown document


def test_the_keys_an_event_can_tell_cover_every_entry_it_gives_in_any_state() -> None:
    # The recorder skips an event whose keys_at_most are all stored: a key missing there would be an
    # entry never written. Every state a document passes through, every status its chunk can have.
    states = [_doc("d1", "PENDING", 0, None), _doc("d1", "PARSING", 0, None), _doc("d1", "SUMMARIZING", 1, 4),
              _doc("d1", "MERGING", 4, 4), _doc("d1", "COMPLETED", 4, 4), _doc("d1", "FAILED", 0, None)]  # fmt: skip
    events = [
        DocumentSubmitted(
            task_id="t1", document_id="d1", owner="o", filename="d1.txt", content_base64="aGk=", task_documents=1
        ),
        DocumentParsed(task_id="t1", document_id="d1", text_chars=9000, size_level="MEDIUM"),
        ChunkCreated(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0),
        ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0),
    ]
    for doc in states:
        for event in events:
            for status in ("PENDING", "SUMMARIZING", "COMPLETED", "FAILED"):
                told = keys_at_most(event, status)
                assert told is not None
                given = {e.key for e in entries_for(event, _view(doc), [LoggedChunk("c1", "d1", 0, status)])}
                assert given <= set(told), (doc.status, type(event).__name__, status, given - set(told))
    # What depends on more than the event and its chunk is not guessed.
    assert keys_at_most(ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0)) is None
    assert keys_at_most(TaskEvent(task_id="t1", status=TaskStatus.COMPLETED)) is None
    assert keys_at_most(DocumentMerged(task_id="t1", document_id="d1", outcome=DocumentOutcome.COMPLETED)) is None


def test_known_keys_cover_an_event_only_when_every_key_is_known_and_stay_bounded() -> None:
    known = Known(most=3)
    assert not known.cover("t", ["task"]) and not known.cover("t", None)  # None: not known without reading
    known.add("t", ["task", "started:d"])
    assert known.cover("t", ["task", "started:d"]) and known.cover("t", [])
    assert not known.cover("t", ["task", "parsed:d"]) and not known.cover("other", ["task"])  # per task
    known.add("t", ["parsed:d", "chunks:d"])  # a fourth key: the oldest goes
    assert not known.cover("t", ["task"]) and known.cover("t", ["started:d", "parsed:d", "chunks:d"])


def _recorded() -> tuple[FakeProgressLog, Deps]:
    log = FakeProgressLog()
    log.tasks["t1"] = FakeTask(TaskStatus.PROCESSING, T0)
    log.documents["d1"] = FakeDocument("t1", 0, "d1.txt", DocumentStatus.SUMMARIZING)
    log.chunks["c1"] = LoggedChunk("c1", "d1", 0, ChunkStatus.COMPLETED)
    log.chunks["c2"] = LoggedChunk("c2", "d1", 1, ChunkStatus.SUMMARIZING)
    return log, Deps(log)


async def test_the_handler_appends_what_the_policy_decides_once_per_step() -> None:
    log, deps = _recorded()
    ended = ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0)
    assert await record([ended], deps) == []
    assert [(r.seq, r.key) for r in log.log["t1"]] == [
        (1, "task"), (2, "started:d1"), (3, "parsed:d1"), (4, "chunks:d1"), (5, "chunk:c1:COMPLETED"),
    ]  # fmt: skip
    await record([ended], Deps(log))  # redelivered to another replica (nothing known): nothing new
    log.chunks["c2"] = LoggedChunk("c2", "d1", 1, ChunkStatus.FAILED)
    await record([ended, ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c2", chunk_index=1)], deps)
    assert [r.key for r in log.log["t1"]][5:] == ["chunk:c2:FAILED"]


async def test_the_handler_tells_nothing_of_a_task_not_stored_and_of_a_chunk_not_ended() -> None:
    log, deps = _recorded()
    await record([ChunkCreated(task_id="t9", document_id="d9", chunk_id="c9", chunk_index=0)], deps)
    await record([ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c2", chunk_index=1)], deps)
    assert "t9" not in log.log and "chunk:c2:SUMMARIZING" not in [r.key for r in log.log["t1"]]
