"""The recorder's handler: a pipeline event in, its entries appended to the task's progress log."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

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
from docsum_shared.readmodel.schemas import TaskView
from docsum_shared.states import TASK_FINAL
from docsum_shared.together import ByKey

from . import policy
from .repository import TaskChunks

log = logging.getLogger(__name__)
handlers = Handlers["Deps"]("gateway-progress", "the gateway's progress recorder", dead_letters=False)


@dataclass
class Known:
    """Keys this process saw stored in the tasks' logs. An entry, once stored, stays (until its task is
    deleted, and nothing is recorded for a deleted task anyway), so an event whose keys are all known
    adds nothing, and needs no query to say so: every chunk-created of a document after the first."""

    most: int = 20_000
    keys: collections.OrderedDict[tuple[str, str], None] = field(default_factory=collections.OrderedDict)

    def cover(self, task_id: str, keys: Iterable[str] | None) -> bool:
        return keys is not None and all((task_id, key) in self.keys for key in keys)

    def unknown(self, task_id: str, keys: Iterable[str]) -> set[str]:
        return {key for key in keys if (task_id, key) not in self.keys}

    def add(self, task_id: str, keys: Iterable[str]) -> None:
        for key in keys:
            self.keys[(task_id, key)] = None
            self.keys.move_to_end((task_id, key))
        while len(self.keys) > self.most:
            self.keys.popitem(last=False)


class TaskLog(Protocol):
    """A task's log under its lock (repository.LockedLog): the stored state an entry shows, the append."""

    async def task_view(self) -> TaskView | None: ...
    async def chunks(self, document_id: str | None = None) -> list[policy.LoggedChunk]: ...
    async def chunks_by_id(self, chunk_ids: Sequence[str]) -> list[policy.LoggedChunk]: ...
    async def append(self, entries: Sequence[policy.Entry]) -> list[int]: ...


class Repository(Protocol):
    """What the handler reads and writes (repository.ProgressLog)."""

    async def task_and_chunks(self, task_id: str, chunk_ids: Sequence[str], keys: Sequence[str] = ()) -> TaskChunks: ...
    def locked(self, task_id: str) -> AbstractAsyncContextManager[TaskLog]: ...


# Chunks' starts and ends wait this long to be told together with the next ones (they show in a
# stream up to this much later; any other event is told at once, and those waiting with it): a task
# of a thousand fast chunks is a few dozen appends, not hundreds, each reading its task's view.
CHUNKS_LINGER_S = 0.1


def _urgent(call: tuple[list[Event], Deps]) -> bool:
    return not all(isinstance(event, ChunkSummarized | ChunkCreated) for event in call[0])


async def _record_together(task_id: str, calls: list[tuple[list[Event], Deps]]) -> list[None]:
    await _record(task_id, [event for events, _ in calls for event in events], calls[0][1])
    return [None] * len(calls)


@dataclass(frozen=True)
class Deps:
    repo: Repository
    known: Known = field(default_factory=Known)
    # The events of one task handled at about the same time, in any of the consumer's slots, are told
    # together: a task's appends take its lock one after another anyway.
    tasks: ByKey[str, tuple[list[Event], Deps], None] = field(
        default_factory=lambda: ByKey(_record_together, linger_s=CHUNKS_LINGER_S, urgent=_urgent)
    )


@handlers.on_many(DocumentSubmitted, DocumentParsed, ChunkCreated, ChunkSummarized, DocumentMerged, TaskEvent, emits=())
async def record(events: list[Event], deps: Deps) -> list[Event]:
    """Events of one key that waited together (the chunks of a document that ended while the recorder
    was busy), and those of other keys of the same task handled meanwhile, are told with one read of
    their task's view, the ends of chunks under one append."""
    by_task: dict[str, list[Event]] = {}
    for event in events:
        by_task.setdefault(event.task_id, []).append(event)
    for task_id, told in by_task.items():
        # Nothing to tell: every chunk-created of a document after the first, and a redelivery.
        if told := [e for e in told if not deps.known.cover(task_id, policy.keys_at_most(e))]:
            await deps.tasks(task_id, (told, deps))
    return []


async def _record(task_id: str, events: list[Event], deps: Deps) -> None:
    events = [e for e in events if not deps.known.cover(task_id, policy.keys_at_most(e))]
    if not events:
        return
    chunk_ids = [e.chunk_id for e in events if isinstance(e, ChunkSummarized)]
    # The keys the events may give, whatever their chunks' stored status: those not known stored are
    # asked in the same read.
    possible = {k for e in events for keys in policy.keys_possible(e) for k in keys}
    asked = deps.known.unknown(task_id, possible)
    found = await deps.repo.task_and_chunks(task_id, chunk_ids, sorted(asked))
    if not found.stored:
        # Not stored (yet): a submission by another system, which the parser registers; the log
        # starts with the task's next event. Nobody can watch a task that is not stored.
        return
    told = [
        policy.keys_at_most(e, found.chunk_status.get(e.chunk_id) if isinstance(e, ChunkSummarized) else None)
        for e in events
    ]
    if all(keys is not None for keys in told):
        deps.known.add(task_id, found.stored_keys)
        have = found.stored_keys | (possible - asked)
        # Nothing new to tell from every chunk-created after the first of a document, and a redelivery.
        events = [e for e, keys in zip(events, told, strict=True) if not set(keys or ()) <= have]
        if not events:
            return
    async with deps.repo.locked(task_id) as tx:  # the state each entry shows is read under the task's lock
        # Those known stored (the milestones every chunk's end brings along) are neither asked nor sent.
        entries = [e for e in await _entries(tx, events) if deps.known.unknown(task_id, (e.key,))]
        numbers = await tx.append(entries)
    deps.known.add(task_id, (entry.key for entry in entries))  # stored now, whether new or not
    if numbers:
        log.debug("task %s: progress %d..%d", task_id, numbers[0], numbers[-1])


async def _entries(tx: TaskLog, events: list[Event]) -> list[policy.Entry]:
    """What the events add to the log, as the task's stored state shows it."""
    view = await tx.task_view()
    if view is None:
        return []
    ended = await tx.chunks_by_id([e.chunk_id for e in events if isinstance(e, ChunkSummarized)])
    shown = policy.progress(view)  # one view, one progress for all of them
    out: list[policy.Entry] = []
    for event in events:
        if isinstance(event, ChunkSummarized):
            chunks = [c for c in ended if c.chunk_id == event.chunk_id]
        elif isinstance(event, DocumentMerged):
            chunks = await tx.chunks(event.document_id)
        elif isinstance(event, TaskEvent) and event.status in TASK_FINAL:
            chunks = await tx.chunks()
        else:
            chunks = []
        out.extend(policy.entries_for(event, view, chunks, shown))
    return out
