"""The chunker's SQL: a document's chunks stored, and its task held for approval, under the task's row lock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from docsum_shared import lifecycle, outbox, telemetry
from docsum_shared.approval import Approved, Hold
from docsum_shared.db import CHUNKS_STORED
from docsum_shared.positions import chunk_window
from docsum_shared.readmodel import queries
from docsum_shared.settings import LLMSettings
from docsum_shared.states import DocumentStatus, TaskStatus
from docsum_shared.text import estimate_tokens_upper

from .chunking import Chunk, owned_slices
from .policy import ChunkRef, CutChunk


@dataclass(frozen=True)
class ParsedDocument:
    status: DocumentStatus
    text: str | None
    task_status: TaskStatus
    # A new version's (its task names a previous task, and that task has a document of the same key): the
    # owned slices of that document's chunks, in order, for the cut to keep those it finds again.
    previous: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockedTask:
    """The task of the document being cut, its row locked: whose it is, and the plan approved before."""

    id: str
    owner: str
    approved: Approved | None


@dataclass(frozen=True)
class TaskCuts:
    """Every document of a task cut so far: how many chunks each has, and their prompt tokens."""

    chunk_counts: tuple[int, ...]
    prompt_tokens: int


# A task held from these statuses: a paused one too (resuming it must not skip the owner's approval), and
# one already waiting, which is then asked for its whole plan.
HOLDS_FROM = (TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.PAUSED, TaskStatus.AWAITING_APPROVAL)


def _window(starts: Sequence[int] | None, cut: CutChunk) -> tuple[int | None, list[int] | None]:
    """Where the chunk lies among its document's units (positions.chunk_window): what the summarizer
    reads with the chunk; none for a text stored without positions."""
    if starts is None:
        return None, None
    before, inside = chunk_window(starts, cut.chunk.start, cut.chunk.end)
    return before, list(inside)


def token_estimate(cut: CutChunk) -> int:
    """The prompt-token estimate the gateway sums for a task's remaining work."""
    chunk = cut.chunk
    return estimate_tokens_upper(chunk.context_before + chunk.text + chunk.context_after)


class ChunkTransaction:
    """What may be read and written while the task's row is locked, in one transaction."""

    def __init__(
        self, conn: asyncpg.Connection, document_id: str, task: LockedTask | None, settings: LLMSettings | None = None
    ) -> None:
        self._conn = conn
        self._document_id = document_id
        self.task = task
        self._settings = settings

    async def store_chunks(self, rows: Sequence[CutChunk], *, trace_id: str | None = None) -> bool:
        """Every chunk row and the document's move from CHUNKING to SUMMARIZING; False (nothing stored)
        when the document is not CHUNKING any more. `trace_id`: the envelope's of the event they were
        cut for, which their announcement carries on."""
        starts = await self._conn.fetchval(
            "SELECT position_starts FROM document_texts WHERE document_id = $1", self._document_id
        )
        trace = telemetry.carried()  # the admission announces them later: in this trace
        records = [
            (
                r.id, self._document_id, r.index, r.chunk.start, r.chunk.end, r.chunk.text, r.chunk.context_before,
                r.chunk.context_after, token_estimate(r), *_window(starts, r), trace_id, trace,
            )
            for r in rows
        ]  # fmt: skip
        moved = await self._conn.fetchval(
            "UPDATE documents SET status = $2, chunk_total = $3, pending_token_estimate = $5,"
            " chunks_completed = 0, chunks_failed = 0, updated_at = now()"
            " WHERE id = $1 AND status = $4 RETURNING id",
            self._document_id,
            DocumentStatus.SUMMARIZING,
            len(rows),
            DocumentStatus.CHUNKING,
            sum(record[8] for record in records),
        )
        if moved is None:
            return False
        await self._conn.executemany(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, context_before,"
            " context_after, token_estimate, units_before, unit_starts, trace_id, traceparent)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::int[], $12, $13)"
            " ON CONFLICT (id) DO NOTHING",
            records,
        )
        # The summarizers' admission wakes when this commits, instead of at its next look (notifications
        # are delivered at commit, and not at all on a rollback).
        await self._conn.execute("SELECT pg_notify($1, '')", CHUNKS_STORED)
        return True

    async def cuts(self) -> TaskCuts:
        """The locked task's documents cut so far (this transaction's included)."""
        if self.task is None:
            return TaskCuts((), 0)
        planned = await self._conn.fetchrow(
            "SELECT coalesce(array_agg(chunk_total) FILTER (WHERE chunk_total IS NOT NULL), '{}') AS chunks,"
            " coalesce(sum(pending_token_estimate), 0)::bigint AS prompt_tokens"
            " FROM documents WHERE task_id = $1",
            self.task.id,
        )
        return TaskCuts(tuple(planned["chunks"]), planned["prompt_tokens"])

    async def hold(self, waits: Hold) -> bool:
        """The task waits AWAITING_APPROVAL for the plan `waits` asks for; False when it is past holding
        (cancelled, finished)."""
        if self.task is None:
            return False
        # The status it had (the row is locked: no one moves it meanwhile): a task held already, as another
        # of its documents is cut, was told of its hold then.
        was = await self._conn.fetchval(
            "UPDATE tasks t SET status = $2, hold_reason = $3, held_calls = $5, held_cost_usd = $6,"
            " updated_at = now() FROM (SELECT status FROM tasks WHERE id = $1) o"
            " WHERE t.id = $1 AND t.status = ANY($4::text[]) RETURNING o.status",
            self.task.id,
            TaskStatus.AWAITING_APPROVAL,
            waits.reason,
            list(HOLDS_FROM),
            waits.calls,
            waits.cost_usd,
        )
        if was is None:
            return False
        if was != TaskStatus.AWAITING_APPROVAL and self._settings is not None:
            await outbox.enqueue_task(self._conn, self._settings, self.task.id, TaskStatus.AWAITING_APPROVAL)
        return True


class ChunkRepository:
    def __init__(self, pool: asyncpg.Pool, settings: LLMSettings | None = None) -> None:
        self.pool = pool
        # The prices a held task's result shows, in the webhook deliveries its hold owes (None: none are
        # written, as in the repository contract's cases, which have no endpoints).
        self.settings = settings

    async def load(self, document_id: str) -> ParsedDocument | None:
        row = await self.pool.fetchrow(
            "SELECT d.status, x.text, t.status AS task_status, t.previous_task, d.task_id"
            " FROM documents d JOIN tasks t ON t.id = d.task_id"
            " LEFT JOIN document_texts x ON x.document_id = d.id WHERE d.id = $1",
            document_id,
        )
        if row is None:
            return None
        status = DocumentStatus(row["status"])
        previous: tuple[str, ...] = ()
        if row["previous_task"] is not None and status is DocumentStatus.CHUNKING:  # only a cut reads them
            previous = await self._previous_slices(row["task_id"], document_id)
        return ParsedDocument(status, row["text"], TaskStatus(row["task_status"]), previous)

    async def _previous_slices(self, task_id: str, document_id: str) -> tuple[str, ...]:
        """The owned slices of the chunks of the document this one is a new version of (paired as the
        task's view pairs them: queries.previous_document), in order; none when it has no such document."""
        previous = await queries.previous_document(self.pool, task_id, document_id)
        if previous is None:
            return ()
        rows = await self.pool.fetch(
            "SELECT chunk_index, start_char, end_char, text FROM chunks WHERE document_id = $1 ORDER BY chunk_index",
            previous,
        )
        return tuple(
            owned_slices([Chunk(r["chunk_index"], r["start_char"], r["end_char"], r["text"], "", "") for r in rows])
        )

    async def stored_chunks(self, document_id: str) -> list[ChunkRef]:
        rows = await self.pool.fetch(
            "SELECT id, chunk_index FROM chunks WHERE document_id = $1 ORDER BY chunk_index", document_id
        )
        return [ChunkRef(r["id"], r["chunk_index"]) for r in rows]

    @asynccontextmanager
    async def locked(self, document_id: str, *, task: bool = True) -> AsyncIterator[ChunkTransaction]:
        """One transaction; with `task`, holding the row lock of the document's task: cuts of the task's
        documents, and the decision whether it waits for approval, happen one at a time. An exception
        rolls it all back. Without `task` (no approval to decide: no ceiling is set), the transaction's
        `task` is None and the documents of a task are stored at once, each guarded by its own status
        (B3: 20 documents' cuts waited 1.5 s in all for one another's).

        The lock an UPDATE of the row takes (NO KEY UPDATE), not FOR UPDATE: rows that refer to the task
        (its progress log, its ledger lines, its documents) are written meanwhile, and FOR UPDATE would
        make each of those wait for the cut (their key check takes KEY SHARE)."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = None
            if task:
                row = await conn.fetchrow(
                    "SELECT t.id, t.owner, t.approved_calls, t.approved_cost_usd FROM tasks t"
                    " JOIN documents d ON d.task_id = t.id"
                    " WHERE d.id = $1 FOR NO KEY UPDATE OF t",
                    document_id,
                )
            yield ChunkTransaction(conn, document_id, _locked_task(row), self.settings)

    async def fail(self, document_id: str, error: str) -> None:
        """The document fails before any chunk row is stored (a guarded transition from CHUNKING), with the
        webhook deliveries that owes, in one transaction."""
        await lifecycle.fail_document(self.pool, document_id, error, [DocumentStatus.CHUNKING])


def _locked_task(row: asyncpg.Record | None) -> LockedTask | None:
    if row is None:
        return None
    approved = Approved(row["approved_calls"], row["approved_cost_usd"]) if row["approved_calls"] is not None else None
    return LockedTask(row["id"], row["owner"], approved)
