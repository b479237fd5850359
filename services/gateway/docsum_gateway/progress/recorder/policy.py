"""What a pipeline event adds to its task's progress log: pure functions of (event, stored state).

Each entry names the step it tells of (`key`): the store keeps one entry per key and task, so a
redelivered, replayed or re-driven event adds nothing. The log never tells a step before the steps it
follows: the events of a task arrive from several topics and partitions in any order, so an event
brings along the earlier milestones the stored state shows (the task started, its document started,
parsed, cut), and a document's or the task's end brings the chunk and document ends it implies. Each
entry carries the task's progress as the stored state shows it when the entry is written: percent
done (the task and, for the documents it changed, each document's), ETA, usage and the estimate of
what is left (`compact`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from docsum_shared.events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
    TaskEvent,
)
from docsum_shared.readmodel.schemas import DocumentView, TaskView
from docsum_shared.states import DOCUMENT_FINAL, TASK_FINAL, ChunkStatus, DocumentStatus, TaskStatus

# Kinds of entries, in the order a task's story is told.
TASK_STARTED = "task-started"
DOCUMENT_STARTED = "document-started"
DOCUMENT_PARSED = "document-parsed"
CHUNKS_CREATED = "chunks-created"
CHUNK_SUMMARIZED = "chunk-summarized"
CHUNK_FAILED = "chunk-failed"
DOCUMENT_DONE = "document-done"
DOCUMENT_FAILED = "document-failed"
TASK_DONE = "task-done"
PAUSED = "paused"
AWAITING_APPROVAL = "awaiting-approval"
RESUMED = "resumed"
RETRIED = "retried"
CANCELLED = "cancelled"
EXPIRED = "expired"
BATCH_MOVED = "batch-moved"  # the provider's batch of the task moved on (batch mode)
DOCUMENT_READING = "document-reading"  # a page of a document is being read ("reading page 4 of 9 (OCR)")
# After one of these the task is final: a stream ends with it (unless a retry revives the task).
TERMINAL_KINDS = frozenset({TASK_DONE, CANCELLED, EXPIRED})

# Share of a document's bar for reading and cutting it, and for merging its chunk summaries.
PARSE_SHARE, MERGE_SHARE = 0.10, 0.05


@dataclass(frozen=True)
class LoggedChunk:
    """A stored chunk as the log tells of it: its document, its place there, and how it stands."""

    chunk_id: str
    document_id: str
    chunk_index: int
    status: str


@dataclass(frozen=True)
class Entry:
    kind: str
    key: str  # the step it tells of: unique per task
    body: dict[str, Any]


def document_percent(doc: DocumentView) -> float:
    """0-100 for one document: reading and cutting 10%, its chunks 85%, merging the last 5%."""
    if doc.status in DOCUMENT_FINAL:
        return 100.0
    total = doc.chunks.total
    if not total:
        return PARSE_SHARE * 50 if doc.text_chars is not None else 0.0
    done = min(total, doc.chunks.done + doc.chunks.failed)
    return round(100 * (PARSE_SHARE + (1 - PARSE_SHARE - MERGE_SHARE) * done / total), 1)


def task_percent(view: TaskView) -> float:
    """0-100 for the task: its documents' mean, 100 only once the task is final."""
    if view.status in TASK_FINAL:
        return 100.0
    if not view.documents:
        return 0.0
    mean = sum(document_percent(d) for d in view.documents) / len(view.documents)
    return round(min(99.0, mean), 1)


def progress(view: TaskView) -> dict[str, Any]:
    """The progress part every entry carries."""
    return {
        "status": view.status,
        "percent": task_percent(view),
        "eta_s": view.estimate.eta_s,
        "usage": view.usage.model_dump(),
        "estimate": view.estimate.model_dump(),
        "batch": view.batch.model_dump(mode="json") if view.batch else None,
        "documents": [
            {
                "document_id": d.document_id,
                "status": d.status,
                "percent": document_percent(d),
                "chunks": d.chunks.model_dump(),
            }
            for d in view.documents
        ],
    }


def entries_for(
    event: Event, view: TaskView, chunks: Sequence[LoggedChunk] = (), shown: dict[str, Any] | None = None
) -> list[Entry]:
    """The entries `event` adds, milestones it implies first. `chunks`: the stored chunks the event
    concerns (its chunk; a merged document's chunks; every chunk of a task that ended). `shown`:
    `progress(view)`, when the caller tells several events of one view."""
    shown = progress(view) if shown is None else shown
    docs = {d.document_id: d for d in view.documents}
    out: list[Entry] = [_entry(TASK_STARTED, "task", shown)]

    def document(document_id: str) -> DocumentView | None:
        doc = docs.get(document_id)
        if doc is not None:
            out.extend(_milestones(doc, shown))
        return doc

    if isinstance(event, DocumentSubmitted | DocumentParsed | ChunkCreated):
        document(event.document_id)
    elif isinstance(event, ChunkSummarized):
        if document(event.document_id) is not None:
            out.extend(_chunk_ends(chunks, shown, only=event.chunk_id))
    elif isinstance(event, DocumentMerged):
        doc = document(event.document_id)
        if doc is not None:
            out.extend(_chunk_ends(chunks, shown))
            outcome = doc.status if doc.status in DOCUMENT_FINAL else str(event.outcome)
            out.extend(_document_end(doc, outcome, shown))
    elif isinstance(event, TaskEvent):
        out.extend(_task_event(event, view, chunks, shown, document))
    return out


def keys_at_most(event: Event, chunk_status: str | None = None) -> list[str] | None:
    """Every key `entries_for(event, …)` can give, whatever the stored state (for a chunk-summarized, given
    its chunk's stored status); None when that is not known without reading the state. When all of
    them are stored, the event adds nothing: its view need not be read (most chunk-created events)."""
    if isinstance(event, DocumentSubmitted | DocumentParsed | ChunkCreated | ChunkSummarized):
        doc = event.document_id
        keys = ["task", f"started:{doc}", f"parsed:{doc}", f"chunks:{doc}"]
        if isinstance(event, ChunkSummarized):
            if chunk_status not in (ChunkStatus.COMPLETED, ChunkStatus.FAILED):
                return None if chunk_status is None else keys
            keys.append(f"chunk:{event.chunk_id}:{chunk_status}")
        return keys
    return None


def keys_possible(event: Event) -> list[list[str]]:
    """`keys_at_most(event, status)` for every status its chunk can end in (one list for other events;
    none where that is not known without reading the state)."""
    if isinstance(event, ChunkSummarized):
        return [keys for status in (ChunkStatus.COMPLETED, ChunkStatus.FAILED) if (keys := keys_at_most(event, status))]
    keys = keys_at_most(event)
    return [keys] if keys is not None else []


# What an entry tells of a document: a client keeps the latest it was told of each.
TOLD_FIELDS = ("status", "percent", "chunks")


def compact(bodies: Sequence[dict[str, Any]], told: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The bodies with, in `documents`, only the documents whose state differs from what the log told
    before (`told`: document id -> its last told state); and what the log has told after them.

    An entry's size then follows what changed, not the task's size: a chunk summarized tells one
    document, not a hundred. The snapshot plus the entries after its `progress_seq` still give the
    whole picture: every document's state is in the snapshot, and every change after it in an entry."""
    told = dict(told)
    out = []
    for body in bodies:
        changed = []
        for doc in body.get("documents", ()):
            state = {name: doc[name] for name in TOLD_FIELDS}
            if told.get(doc["document_id"]) != state:
                told[doc["document_id"]] = state
                changed.append(doc)
        out.append({**body, "documents": changed})
    return out, told


def _task_event(
    event: TaskEvent, view: TaskView, chunks: Sequence[LoggedChunk], shown: dict[str, Any], document: Any
) -> list[Entry]:
    status = event.status
    told = {**shown, "status": str(status)}
    if status == TaskStatus.PAUSED:
        return [_entry(PAUSED, f"paused:{event.event_id}", told)]
    if status == TaskStatus.AWAITING_APPROVAL:
        return [_entry(AWAITING_APPROVAL, f"held:{view.recovery.redrives}", told, reason=event.detail.get("reason"))]
    if status == TaskStatus.PROCESSING and "batch" in event.detail:
        if view.batch is None:
            return []
        b = view.batch  # one entry per state of the batch the log has not told yet
        return [_entry(BATCH_MOVED, f"batch:{b.state}:{b.done}:{b.waiting}:{b.sent_back}:{b.batches}", shown)]
    if status == TaskStatus.PROCESSING and "reading" in event.detail:
        return _reading(event.detail["reading"], shown, document)
    if status == TaskStatus.PROCESSING:
        kind = RETRIED if event.detail.get("action") == "retry" else RESUMED
        return [_entry(kind, f"{kind}:{event.event_id}", told)]
    if status not in TASK_FINAL:
        return []
    ends: list[Entry] = []
    for doc in view.documents:  # every step the end implies, before the end
        document(doc.document_id)
        ends.extend(_chunk_ends([c for c in chunks if c.document_id == doc.document_id], shown))
        ends.extend(_document_end(doc, doc.status, shown))
    if status == TaskStatus.CANCELLED:
        return [*ends, _entry(CANCELLED, "cancelled", told)]
    if status == TaskStatus.EXPIRED:
        return [*ends, _entry(EXPIRED, "expired", told)]
    # A retry ends the task again: the re-drive count tells that end from the previous one.
    return [*ends, _entry(TASK_DONE, f"done:{status}:{view.recovery.redrives}", told, error=view.error)]


def _reading(reading: Any, shown: dict[str, Any], document: Any) -> list[Entry]:
    """The page being read, while its document is still read: a note that comes after the text was stored
    (its view says nothing is being read) tells nothing new."""
    if not isinstance(reading, dict) or not isinstance(note := reading.get("note"), str):
        return []
    doc = document(str(reading.get("document_id")))
    if doc is None or doc.reading is None:
        return []
    return [_entry(DOCUMENT_READING, f"reading:{doc.document_id}:{note}", shown, doc=doc, reading=note)]


def _milestones(doc: DocumentView, shown: dict[str, Any]) -> list[Entry]:
    found = [_entry(DOCUMENT_STARTED, f"started:{doc.document_id}", shown, doc=doc)]
    if doc.text_chars is not None or doc.chunks.total is not None:
        found.append(_entry(DOCUMENT_PARSED, f"parsed:{doc.document_id}", shown, doc=doc, text_chars=doc.text_chars))
    if doc.chunks.total is not None:
        found.append(_entry(CHUNKS_CREATED, f"chunks:{doc.document_id}", shown, doc=doc, chunk_total=doc.chunks.total))
    return found


def _chunk_ends(chunks: Iterable[LoggedChunk], shown: dict[str, Any], only: str | None = None) -> list[Entry]:
    found = []
    for chunk in sorted(chunks, key=lambda c: (c.document_id, c.chunk_index)):
        if only is not None and chunk.chunk_id != only:
            continue
        if chunk.status not in (ChunkStatus.COMPLETED, ChunkStatus.FAILED):
            continue  # a chunk-summarized whose chunk was reset since (a retry): its end comes again
        kind = CHUNK_SUMMARIZED if chunk.status == ChunkStatus.COMPLETED else CHUNK_FAILED
        found.append(
            Entry(
                kind,
                f"chunk:{chunk.chunk_id}:{chunk.status}",
                {**shown, "kind": kind, "document_id": chunk.document_id, "chunk_index": chunk.chunk_index},
            )
        )
    return found


def _document_end(doc: DocumentView, outcome: str, shown: dict[str, Any]) -> list[Entry]:
    if outcome == DocumentOutcome.COMPLETED and doc.status == DocumentStatus.COMPLETED:
        return [_entry(DOCUMENT_DONE, f"doc:{doc.document_id}:COMPLETED", shown, doc=doc)]
    if outcome == DocumentOutcome.FAILED and doc.status == DocumentStatus.FAILED:
        return [_entry(DOCUMENT_FAILED, f"doc:{doc.document_id}:FAILED", shown, doc=doc, error=doc.error)]
    return []  # not (or no longer) what the event says: a retry made it pending again, or it was cancelled


def _entry(kind: str, key: str, shown: dict[str, Any], doc: DocumentView | None = None, **extra: Any) -> Entry:
    body: dict[str, Any] = {**shown, "kind": kind}
    if doc is not None:
        body["document_id"] = doc.document_id
        body["filename"] = doc.filename
    body.update({k: v for k, v in extra.items() if v is not None})
    return Entry(kind, key, body)
