"""The summarizer's decisions, pure functions of the event and the stored chunk."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from docsum_llm.base import SummaryKind, SummaryRequest, SummaryResult
from docsum_llm.citations import chunk_sentences
from docsum_shared.cited import CitedSentence
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions
from docsum_shared.states import CHUNK_FINAL, DOCUMENT_FINAL, ChunkStatus, DocumentStatus, TaskStatus, takes_work

from .batches.policy import ChunkLine


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as the summarizer reads it: its text and context, its attempts, and whether its document
    and task still want it."""

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
    start_char: int = 0  # where the chunk's text starts in its document's text
    positions: Positions | None = None  # where the document's pages start, around the chunk (positions.window)
    # Its rank in the fair order (schedule.Rank, given at admission): the order its call waits for a slot
    # in (None: admitted first in, first out, or before ranks were given).
    rank: tuple[int, float] | None = None


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


@dataclass(frozen=True)
class Answer:
    """A chunk's summary as stored: the answers to its parts joined, and their sentences mapped to the
    document's text (None when a part's backend did not say where its sentences come from)."""

    text: str
    model: str
    truncated: bool
    sentences: tuple[CitedSentence, ...] | None
    # What its owner's share is charged for it, from the provider's usage (docsum_llm.shares.served_tokens; 0 for
    # an answer from the result cache, which cost nothing); None: not known, the estimate charged stands.
    served: int | None = None


def answer_of(
    parts: Sequence[tuple[SummaryResult, int]], document_id: str, chunk: StoredChunk, *, served: int | None = None
) -> Answer:
    """The chunk's answer from the answers to its parts, each given with where its text starts in the
    chunk's text (a chunk too long for one request is summarized in consecutive parts, joined by a line
    break)."""
    text = "\n".join(result.text for result, _ in parts)
    sentences: list[CitedSentence] | None = []
    shift = 0
    for result, offset in parts:
        if sentences is not None and (result.sentences or not result.text):
            mapped = chunk_sentences(result, document_id, chunk.start_char + offset, chunk.positions)
            sentences.extend(replace(s, at=(s.at[0] + shift, s.at[1] + shift)) for s in mapped)
        else:
            sentences = None
        shift += len(result.text) + 1
    first = parts[0][0]
    return Answer(
        text,
        first.model,
        any(r.truncated for r, _ in parts),
        None if sentences is None else tuple(sentences),
        served,
    )


def offsets_of(parts: Sequence[SummaryRequest], text: str) -> list[int]:
    """Where each part's text starts in the chunk's `text`: the parts are consecutive pieces of it."""
    out: list[int] = []
    cursor = 0
    for part in parts:
        found = text.find(part.texts[0], cursor)
        if found < 0:
            raise ValueError("a part of a chunk is not a piece of its text")
        out.append(found)
        cursor = found + len(part.texts[0])
    return out


def cannot_fit(budget: str, provider_said: str | None = None) -> str:
    said = f" The provider said: {provider_said}" if provider_said else ""
    return (
        f"this part of the document does not fit the model's context window ({budget}), not even in parts "
        f"of a few sentences. Use a model with a larger context window, or set DOCSUM_LLM_CONTEXT_TOKENS to "
        f"the window the model really has.{said}"
    )
