"""The merger service.

chunk-summarized (keyed by document) → document summary → document-merged;
document-merged (keyed by task) → task summary → task-events.
"""

from __future__ import annotations

import logging

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.errors import PermanentError
from docsum_shared.events import ChunkSummarized, DocumentMerged, DocumentOutcome, Event, TaskEvent, Topic
from docsum_shared.lifecycle import maintain_forever
from docsum_shared.settings import Settings
from docsum_shared.states import DOCUMENT_FINAL, TASK_FINAL, DocumentStatus, TaskStatus
from docsum_shared.summarizers import Summarizing
from docsum_shared.summarizers.cache import CallContext

from . import repository, tree
from .handler import FailDocument, decide_document, decide_task

log = logging.getLogger("docsum_merger")


def build_handlers(settings: Settings, pool: asyncpg.Pool):
    llm = Summarizing.from_settings(settings, pool)

    async def on_chunk_summarized(event: Event) -> list[Event]:
        assert isinstance(event, ChunkSummarized)
        loaded = await repository.load_document(pool, event.document_id)
        if loaded is None:
            raise PermanentError(f"document {event.document_id} of task {event.task_id} is not registered")
        doc, task_status, options = loaded
        if task_status in TASK_FINAL or task_status is TaskStatus.PAUSED:
            return []  # paused: resume re-drives the merge
        if doc.status not in DOCUMENT_FINAL:
            decision = decide_document(doc, await repository.load_chunks(pool, event.document_id), options)
            if decision is None:
                return []
            if isinstance(decision, FailDocument):
                await repository.fail_document(pool, doc.id, decision.error)
            else:
                if decision.request is None:
                    summary, model = decision.single_summary or "", llm.backend.model
                else:
                    result = await tree.merge(llm, decision.request, CallContext(event.task_id, doc.id), doc.id)
                    summary, model = result.text, result.model
                await repository.complete_document(
                    pool, doc.id, summary + decision.note(), model, decision.coverage, list(decision.failed_indexes)
                )
            log.info("document %s finished", doc.id)
            reloaded = await repository.load_document(pool, event.document_id)
            assert reloaded is not None
            doc = reloaded[0]
        if doc.status is DocumentStatus.CANCELLED:
            return []
        outcome = DocumentOutcome.COMPLETED if doc.status is DocumentStatus.COMPLETED else DocumentOutcome.FAILED
        return [DocumentMerged(task_id=event.task_id, document_id=doc.id, outcome=outcome)]

    async def on_document_merged(event: Event) -> list[Event]:
        assert isinstance(event, DocumentMerged)
        loaded = await repository.load_task(pool, event.task_id)
        if loaded is None:
            raise PermanentError(f"task {event.task_id} is not registered")
        status, title, docs, options = loaded
        if status is TaskStatus.PAUSED:
            return []
        if status not in TASK_FINAL:
            decision = decide_task(title, docs, options)
            if decision is None:
                return []
            summary, model = decision.summary, llm.backend.model
            if decision.request is not None:
                result = await tree.merge(llm, decision.request, CallContext(event.task_id), event.task_id)
                summary, model = result.text, result.model
            await repository.finish_task(pool, event.task_id, decision.status, summary, model, decision.error)
            log.info("task %s finished: %s", event.task_id, decision.status)
            reloaded = await repository.load_task(pool, event.task_id)
            assert reloaded is not None
            status = reloaded[0]
        return [TaskEvent(task_id=event.task_id, status=status)]

    return {Topic.CHUNK_SUMMARIZED: on_chunk_summarized, Topic.DOCUMENT_MERGED: on_document_merged}


def maintenance(settings: Settings, pool: asyncpg.Pool):
    """Expiry and reconcile run beside the merger (one process at a time, under a database lock)."""
    return lambda producer: maintain_forever(pool, producer, settings)


def main() -> None:
    run_service(lambda stop: serve("merger", stop, build_handlers, background=maintenance))


if __name__ == "__main__":
    main()
