"""The merger's handlers.

chunk-summarized (keyed by document) → the document summary → document-merged;
document-merged (keyed by task) → the task summary → task-events;
task-events with a final status (whoever ended the task: the task stage, cancel, expiry) → the
task's result → task-finished, for the systems that read results off Kafka.

The merger's LLM errors fail the document (or the task's summary), never the message: a provider
that keeps failing is given as many attempts as a chunk gets, a refusal is final, a refusal as too
long lowers the budget and goes hierarchical, and an answer that copies its input is made by quoting
instead (`tree`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from docsum_llm.base import SummaryRequest
from docsum_llm.cache import CallContext
from docsum_shared.errors import Fail, ItemFailed, Kind
from docsum_shared.events import ChunkSummarized, DocumentMerged, DocumentOutcome, Event, TaskEvent, TaskFinished
from docsum_shared.handlers import Handlers, required
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel.schemas import TaskResult
from docsum_shared.retry import PROVIDER, Backoff, Step, Tally, for_merges, llm_retry, retry_until
from docsum_shared.states import (
    DOCUMENT_FINAL,
    TASK_FINAL,
    TASK_HELD,
    DocumentStatus,
    TaskStatus,
    takes_work,
)

from . import tree
from .policy import (
    ChunkState,
    Cited,
    DocumentWithTask,
    TaskWithDocuments,
    chunks_all_final,
    decide_document,
    decide_task,
    merged_chunks,
    merged_from,
    with_failed_merge,
)
from .settings import MergerSettings
from .tree import Merged

log = logging.getLogger("docsum_merger")


class Repository(Protocol):
    chunk_rows_read: int

    async def load_document(self, document_id: str) -> DocumentWithTask | None: ...
    async def load_chunks(self, document_id: str) -> list[ChunkState]: ...
    async def complete_document(
        self, document_id: str, merged: Merged, coverage: float, failed_chunks: list[int]
    ) -> None: ...
    async def fail_document(self, document_id: str, error: str) -> None: ...
    async def record_document_merge_failure(self, document_id: str) -> int: ...
    async def record_task_merge_failure(self, task_id: str) -> int: ...
    async def load_task(self, task_id: str) -> TaskWithDocuments | None: ...
    async def finish_task(self, task_id: str, status: TaskStatus, merged: Merged | None, error: str | None) -> None: ...
    async def store_node(self, node: tree.MergeNode) -> None: ...
    async def previous_tree(
        self, task_id: str, document_id: str
    ) -> tuple[list[ChunkState], list[tree.MergeNode]] | None: ...
    async def touch_task(self, task_id: str) -> None: ...
    async def task_result(self, task_id: str) -> TaskResult | None: ...


@dataclass
class Deps:
    repo: Repository
    llm: tree.LLM
    settings: MergerSettings
    backoff: Backoff = PROVIDER


handlers = Handlers[Deps]("merger")
handle = handlers.handle


@handlers.on_many(ChunkSummarized, emits=(DocumentMerged,))
async def merge_documents(events: list[ChunkSummarized], deps: Deps) -> list[Event]:
    """The chunk-summarized events of a document that waited together: the document's state is read
    when handled, never taken from an event, so handling the last of them does what each would do."""
    last = {event.document_id: event for event in events}
    return [out for event in last.values() for out in await merge_document(event, deps)]


async def merge_document(event: ChunkSummarized, deps: Deps) -> list[Event]:
    loaded = required(await deps.repo.load_document(event.document_id), f"document {event.document_id}")
    doc = loaded.document
    if not takes_work(loaded.task_status):
        return []  # paused: resume re-drives the merge; final: nothing is waiting for it
    if doc.status not in DOCUMENT_FINAL:
        if not chunks_all_final(doc):
            return []  # a chunk is still unfinished: its own event comes later
        decision = decide_document(doc, await deps.repo.load_chunks(doc.id), loaded.options)
        if decision is None:
            return []
        if isinstance(decision, Fail):
            await deps.repo.fail_document(doc.id, decision.error)
        else:
            try:
                if decision.request is None:
                    merged = Merged(decision.single_summary or "", deps.llm.model, sentences=decision.cited[0])
                else:
                    merged = await _merged(
                        decision.request,
                        decision.cited,
                        CallContext(event.task_id, doc.id, owner=loaded.owner, mode=loaded.options.mode),
                        f"document {doc.id}",
                        lambda: deps.repo.record_document_merge_failure(doc.id),
                        deps,
                        leave_out=loaded.options.support == "strict",
                        kept=await _previous_groups(event.task_id, doc.id, loaded.options, deps),
                    )
                merged = replace(merged, text=merged.text + decision.note())  # after the sentences: none cites it
                await deps.repo.complete_document(doc.id, merged, decision.coverage, list(decision.failed_indexes))
            except ItemFailed as exc:
                await deps.repo.fail_document(doc.id, f"the document's summary could not be made: {exc}")
        log.info("document %s finished (%d chunk rows read so far)", doc.id, deps.repo.chunk_rows_read)
        doc = required(await deps.repo.load_document(doc.id), f"document {doc.id}").document
    if doc.status is DocumentStatus.CANCELLED:
        return []
    outcome = DocumentOutcome.COMPLETED if doc.status is DocumentStatus.COMPLETED else DocumentOutcome.FAILED
    return [event.next(DocumentMerged, document_id=doc.id, outcome=outcome)]


@handlers.on(DocumentMerged, emits=(TaskEvent,))
async def finish_task(event: DocumentMerged, deps: Deps) -> list[Event]:
    task = required(await deps.repo.load_task(event.task_id), f"task {event.task_id}")
    status = task.status
    if status in TASK_HELD:
        return []  # resume re-drives the task merge
    if status not in TASK_FINAL:
        decision = decide_task(task.title, task.documents, task.options)
        if decision is None:
            return []  # a document is still unfinished
        merged = None
        if decision.request is not None:
            try:
                merged = await _merged(
                    decision.request,
                    decision.cited,
                    CallContext(event.task_id, owner=task.owner, mode=task.options.mode),
                    f"task {event.task_id}",
                    lambda: deps.repo.record_task_merge_failure(event.task_id),
                    deps,
                    leave_out=task.options.support == "strict",
                )
            except ItemFailed as exc:
                decision = with_failed_merge(decision, str(exc))
        elif decision.summary is not None:
            merged = Merged(decision.summary, deps.llm.model, sentences=decision.cited[0])
        await deps.repo.finish_task(event.task_id, decision.status, merged, decision.error)
        log.info("task %s finished: %s", event.task_id, decision.status)
        status = required(await deps.repo.load_task(event.task_id), f"task {event.task_id}").status
    return [event.next(TaskEvent, status=status)]


@handlers.on(TaskEvent, emits=(TaskFinished,))
async def publish_result(event: TaskEvent, deps: Deps) -> list[Event]:
    if event.status not in TASK_FINAL:
        return []  # paused, resumed...: not an end
    result = required(await deps.repo.task_result(event.task_id), f"task {event.task_id}")
    if result.status not in TASK_FINAL:
        return []  # retried since: it ends again later, with its own event
    return [TaskFinished.from_result(result)]


async def _merged(
    request: SummaryRequest,
    children: Sequence[Cited],
    context: CallContext,
    what: str,
    record_failure: Callable[[], Awaitable[int]],
    deps: Deps,
    *,
    leave_out: bool = False,
    kept: Collection[tuple[str, ...]] = (),
) -> Merged:
    """The merged summary of `what` ("document <id>" or "task <id>") from `request`'s texts, whose
    sentences are `children`; ItemFailed when the provider refused it or kept failing. While it runs,
    the task counts as active: reconcile does not re-drive a task whose merge is making (slow) progress."""
    scope_id = what.rpartition(" ")[2]
    limits = for_merges(deps.settings.llm_max_attempts, deps.backoff)

    async def stored_attempts(_: Tally) -> int:
        return await record_failure()

    async def then(exc: Exception, kind: Kind, step: Step, failures: int) -> None:
        if isinstance(step, Fail):
            log.warning("the merge of %s gave up after %d attempts: %s", what, failures, exc)
        else:
            log.warning("the merge of %s failed (attempt %d): %s", what, failures, exc)

    bounded = await deps.llm.bounded(request)
    async with _active(context.task_id, deps):
        merged = await retry_until(
            lambda: tree.merge(
                deps.llm, deps.repo, bounded, context, scope_id, children, leave_out=leave_out, kept=kept
            ),
            llm_retry(limits, stored_attempts, then),
        )
    return replace(merged, text=merged.text + merged.note())  # after the sentences: none cites it


async def _previous_groups(task_id: str, document_id: str, options: TaskOptions, deps: Deps) -> list[tuple[str, ...]]:
    """The groups of the merge tree of the document that this one is a new version of, as their texts
    (none when it is none's): the new version's merge keeps each one its own texts hold again."""
    if options.previous_task is None:
        return []  # a task naming no previous one: not even the query
    previous = await deps.repo.previous_tree(task_id, document_id)
    if previous is None:
        return []
    chunks, nodes = previous
    texts, _ = merged_chunks(chunks, options)
    shown, _ = merged_from([(n.summary, n.sentences) for n in nodes], options)  # as the levels above read them
    made = [(n.inputs, n.level, text) for n, text in zip(nodes, shown, strict=True)]
    return tree.previous_groups(texts, made)


@contextlib.asynccontextmanager
async def _active(task_id: str | None, deps: Deps) -> AsyncIterator[None]:
    """Touch the task's activity mark while the block runs, a few times per reconcile idle period."""
    if task_id is None:
        yield
        return
    every = deps.settings.reconcile_idle_s / 3

    async def keep() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await deps.repo.touch_task(task_id)
            except Exception as exc:  # the database is down: the merge itself will notice
                log.debug("could not mark task %s active: %s", task_id, exc)

    keeper = asyncio.create_task(keep())
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
