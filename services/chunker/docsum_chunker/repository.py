"""The chunker's SQL."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from docsum_shared.approval import Approved
from docsum_shared.states import DocumentStatus, TaskStatus
from docsum_shared.text import estimate_tokens_upper

from .policy import ChunkRow, HoldRule


@dataclass(frozen=True)
class ParsedDocument:
    status: DocumentStatus
    text: str | None
    task_status: TaskStatus


class ChunkRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def load(self, document_id: str) -> ParsedDocument | None:
        row = await self.pool.fetchrow(
            "SELECT d.status, x.text, t.status AS task_status FROM documents d JOIN tasks t ON t.id = d.task_id"
            " LEFT JOIN document_texts x ON x.document_id = d.id WHERE d.id = $1",
            document_id,
        )
        return (
            None
            if row is None
            else ParsedDocument(DocumentStatus(row["status"]), row["text"], TaskStatus(row["task_status"]))
        )

    async def stored_chunks(self, document_id: str) -> list[ChunkRow]:
        rows = await self.pool.fetch(
            "SELECT id, chunk_index FROM chunks WHERE document_id = $1 ORDER BY chunk_index", document_id
        )
        return [ChunkRow(r["id"], r["chunk_index"]) for r in rows]

    async def store_chunks(self, document_id: str, rows: list[ChunkRow], hold: HoldRule | None = None) -> str | None:
        """All chunk rows and the document's move to SUMMARIZING, in one transaction. With `hold`, the
        task's plan (every document cut so far) is checked against its owner's ceiling and the plan
        approved before in the same transaction, under the task's row lock, and a task over both is held
        AWAITING_APPROVAL with the plan it asks for: returns why (None: not held)."""
        records = [
            (
                r.id,
                document_id,
                r.index,
                r.chunk.start,
                r.chunk.end,
                r.chunk.text,
                r.chunk.context_before,
                r.chunk.context_after,
                # the prompt-token estimate the gateway sums for a task's remaining work
                estimate_tokens_upper(r.chunk.context_before + r.chunk.text + r.chunk.context_after),
            )
            for r in rows
            if r.chunk is not None
        ]
        async with self.pool.acquire() as conn, conn.transaction():
            task = await conn.fetchrow(
                "SELECT t.id, t.owner, t.approved_calls, t.approved_cost_usd FROM tasks t"
                " JOIN documents d ON d.task_id = t.id"
                " WHERE d.id = $1 FOR UPDATE OF t",
                document_id,
            )
            moved = await conn.fetchval(
                "UPDATE documents SET status = $2, chunk_total = $3, pending_token_estimate = $5,"
                " chunks_completed = 0, chunks_failed = 0, updated_at = now()"
                " WHERE id = $1 AND status = $4 RETURNING id",
                document_id,
                DocumentStatus.SUMMARIZING,
                len(rows),
                DocumentStatus.CHUNKING,
                sum(record[8] for record in records),
            )
            if moved is None:
                return None
            await conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, context_before,"
                " context_after, token_estimate) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                " ON CONFLICT (id) DO NOTHING",
                records,
            )
            if hold is None or task is None:
                return None
            planned = await conn.fetchrow(
                "SELECT coalesce(array_agg(chunk_total) FILTER (WHERE chunk_total IS NOT NULL), '{}') AS chunks,"
                " coalesce(sum(pending_token_estimate), 0)::bigint AS prompt_tokens"
                " FROM documents WHERE task_id = $1",
                task["id"],
            )
            approved = (
                Approved(task["approved_calls"], task["approved_cost_usd"])
                if task["approved_calls"] is not None
                else None
            )
            waits = hold(task["owner"], list(planned["chunks"]), planned["prompt_tokens"], approved)
            if waits is None:
                return None
            # A paused task is held too (resuming it must not skip the owner's approval), and one already
            # waiting is asked for its whole plan, this document included.
            held = await conn.fetchval(
                "UPDATE tasks SET status = $2, hold_reason = $3, held_calls = $5, held_cost_usd = $6,"
                " updated_at = now() WHERE id = $1 AND status = ANY($4::text[]) RETURNING id",
                task["id"],
                TaskStatus.AWAITING_APPROVAL,
                waits.reason,
                [TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.PAUSED, TaskStatus.AWAITING_APPROVAL],
                waits.calls,
                waits.cost_usd,
            )
            return waits.reason if held is not None else None

    async def fail(self, document_id: str, error: str) -> None:
        """The document fails before any chunk row is stored (a guarded transition from CHUNKING)."""
        await self.pool.execute(
            "UPDATE documents SET status = $2, error = $3, updated_at = now() WHERE id = $1 AND status = $4",
            document_id,
            DocumentStatus.FAILED,
            error,
            DocumentStatus.CHUNKING,
        )
