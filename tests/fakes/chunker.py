"""The chunker's repository in memory, with the rules of docsum_chunker.repository: chunks stored only
for a document still CHUNKING, its task held for approval only from the statuses that may wait, and all
of one transaction kept or none of it (tests/repositories/chunker.py proves it)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from docsum_chunker.policy import ChunkRef, CutChunk
from docsum_chunker.repository import HOLDS_FROM, LockedTask, ParsedDocument, TaskCuts, token_estimate
from docsum_shared.approval import Approved, Hold
from docsum_shared.states import DocumentStatus, TaskStatus


@dataclass
class TaskRow:
    owner: str
    status: TaskStatus = TaskStatus.PROCESSING
    approved: Approved | None = None  # the plan the owner said yes to
    asked: Hold | None = None  # the plan the owner is asked to approve (hold_reason, held_calls, held_cost_usd)


@dataclass
class DocumentRow:
    task_id: str
    status: DocumentStatus = DocumentStatus.CHUNKING
    text: str | None = None
    chunk_total: int | None = None
    prompt_tokens: int = 0
    error: str | None = None


@dataclass
class ChunkerState:
    tasks: dict[str, TaskRow] = field(default_factory=dict)
    documents: dict[str, DocumentRow] = field(default_factory=dict)
    chunks: dict[str, tuple[str, ChunkRef]] = field(default_factory=dict)  # chunk id -> its document, itself


class FakeChunkTransaction:
    def __init__(self, state: ChunkerState, document_id: str, task: LockedTask | None) -> None:
        self._state = state
        self._document_id = document_id
        self.task = task

    async def store_chunks(self, rows: Sequence[CutChunk], *, trace_id: str | None = None) -> bool:
        doc = self._state.documents.get(self._document_id)
        if doc is None or doc.status is not DocumentStatus.CHUNKING:
            return False
        doc.status, doc.chunk_total = DocumentStatus.SUMMARIZING, len(rows)
        doc.prompt_tokens = sum(token_estimate(r) for r in rows)
        for r in rows:
            self._state.chunks.setdefault(r.id, (self._document_id, ChunkRef(r.id, r.index)))
        return True

    async def cuts(self) -> TaskCuts:
        if self.task is None:
            return TaskCuts((), 0)
        cut = [d for d in self._state.documents.values() if d.task_id == self.task.id]
        counts = tuple(d.chunk_total for d in cut if d.chunk_total is not None)
        return TaskCuts(counts, sum(d.prompt_tokens for d in cut))

    async def hold(self, waits: Hold) -> bool:
        task = self._state.tasks.get(self.task.id) if self.task is not None else None
        if task is None or task.status not in HOLDS_FROM:
            return False
        task.status, task.asked = TaskStatus.AWAITING_APPROVAL, waits
        return True


class FakeChunkRepository:
    transaction = FakeChunkTransaction  # what `locked` gives

    def __init__(self) -> None:
        self.state = ChunkerState()
        self.transactions = 0  # locked() entered: a test proves a document was not cut
        self._lock = asyncio.Lock()  # the task's row lock, for every task at once

    # --- seeding ------------------------------------------------------------------------------------

    @classmethod
    def holding(cls, document_id: str, doc: ParsedDocument, owner: str = "alice") -> FakeChunkRepository:
        """A repository holding one document as `load` would return it (its task is "t")."""
        repo = cls()
        repo.state.tasks["t"] = TaskRow(owner, doc.task_status)
        repo.state.documents[document_id] = DocumentRow("t", doc.status, doc.text)
        return repo

    def add_chunks(self, document_id: str, chunks: Sequence[ChunkRef]) -> None:
        for chunk in chunks:
            self.state.chunks[chunk.id] = (document_id, chunk)

    @property
    def documents(self) -> dict[str, DocumentRow]:
        return self.state.documents

    @property
    def tasks(self) -> dict[str, TaskRow]:
        return self.state.tasks

    # --- the repository -----------------------------------------------------------------------------

    async def load(self, document_id: str) -> ParsedDocument | None:
        doc = self.state.documents.get(document_id)
        if doc is None:
            return None
        return ParsedDocument(doc.status, doc.text, self.state.tasks[doc.task_id].status)

    async def stored_chunks(self, document_id: str) -> list[ChunkRef]:
        return sorted((c for d, c in self.state.chunks.values() if d == document_id), key=lambda c: c.index)

    @asynccontextmanager
    async def locked(self, document_id: str, *, task: bool = True) -> AsyncIterator[FakeChunkTransaction]:
        async with self._lock:
            self.transactions += 1
            staged = copy.deepcopy(self.state)  # kept only if the block ends without an exception
            doc = staged.documents.get(document_id)
            row = staged.tasks.get(doc.task_id) if doc is not None and task else None
            locked = LockedTask(doc.task_id, row.owner, row.approved) if doc is not None and row else None
            yield self.transaction(staged, document_id, locked)
            self.state = staged

    async def fail(self, document_id: str, error: str) -> None:
        async with self._lock:
            doc = self.state.documents.get(document_id)
            if doc is not None and doc.status is DocumentStatus.CHUNKING:
                doc.status, doc.error = DocumentStatus.FAILED, error
