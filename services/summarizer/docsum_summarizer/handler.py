"""The summarizer's decisions: which chunks need an LLM call, the request for one, how long to wait."""

from __future__ import annotations

from dataclasses import dataclass

from docsum_shared.events import ChunkCreated, ChunkSummarized
from docsum_shared.options import TaskOptions
from docsum_shared.states import CHUNK_FINAL, DOCUMENT_FINAL, TASK_FINAL, ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.base import RetriableLLMError, SummaryKind, SummaryRequest


@dataclass(frozen=True)
class StoredChunk:
    status: ChunkStatus
    text: str
    context_before: str
    context_after: str
    document_status: DocumentStatus
    task_status: TaskStatus
    options: TaskOptions = TaskOptions()


def is_live(chunk: StoredChunk) -> bool:
    """The chunk's task still wants work done (not finished, paused, cancelled or expired)."""
    return (
        chunk.document_status not in DOCUMENT_FINAL
        and chunk.task_status not in TASK_FINAL
        and chunk.task_status is not TaskStatus.PAUSED
    )


def needs_summary(chunk: StoredChunk) -> bool:
    return chunk.status not in CHUNK_FINAL and is_live(chunk)


def should_report(chunk: StoredChunk) -> bool:
    """A finished chunk is reported (again) while its document still waits for the merger."""
    return chunk.status in CHUNK_FINAL and is_live(chunk)


def request_for(chunk: StoredChunk) -> SummaryRequest:
    request = SummaryRequest(
        kind=SummaryKind.CHUNK,
        texts=(chunk.text,),
        context_before=chunk.context_before,
        context_after=chunk.context_after,
    )
    return chunk.options.apply(request)


def report(event: ChunkCreated) -> ChunkSummarized:
    return ChunkSummarized(
        task_id=event.task_id,
        document_id=event.document_id,
        chunk_id=event.chunk_id,
        chunk_index=event.chunk_index,
    )


def backoff_s(error: RetriableLLMError, failures: int, *, cap_s: float = 60.0) -> float:
    """The provider's Retry-After when it gave one, else exponential back-off from 1 s."""
    if error.retry_after is not None:
        return min(cap_s, error.retry_after)
    return min(cap_s, 2.0 ** max(0, failures - 1))
