"""The merger's decisions, made from Postgres state alone (never from what this process remembers).

Document stage: when every chunk of a document is final, its chunk summaries become one document
summary. Task stage: when every document of a task is final, their summaries become the task summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from docsum_shared.states import CHUNK_FINAL, DOCUMENT_FINAL, ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.base import SummaryKind, SummaryRequest


@dataclass(frozen=True)
class ChunkState:
    index: int
    status: ChunkStatus
    summary: str | None
    error: str | None


@dataclass(frozen=True)
class DocumentState:
    id: str
    filename: str
    status: DocumentStatus
    summary: str | None
    error: str | None


# --- document stage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeChunks:
    request: SummaryRequest | None  # None: a single chunk, whose summary is the document's


@dataclass(frozen=True)
class FailDocument:
    error: str


def decide_document(doc: DocumentState, chunks: list[ChunkState]) -> MergeChunks | FailDocument | None:
    """What the document needs now; None while a chunk is unfinished (or when it has no chunk yet)."""
    if not chunks or any(c.status not in CHUNK_FINAL for c in chunks):
        return None
    failed = [c for c in chunks if c.status is ChunkStatus.FAILED]
    if failed:
        return FailDocument(
            f"{len(failed)} of {len(chunks)} parts could not be summarized "
            f"(part {failed[0].index + 1}: {failed[0].error or 'unknown error'})"
        )
    if len(chunks) == 1:
        return MergeChunks(None)
    ordered = sorted(chunks, key=lambda c: c.index)
    return MergeChunks(
        SummaryRequest(kind=SummaryKind.DOCUMENT, texts=tuple(c.summary or "" for c in ordered), title=doc.filename)
    )


# --- task stage -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinishTask:
    status: TaskStatus
    request: SummaryRequest | None  # None: no merge needed (one document, or none completed)
    summary: str | None  # the summary when no merge is needed
    error: str | None


def decide_task(title: str | None, docs: list[DocumentState]) -> FinishTask | None:
    """The task's final status and summary once every document is final; None until then."""
    if not docs or any(d.status not in DOCUMENT_FINAL for d in docs):
        return None
    completed = [d for d in docs if d.status is DocumentStatus.COMPLETED]
    failed = [d for d in docs if d.status is DocumentStatus.FAILED]
    if not completed:
        return FinishTask(TaskStatus.FAILED, None, None, f"all {len(docs)} documents failed")
    status = TaskStatus.COMPLETED_WITH_ERRORS if failed else TaskStatus.COMPLETED
    error = f"{len(failed)} of {len(docs)} documents failed" if failed else None
    if len(completed) == 1:
        return FinishTask(status, None, completed[0].summary, error)
    request = SummaryRequest(
        kind=SummaryKind.TASK,
        texts=tuple(d.summary or "" for d in completed),
        title=title or "",
        labels=tuple(d.filename for d in completed),
    )
    return FinishTask(status, request, None, error)
