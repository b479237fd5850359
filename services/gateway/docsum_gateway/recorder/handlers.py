"""The recorder's handler: a pipeline event in, its entries appended to the task's progress log."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
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


@dataclass
class Known:
    """Keys this process saw stored in the tasks' logs. An entry, once stored, stays (until its task is
    deleted, and nothing is recorded for a deleted task anyway), so an event whose keys are all known
    adds nothing, and needs no query to say so: every chunk-created of a document after the first."""

    most: int = 20_000
    keys: collections.OrderedDict[tuple[str, str], None] = field(default_factory=collections.OrderedDict)

    def cover(self, task_id: str, keys: Iterable[str] | None) -> bool:
        return keys is not None and all((task_id, key) in self.keys for key in keys)

    def add(self, task_id: str, keys: Iterable[str]) -> None:
        for key in keys:
            self.keys[(task_id, key)] = None
            self.keys.move_to_end((task_id, key))
        while len(self.keys) > self.most:
            self.keys.popitem(last=False)


@dataclass(frozen=True)
class Deps:
    pool: asyncpg.Pool
    settings: Settings
    known: Known = field(default_factory=Known)


@handlers.on_many(DocumentSubmitted, DocumentParsed, ChunkCreated, ChunkSummarized, DocumentMerged, TaskEvent, emits=())
async def record(events: list[Event], deps: Deps) -> list[Event]:
    """Events of one key that waited together (the chunks of a document that ended while the recorder
    was busy) are told with one read of their task's view, the ends of chunks under one append."""
    by_task: dict[str, list[Event]] = {}
    for event in events:
        by_task.setdefault(event.task_id, []).append(event)
    for task_id, told in by_task.items():
        await _record(task_id, told, deps)
    return []


async def _record(task_id: str, events: list[Event], deps: Deps) -> None:
    events = [e for e in events if not deps.known.cover(task_id, policy.keys_at_most(e))]
    if not events:
        return
    chunk_ids = [e.chunk_id for e in events if isinstance(e, ChunkSummarized)]
    stored, chunk_status = await repository.task_and_chunks(deps.pool, task_id, chunk_ids)
    if not stored:
        # Not stored (yet): a submission by another system, which the parser registers; the log
        # starts with the task's next event. Nobody can watch a task that is not stored.
        return
    told = [
        policy.keys_at_most(e, chunk_status.get(e.chunk_id) if isinstance(e, ChunkSummarized) else None) for e in events
    ]
    if all(keys is not None for keys in told):
        have = await repository.stored_keys(deps.pool, task_id, sorted({k for keys in told for k in keys or ()}))
        deps.known.add(task_id, have)
        # Nothing new to tell from every chunk-created after the first of a document, and a redelivery.
        events = [e for e, keys in zip(events, told, strict=True) if not set(keys or ()) <= have]
        if not events:
            return

    async def entries(db: Any) -> list[policy.Entry]:  # read under the task's log lock, on its connection
        view = await views.pipeline_view(db, deps.settings, task_id)
        if view is None:
            return []
        ended = await repository.chunks_by_id(db, [e.chunk_id for e in events if isinstance(e, ChunkSummarized)])
        out: list[policy.Entry] = []
        for event in events:
            if isinstance(event, ChunkSummarized):
                chunks = [c for c in ended if c.chunk_id == event.chunk_id]
            elif isinstance(event, DocumentMerged):
                chunks = await repository.chunks(db, task_id, event.document_id)
            elif isinstance(event, TaskEvent) and event.status in TASK_FINAL:
                chunks = await repository.chunks(db, task_id)
            else:
                chunks = []
            out.extend(policy.entries_for(event, view, chunks))
        written.extend(out)
        return out

    written: list[policy.Entry] = []
    numbers = await repository.append(deps.pool, task_id, entries)
    deps.known.add(task_id, (entry.key for entry in written))  # stored now, whether new or not
    if numbers:
        log.debug("task %s: progress %d..%d", task_id, numbers[0], numbers[-1])
