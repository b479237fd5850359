"""The summarizer's decisions, pure functions of the event and the stored chunk."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from docsum_shared.options import TaskOptions
from docsum_shared.states import CHUNK_FINAL, DOCUMENT_FINAL, ChunkStatus, DocumentStatus, TaskStatus, takes_work
from docsum_shared.summarizers.base import SummaryKind, SummaryRequest

from .batches.policy import ChunkLine


@dataclass(frozen=True)
class StoredChunk:
    status: ChunkStatus
    text: str
    context_before: str
    context_after: str
    document_status: DocumentStatus
    task_status: TaskStatus
    options: TaskOptions = TaskOptions()
    failures: int = 0  # failed attempts so far, across rounds and re-drives
    owner: str = ""  # the task's owner: the result cache's scope
    line: ChunkLine | None = None  # its line in batch mode, once it has one


class Step(enum.Enum):
    SUMMARIZE = "summarize"  # claim the chunk and call the LLM
    REPORT = "report"  # final already: say so (again), the merger may still be waiting
    NOTHING = "nothing"  # the task or document no longer wants work (paused, cancelled, finished)


def next_step(chunk: StoredChunk) -> Step:
    if chunk.document_status in DOCUMENT_FINAL or not takes_work(chunk.task_status):
        return Step.NOTHING
    return Step.REPORT if chunk.status in CHUNK_FINAL else Step.SUMMARIZE


def request_for(chunk: StoredChunk) -> SummaryRequest:
    request = SummaryRequest(
        kind=SummaryKind.CHUNK,
        texts=(chunk.text,),
        context_before=chunk.context_before,
        context_after=chunk.context_after,
    )
    return request.asked(chunk.options)


def cannot_fit(budget: str, provider_said: str | None = None) -> str:
    said = f" The provider said: {provider_said}" if provider_said else ""
    return (
        f"this part of the document does not fit the model's context window ({budget}), not even in parts "
        f"of a few sentences. Use a model with a larger context window, or set DOCSUM_LLM_CONTEXT_TOKENS to "
        f"the window the model really has.{said}"
    )
