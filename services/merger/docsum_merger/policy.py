"""The merger's decisions, pure functions of the stored state (never of what this process remembers).

Document stage: when every chunk of a document is final, its chunk summaries become one document
summary. Task stage: when every document of a task is final, their summaries become the task summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_shared.cited import CitedSentence, without_unsupported
from docsum_shared.errors import Fail
from docsum_shared.options import TaskOptions
from docsum_shared.states import CHUNK_FINAL, DOCUMENT_FINAL, ChunkStatus, DocumentStatus, TaskStatus

# A stored summary's sentences with their sources; None where they are not known (a summary stored
# before they were kept, or by a backend that does not say where its sentences come from).
Cited = tuple[CitedSentence, ...] | None

DEFAULT_OPTIONS = TaskOptions()


@dataclass(frozen=True)
class ChunkState:
    index: int
    status: ChunkStatus
    summary: str | None
    error: str | None
    sentences: Cited = None


@dataclass(frozen=True)
class DocumentState:
    id: str
    filename: str
    status: DocumentStatus
    summary: str | None
    error: str | None
    coverage: float | None = None  # below 1: summarized from some of its parts (others failed for good)
    chunk_total: int | None = None  # None until the document is cut
    chunks_final: int = 0  # COMPLETED or FAILED, counted as each chunk gets there
    sentences: Cited = None


@dataclass(frozen=True)
class DocumentWithTask:
    """A document as the document stage reads it: with what its task allows and asks for."""

    document: DocumentState
    task_status: TaskStatus
    options: TaskOptions
    owner: str


@dataclass(frozen=True)
class TaskWithDocuments:
    """A task as the task stage reads it: its documents in order, and a stand-in for each one awaited."""

    status: TaskStatus
    title: str | None
    documents: list[DocumentState]
    options: TaskOptions
    owner: str


def chunks_all_final(doc: DocumentState) -> bool:
    """Every chunk of the document is final, by the counts on its row: only then are its chunks read."""
    return doc.chunk_total is not None and doc.chunks_final >= doc.chunk_total


# --- document stage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeChunks:
    request: SummaryRequest | None  # None: a single chunk summarized, whose summary is the document's
    single_summary: str | None = None
    coverage: float = 1.0  # the share of the document's chunks that the summary covers
    failed_indexes: tuple[int, ...] = ()
    # The sentences of each text of the request (of the single summary, when there is no request).
    cited: tuple[Cited, ...] = ()

    def note(self) -> str:
        """What a partial summary says about itself."""
        if not self.failed_indexes:
            return ""
        parts = ", ".join(str(i + 1) for i in self.failed_indexes[:20]) + ("…" if len(self.failed_indexes) > 20 else "")
        return f"\n\n[Partial summary: covers {self.coverage:.0%} of the document; part(s) {parts} could not be read.]"


def decide_document(
    doc: DocumentState, chunks: list[ChunkState], options: TaskOptions = DEFAULT_OPTIONS
) -> MergeChunks | Fail | None:
    """What the document needs now; None while a chunk is unfinished (or when it has no chunk yet).

    Chunks that FAILED for good leave a partial summary of the others, which says what it covers;
    with the task option `strict`, or when nothing was summarized, the document fails instead.
    """
    if not chunks or any(c.status not in CHUNK_FINAL for c in chunks):
        return None
    ordered = sorted(chunks, key=lambda c: c.index)
    failed = [c for c in ordered if c.status is ChunkStatus.FAILED]
    done = [c for c in ordered if c.status is ChunkStatus.COMPLETED]
    if failed and (options.strict or not done):
        return Fail(
            f"{len(failed)} of {len(chunks)} parts could not be summarized "
            f"(part {failed[0].index + 1}: {failed[0].error or 'unknown error'})"
        )
    coverage = len(done) / len(chunks)
    failed_indexes = tuple(c.index for c in failed)
    if len(done) == 1:  # stored as it is: a view leaves its unsupported sentences out (strict)
        return MergeChunks(None, done[0].summary or "", coverage, failed_indexes, (done[0].sentences,))
    texts, cited = merged_chunks(done, options)
    request = SummaryRequest(kind=SummaryKind.DOCUMENT, texts=texts, title=doc.filename)
    return MergeChunks(request.asked(options), None, coverage, failed_indexes, cited)


def merged_chunks(chunks: list[ChunkState], options: TaskOptions) -> tuple[tuple[str, ...], tuple[Cited, ...]]:
    """The texts a document's merge is made from, and their sentences: its completed chunks' summaries,
    in order (`merged_from`)."""
    done = sorted((c for c in chunks if c.status is ChunkStatus.COMPLETED), key=lambda c: c.index)
    return merged_from([(c.summary or "", c.sentences) for c in done], options)


def merged_from(summaries: list[tuple[str, Cited]], options: TaskOptions) -> tuple[tuple[str, ...], tuple[Cited, ...]]:
    """The texts a merge is made from and their sentences. A task asking for `support` "strict" merges
    its summaries without their unsupported sentences: a merge does not build on what its sources do
    not say (a summary whose sentences are not known is merged whole)."""
    if options.support != "strict":
        return tuple(text for text, _ in summaries), tuple(sentences for _, sentences in summaries)
    shown: list[tuple[str, Cited]] = [
        (text, None) if sentences is None else without_unsupported(text, sentences) for text, sentences in summaries
    ]
    return tuple(text for text, _ in shown), tuple(sentences for _, sentences in shown)


# --- task stage -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinishTask:
    status: TaskStatus
    request: SummaryRequest | None  # None: no merge needed (one document, or none completed)
    summary: str | None  # the summary when no merge is needed
    error: str | None
    # The sentences of each text of the request (of the summary, when there is no request).
    cited: tuple[Cited, ...] = ()


def with_awaited(docs: list[DocumentState], expected: int | None) -> list[DocumentState]:
    """The task's documents, and one PENDING stand-in per document it expects that has not arrived yet
    (another system's task, whose documents are published one by one): a task is never final before
    all of them are."""
    missing = (expected or 0) - len(docs)
    return docs + [AWAITED] * max(0, missing)


# A document that the task expects but that has not been submitted yet.
AWAITED = DocumentState("", "(not submitted yet)", DocumentStatus.PENDING, None, None)


def decide_task(
    title: str | None, docs: list[DocumentState], options: TaskOptions = DEFAULT_OPTIONS
) -> FinishTask | None:
    """The task's final status and summary once every document is final (an awaited one never is); None
    until then."""
    if not docs or any(d.status not in DOCUMENT_FINAL for d in docs):
        return None
    completed = [d for d in docs if d.status is DocumentStatus.COMPLETED]
    failed = [d for d in docs if d.status is DocumentStatus.FAILED]
    if not completed:
        return FinishTask(TaskStatus.FAILED, None, None, f"all {len(docs)} documents failed")
    partial = [d for d in completed if d.coverage is not None and d.coverage < 1]
    status = TaskStatus.COMPLETED_WITH_ERRORS if failed or partial else TaskStatus.COMPLETED
    problems = [f"{len(failed)} of {len(docs)} documents failed"] if failed else []
    if partial:
        problems.append(f"{len(partial)} of {len(docs)} documents summarized in part")
    error = "; ".join(problems) or None
    if len(completed) == 1:
        return FinishTask(status, None, completed[0].summary, error, (completed[0].sentences,))
    texts, cited = merged_from([(d.summary or "", d.sentences) for d in completed], options)
    request = SummaryRequest(
        kind=SummaryKind.TASK,
        texts=texts,
        title=title or "",
        labels=tuple(d.filename for d in completed),
    )
    return FinishTask(status, request.asked(options), None, error, cited)


def with_failed_merge(decision: FinishTask, error: str) -> FinishTask:
    """The task's outcome when its summary could not be made: its documents' summaries stand."""
    errors = "; ".join(e for e in (decision.error, f"the batch summary could not be made: {error}") if e)
    status = TaskStatus.FAILED if decision.status is TaskStatus.FAILED else TaskStatus.COMPLETED_WITH_ERRORS
    return FinishTask(status, None, None, errors)
