"""What a task looks like from outside: the gateway's answers, and the result published on task-finished."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..options import TaskOptions


class ChunkProgress(BaseModel):
    done: int
    failed: int
    total: int | None


class Usage(BaseModel):
    """Tokens and cost of the provider's answers; cached_calls were answered from stored results."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cached_calls: int = 0
    cost_usd: float = 0.0


class Estimate(BaseModel):
    """What the rest of the task should cost and take, known from the moment its chunks exist."""

    remaining_chunks: int
    prompt_tokens: int  # of the remaining chunk requests (merges come on top)
    cost_usd: float
    # From the task's calls of the last minute, None before there is a rate; while chunks wait on a
    # provider's batch, from the batch's pace instead (see `BatchProgress`), None until it has one.
    eta_s: float | None


class Place(BaseModel):
    """Where a task whose chunks wait for their turn stands. Only its owner's own work is counted: what other
    owners have waiting, and how fast they are served, is theirs (it is never shown, as a count or as a time).
    Under fair shares their backlogs do not hold this task back beyond the owner's share anyway: what
    goes before it is the owner's own work of a higher priority, or of the same priority and older."""

    waiting_chunks: int = Field(description="The task's chunks waiting for their turn (not admitted to a call yet).")
    ahead_chunks: int = Field(
        description="The owner's other chunks waiting that go first: of tasks of a higher priority, or of the same "
        "priority and ready earlier (background work that has waited long goes earlier than this counts)."
    )
    calls_per_minute: int = Field(
        description="The owner's calls answered over the last minute (not from the cache): its share, being served."
    )
    eta_s: float | None = Field(
        description="When the task's last waiting chunk should have its turn, at that pace: (ahead + waiting) / pace; "
        "null while the owner has had no call answered in the last minute."
    )


class BatchProgress(BaseModel):
    """The task's chunks that go through the provider's Batch API (mode batch): one line per chunk."""

    lines: int = Field(description="The task's chunks sent the batch way, whatever became of them since.")
    done: int = Field(
        description="Lines the batch answered: those whose answers are stored, and, in a batch still at the "
        "provider, its share of the requests the provider reports done (a batch counts its requests, and the "
        "task's lines in it take its done share, at most all of them; their answers come when the batch ends)."
    )
    waiting: int = Field(
        description="Lines the task still waits for: queued for a batch, or in one not done yet (lines - done - "
        "sent_back - dropped)."
    )
    sent_back: int = Field(
        description="Lines the batch did not answer (failed, expired, cancelled for the deadline): their chunks "
        "are called in realtime instead."
    )
    dropped: int = Field(description="Lines set aside when the task paused or ended: queued again if it resumes.")
    batches: int = Field(description="The provider's batches still open that hold the task's lines.")
    submitted_at: datetime | None = Field(
        description="When the earliest of those batches was submitted to the provider; null before one is."
    )
    deadline: datetime | None = Field(description="The task's deadline (options.deadline); null: none.")
    state: Literal["gathering", "waiting", "done"] = Field(
        description='"gathering": lines wait to be sent (queued, or in a batch not yet submitted); "waiting": lines '
        'are at the provider, in a submitted batch; "done": no line waits for a batch.'
    )


class Recovery(BaseModel):
    """How the work got through failures: attempts made, interruptions survived, calls saved."""

    attempts: int = 0  # summarizer attempts over all chunks (1 per chunk when nothing went wrong)
    interruptions: int = 0  # chunks taken over after the process working on them died
    redrives: int = 0  # times the task's unfinished work was re-driven (resume, retry, reconcile)
    calls_saved: int = 0  # requests answered from stored results instead of the provider


class Reuse(BaseModel):
    """What of a summary was answered from stored results (the owner's result cache: an earlier version, or any
    request asked before) and what was paid for, counted from the calls ledger: a chunk summary is reused when
    none of its requests was paid for, a merge when its request was not."""

    chunk_summaries: int = Field(description="Chunk summaries made or taken so far.")
    chunk_summaries_reused: int = Field(description="Of them, answered from stored results, at no cost.")
    merges: int = Field(description="Merge requests (a document's groups and levels; the task's, in the task's).")
    merges_reused: int = Field(description="Of them, answered from stored results.")
    said: str = Field(description='The same in words: "98 of 100 chunk summaries reused, 3 merges redone".')


class EndpointView(BaseModel):
    """What docsum knows of the LLM endpoint it plans requests for."""

    model: str
    input_budget: int | None  # tokens a request (prompt and answer) must fit; None: unlimited
    learned_from: str | None  # the setting, what the endpoint stated, or the refusal it was learned from


class SourceView(BaseModel):
    """A range `[start, end)` of a document's extracted text that a summary sentence rests on."""

    document_id: str
    filename: str
    unit: Literal["page", "paragraph", "slide", "section", "chapter", "line"] | None = Field(
        description="What `page` counts: PDF pages, DOCX paragraphs, PPTX slides, sections of a web page (one per"
        " heading), EPUB chapters, lines of text; null: the text has no positions."
    )
    page: int | None = Field(description="The unit (from 1) the range starts in; null: not known.")
    last_page: int | None = Field(description="The unit the range ends in (page when it spans none).")
    start: int = Field(description="Character offsets into the document's extracted text (`GET .../text`).")
    end: int


class SentenceView(BaseModel):
    """A sentence of a summary, and the ranges of documents it rests on."""

    text: str
    support: Literal["cited", "aligned", "synthesis", "unsupported"] = Field(
        description='"cited": it quotes its sources; "aligned": it was matched to them afterwards; "synthesis": it '
        'joins several sources, which support it together, or none could be told; "unsupported": most of its content '
        "words are in none of the texts it was made from (it has no source of its own)."
    )
    at: tuple[int, int] = Field(
        description="Where it is in the summary's text: [start, end), in characters; an unsupported sentence of a "
        'task asking for `support` "strict" is left out of the text, at the empty range where it was.'
    )
    sources: list[SourceView]
    change: Literal["new", "changed", "unchanged"] | None = Field(
        None,
        description="In a new version's document summary (`previous_document_id`), against the previous version's: "
        '"unchanged" (word for word there), "changed" (most of its words are those of one sentence there: `was`), '
        '"new"; null: not a new version, or either summary\'s sentences are not known.',
    )
    was: str | None = Field(None, description='A "changed" sentence\'s wording in the previous version.')


# What a summary's `sentences` say of it: null when none are known (a summary stored before sentences were
# kept, or a backend that does not say where its sentences come from).
SENTENCES = "The summary's sentences with their sources; null: none are known."


class DocumentView(BaseModel):
    document_id: str
    filename: str
    status: str
    size_level: str | None
    text_chars: int | None
    chunks: ChunkProgress
    summary: str | None
    summary_model: str | None
    error: str | None
    coverage: float | None  # share of the document its summary covers, when parts failed for good
    failed_chunks: list[int]
    truncated: bool = False  # some answer behind this summary was cut at its bound, even asked shorter
    usage: Usage
    sentences: list[SentenceView] | None = Field(None, description=SENTENCES)
    reading: str | None = Field(
        None,
        description='What the parser is reading now, page by page: "reading page 41 of 300 (OCR)" while a scanned'
        " PDF's pages are read by OCR; null otherwise.",
    )
    previous_document_id: str | None = Field(
        None,
        description="The document of the previous task (`previous_task`) this one is a new version of: the one of "
        "the same document key, else of the same filename; null: none.",
    )
    reuse: Reuse | None = Field(None, description="What of its summary was reused; null before any of it was made.")
    removed_sentences: list[str] | None = Field(
        None,
        description="The previous version's summary sentences that none of this one's is (word for word or changed): "
        "null when the sentences are not marked (see SentenceView.change).",
    )


class TaskView(BaseModel):
    task_id: str
    title: str | None
    name: str = Field("", description='What to call the task: its title, else its files ("report.pdf and 2 more").')
    status: str
    created_at: datetime
    updated_at: datetime
    summary: str | None
    summary_model: str | None
    error: str | None
    options: TaskOptions
    # Why the task waits AWAITING_APPROVAL (its planned calls or cost over its owner's ceiling):
    # resume approves it, cancel drops it; `estimate` shows what it would take.
    hold_reason: str | None = None
    truncated: bool = False  # the task summary, or one of its documents', was cut at its bound
    llm: EndpointView | None = None
    usage: Usage
    estimate: Estimate
    recovery: Recovery
    documents: list[DocumentView]
    batch: BatchProgress | None = Field(None, description="Its provider's batch lines; null: it has none.")
    place: Place | None = Field(None, description="Where its chunks waiting for their turn stand; null: none waits.")
    sentences: list[SentenceView] | None = Field(None, description=SENTENCES)
    previous_task: str | None = Field(
        None, description="The task whose documents this task's are new versions of (options.previous_task)."
    )
    reuse: Reuse | None = Field(
        None, description="What of the task's summaries was reused, its documents' and its own merge; null: none made."
    )


class FailureView(BaseModel):
    document_id: str
    filename: str
    chunk_index: int | None  # None: the document failed as a whole (its file could not be read)
    error: str | None
    attempts: int | None


class TaskListItem(BaseModel):
    task_id: str
    title: str | None
    name: str = Field(description='What to call the task: its title, else its files ("report.pdf and 2 more").')
    status: str
    created_at: datetime


class DocumentResult(BaseModel):
    """One document in a task's result."""

    document_id: str
    filename: str
    status: str = Field(description="COMPLETED, FAILED or CANCELLED.")
    summary: str | None
    error: str | None = Field(description="Why the document failed (or which parts of it), for its user.")
    truncated: bool = Field(False, description="An answer behind the summary was cut at its bound.")
    chunks: ChunkProgress


class TaskResult(BaseModel):
    """A finished task: what `docsum summarize --json` prints and what task-finished carries."""

    task_id: str
    status: str = Field(description="COMPLETED, COMPLETED_WITH_ERRORS, FAILED, CANCELLED or EXPIRED.")
    updated_at: datetime = Field(description="When the task last changed: for a final task, when it ended.")
    summary: str | None = Field(description="The summary of the whole batch (null when it could not be made).")
    error: str | None = None
    truncated: bool = False
    llm: EndpointView | None = None
    usage: Usage
    recovery: Recovery
    documents: list[DocumentResult]

    @classmethod
    def of(cls, view: TaskView) -> TaskResult:
        """The result part of a task's full view."""
        return cls.model_validate(view.model_dump(include=RESULT_FIELDS))


def _fields(model: type[BaseModel], nested: dict[str, type[BaseModel]]) -> dict[str, Any]:
    return {name: ({"__all__": _fields(nested[name], {})} if name in nested else True) for name in model.model_fields}


# What of a TaskView makes its result (pydantic's include= form).
RESULT_FIELDS = _fields(TaskResult, {"documents": DocumentResult})
