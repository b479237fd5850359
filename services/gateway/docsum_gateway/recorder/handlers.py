"""The recorder's handler: a pipeline event in, its entries appended to the task's progress log."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import asyncpg

from docsum_shared.events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentParsed,
    DocumentSubmitted,
    Event,
    TaskEvent,
)
from docsum_shared.handlers import Handlers
from docsum_shared.readmodel import views
from docsum_shared.settings import Settings
from docsum_shared.states import TASK_FINAL

from . import policy, repository

log = logging.getLogger(__name__)
handlers = Handlers["Deps"]()


@dataclass(frozen=True)
class Deps:
    pool: asyncpg.Pool
    settings: Settings


@handlers.on(DocumentSubmitted, DocumentParsed, ChunkCreated, ChunkSummarized, DocumentMerged, TaskEvent)
async def record(event: Event, deps: Deps) -> list[Event]:
    chunk_id = event.chunk_id if isinstance(event, ChunkSummarized) else None
    stored, chunk_status = await repository.task_and_chunk(deps.pool, event.task_id, chunk_id)
    if not stored:
        # Not stored (yet): a submission by another system, which the parser registers; the log
        # starts with the task's next event. Nobody can watch a task that is not stored.
        return []
    told = policy.keys_at_most(event, chunk_status)
    if told is not None and await repository.all_stored(deps.pool, event.task_id, told):
        return []  # nothing new to tell (every chunk-created after the first, a redelivery)

    async def entries(db: Any) -> list[policy.Entry]:  # read under the task's log lock, on its connection
        view = await views.pipeline_view(db, deps.settings, event.task_id)
        if view is None:
            return []
        if isinstance(event, ChunkSummarized):
            chunks = await repository.chunk(db, event.chunk_id)
        elif isinstance(event, DocumentMerged):
            chunks = await repository.chunks(db, event.task_id, event.document_id)
        elif isinstance(event, TaskEvent) and event.status in TASK_FINAL:
            chunks = await repository.chunks(db, event.task_id)
        else:
            chunks = []
        return policy.entries_for(event, view, chunks)

    numbers = await repository.append(deps.pool, event.task_id, entries)
    if numbers:
        log.debug("task %s: progress %d..%d", event.task_id, numbers[0], numbers[-1])
    return []
