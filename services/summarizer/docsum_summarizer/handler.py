"""The summarizer's decision: which chunks need an LLM call, and the request that summarizes one."""

from __future__ import annotations

from dataclasses import dataclass

from docsum_shared.events import ChunkCreated, ChunkSummarized
from docsum_shared.states import DOCUMENT_FINAL, TASK_FINAL, ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.base import SummaryKind, SummaryRequest


@dataclass(frozen=True)
class StoredChunk:
    status: ChunkStatus
    text: str
    context_before: str
    context_after: str
    document_status: DocumentStatus
    task_status: TaskStatus


def needs_summary(chunk: StoredChunk) -> bool:
    return (
        chunk.status in (ChunkStatus.PENDING, ChunkStatus.SUMMARIZING)
        and chunk.document_status not in DOCUMENT_FINAL
        and chunk.task_status not in TASK_FINAL
    )


def should_report(chunk: StoredChunk) -> bool:
    """A finished chunk is reported (again) while its document still waits for the merger."""
    return chunk.document_status not in DOCUMENT_FINAL and chunk.task_status not in TASK_FINAL


def request_for(chunk: StoredChunk) -> SummaryRequest:
    return SummaryRequest(
        kind=SummaryKind.CHUNK,
        texts=(chunk.text,),
        context_before=chunk.context_before,
        context_after=chunk.context_after,
    )


def report(event: ChunkCreated) -> ChunkSummarized:
    return ChunkSummarized(
        task_id=event.task_id,
        document_id=event.document_id,
        chunk_id=event.chunk_id,
        chunk_index=event.chunk_index,
    )
