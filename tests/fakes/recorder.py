"""The progress recorder's repository in memory (docsum_gateway.progress.recorder.repository.ProgressLog):
one lock per task's log, entries numbered in order and stored once per key, kept only when the locked
block ends without raising, what the log told of each document carried from one append to the next."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from docsum_gateway.progress.recorder.policy import Entry, LoggedChunk, compact
from docsum_gateway.progress.recorder.repository import TaskChunks
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel.schemas import ChunkProgress, DocumentView, Estimate, Recovery, TaskView, Usage


@dataclass
class FakeTask:
    status: str
    updated_at: datetime


@dataclass(frozen=True)
class FakeDocument:
    task_id: str
    position: int
    filename: str
    status: str


@dataclass(frozen=True)
class LogRow:
    """An entry as stored: the body compacted, as the streams send it."""

    seq: int
    kind: str
    key: str
    body: dict[str, Any]


@dataclass
class Head:
    seq: int = 0
    told: dict[str, Any] = field(default_factory=dict)


class FakeLockedLog:
    def __init__(self, store: FakeProgressLog, task_id: str, head: Head) -> None:
        self.store, self.task_id, self.head = store, task_id, head
        self.added: list[LogRow] = []

    async def task_view(self) -> TaskView | None:
        return self.store.view(self.task_id)

    async def chunks(self, document_id: str | None = None) -> list[LoggedChunk]:
        docs = self.store.documents
        return [
            c
            for c in self.store.chunks.values()
            if docs[c.document_id].task_id == self.task_id and document_id in (None, c.document_id)
        ]

    async def chunks_by_id(self, chunk_ids: Sequence[str]) -> list[LoggedChunk]:
        return [self.store.chunks[c] for c in chunk_ids if c in self.store.chunks]

    async def append(self, entries: Sequence[Entry]) -> list[int]:
        stored = {row.key for row in [*self.store.log.get(self.task_id, ()), *self.added]}
        new: list[Entry] = []
        for entry in entries:
            if entry.key not in stored:
                stored.add(entry.key)
                new.append(entry)
        if not new:
            return []
        bodies, told = compact([e.body for e in new], self.head.told)
        numbers = list(range(self.head.seq + 1, self.head.seq + 1 + len(new)))
        for n, entry, body in zip(numbers, new, bodies, strict=True):
            self.added.append(LogRow(n, entry.kind, entry.key, json.loads(json.dumps(body))))
        self.head = Head(numbers[-1], told)
        return numbers


class FakeProgressLog:
    locked_log: type[FakeLockedLog] = FakeLockedLog  # what `locked` gives

    def __init__(self) -> None:
        self.tasks: dict[str, FakeTask] = {}
        self.documents: dict[str, FakeDocument] = {}
        self.chunks: dict[str, LoggedChunk] = {}
        self.log: dict[str, list[LogRow]] = {}
        self.heads: dict[str, Head] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def task_and_chunks(self, task_id: str, chunk_ids: Sequence[str], keys: Sequence[str] = ()) -> TaskChunks:
        return TaskChunks(
            task_id in self.tasks,
            {c: self.chunks[c].status for c in chunk_ids if c in self.chunks},
            {row.key for row in self.log.get(task_id, ())} & set(keys),
        )

    @asynccontextmanager
    async def locked(self, task_id: str) -> AsyncIterator[FakeLockedLog]:
        if task_id not in self.tasks:  # the head row names its task
            raise asyncpg.ForeignKeyViolationError(f"no task {task_id} for its progress head")
        async with self._locks.setdefault(task_id, asyncio.Lock()):
            head = self.heads.get(task_id, Head())
            tx = self.locked_log(self, task_id, Head(head.seq, dict(head.told)))
            yield tx
            # Committed: only now do the entries and the moved head show.
            self.heads[task_id] = tx.head
            self.log.setdefault(task_id, []).extend(tx.added)

    async def prune(self, final: Sequence[str], retain_s: float, tasks_at_most: int = 100) -> int:
        before = datetime.now(UTC) - timedelta(seconds=retain_s)
        old = [
            task_id
            for task_id, rows in self.log.items()
            if rows and self.tasks[task_id].status in final and self.tasks[task_id].updated_at < before
        ][:tasks_at_most]
        return sum(len(self.log.pop(task_id)) for task_id in old)  # the heads stay

    def view(self, task_id: str) -> TaskView | None:
        task = self.tasks.get(task_id)
        if task is None:
            return None
        docs = sorted(((i, d) for i, d in self.documents.items() if d.task_id == task_id), key=lambda p: p[1].position)
        return TaskView(
            task_id=task_id, title=None, status=task.status, created_at=task.updated_at, updated_at=task.updated_at,
            summary=None, summary_model=None, error=None, options=TaskOptions(), usage=Usage(),
            estimate=Estimate(remaining_chunks=0, prompt_tokens=0, cost_usd=0.0, eta_s=None), recovery=Recovery(),
            documents=[self._document_view(i, d) for i, d in docs],
        )  # fmt: skip

    def _document_view(self, document_id: str, doc: FakeDocument) -> DocumentView:
        chunks = [c for c in self.chunks.values() if c.document_id == document_id]
        done = sum(c.status == "COMPLETED" for c in chunks)
        failed = sum(c.status == "FAILED" for c in chunks)
        return DocumentView(
            document_id=document_id, filename=doc.filename, status=doc.status, size_level=None, text_chars=None,
            chunks=ChunkProgress(done=done, failed=failed, total=len(chunks) or None), summary=None,
            summary_model=None, error=None, coverage=None, failed_chunks=[], usage=Usage(),
        )  # fmt: skip
