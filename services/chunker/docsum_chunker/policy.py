"""The chunker's decisions: cut a parsed document into chunk rows (the summarizer's admission announces them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from docsum_shared.approval import EXPECTED_COMPLETION_TOKENS, Approved, Hold, needs_approval, plan_of
from docsum_shared.errors import Fail
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed

from .chunking import Chunk, TooManyChunks, split_into_chunks
from .settings import ChunkerSettings


@dataclass(frozen=True)
class CutChunk:
    """A chunk just cut from its document, to be stored under its id."""

    id: str
    index: int
    chunk: Chunk


@dataclass(frozen=True)
class ChunkRef:
    """A stored chunk, by its id and index: what announcing it takes (its text stays in its row)."""

    id: str
    index: int


def chunk_id(document_id: str, index: int) -> str:
    """Derived, not random: cutting the same document twice yields the same rows."""
    return f"{document_id}-c{index:05d}"


def cut(document_id: str, text: str, settings: ChunkerSettings, previous: Sequence[str] = ()) -> list[CutChunk] | Fail:
    """The document's chunk rows, or its failure when it needs more than `max_chunks_per_document`; a new
    version keeps each chunk of its `previous` version's (their owned slices) that it finds again."""
    try:
        chunks = split_into_chunks(
            text,
            chunk_chars=settings.chunk_chars,
            overlap_chars=settings.overlap_chars,
            context_after_chars=settings.context_after_chars,
            small_max=settings.small_max_chars,
            max_chunks=settings.max_chunks_per_document,
            previous=previous,
        )
    except TooManyChunks as exc:
        return Fail(
            f"the document's text needs at least {exc.at_least:,} chunks, over the limit of {exc.limit:,} "
            "(DOCSUM_MAX_CHUNKS_PER_DOCUMENT); split it into smaller files and try again"
        )
    return [CutChunk(chunk_id(document_id, c.index), c.index, c) for c in chunks]


def failed(event: DocumentParsed) -> DocumentMerged:
    """A document failed before its chunks: the merger hears of it as of any finished document."""
    return event.next(DocumentMerged, document_id=event.document_id, outcome=DocumentOutcome.FAILED)


# Whether a task waits for its owner's approval, given its owner, the chunk count of every document cut so
# far, their prompt tokens and the plan approved before (if any).
HoldRule = Callable[[str, list[int], int, Approved | None], Hold | None]


def merge_fan_in(settings: ChunkerSettings) -> tuple[int | None, int | None]:
    """How many chunk summaries, and how many document summaries, one merge call takes: what fits the
    model's input budget beside the answer (None: no budget set, one call merges them all)."""
    budget = settings.llm_context_tokens
    if budget is None:
        return None, None
    chunk_room = budget - settings.llm_max_tokens_document
    task_room = budget - settings.llm_max_tokens_task
    return chunk_room // settings.llm_max_tokens_chunk, task_room // settings.llm_max_tokens_document


def hold_rule(settings: ChunkerSettings) -> HoldRule | None:
    """The owner's ceiling against the task's plan; None when no call is paid for or no ceiling is set."""
    if settings.llm_backend != "openai" or (
        not settings.owner_ceilings and settings.task_max_calls is None and settings.task_max_cost_usd is None
    ):
        return None
    fan_in = merge_fan_in(settings)

    def hold(owner: str, chunk_counts: list[int], prompt_tokens: int, approved: Approved | None) -> Hold | None:
        plan = plan_of(chunk_counts, prompt_tokens, fan_in)
        completion = plan.calls * EXPECTED_COMPLETION_TOKENS
        cost = settings.cost_usd(settings.llm_model, plan.prompt_tokens, completion)
        return needs_approval(plan, cost, settings.ceiling(owner), approved)

    return hold
