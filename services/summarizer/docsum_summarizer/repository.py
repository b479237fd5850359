"""The summarizer's SQL, including the lease that keeps one chunk in one process's hands."""

from __future__ import annotations

from enum import Enum

import asyncpg

from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.prompts import PROMPT_VERSION

from .handler import StoredChunk


class Claim(Enum):
    TAKEN = "taken"  # the lease is ours: call the LLM
    HELD = "held"  # another live process holds it: wait
    UNAVAILABLE = "unavailable"  # final already, or the task no longer wants it


async def load(pool: asyncpg.Pool, chunk_id: str) -> StoredChunk | None:
    row = await pool.fetchrow(
        "SELECT c.status, c.text, c.context_before, c.context_after, d.status AS document_status,"
        " t.status AS task_status, t.options"
        " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
        " WHERE c.id = $1",
        chunk_id,
    )
    if row is None:
        return None
    return StoredChunk(
        ChunkStatus(row["status"]),
        row["text"],
        row["context_before"],
        row["context_after"],
        DocumentStatus(row["document_status"]),
        TaskStatus(row["task_status"]),
        TaskOptions.from_stored(row["options"]),
    )


async def claim(pool: asyncpg.Pool, chunk_id: str, owner: str, ttl_s: float) -> Claim:
    """Take the chunk's lease if it is free, expired or already ours (a takeover counts as an interruption)."""
    taken = await pool.fetchval(
        "UPDATE chunks SET status = 'SUMMARIZING', attempts = attempts + 1,"
        " interruptions = interruptions + (status = 'SUMMARIZING' AND lease_owner IS DISTINCT FROM $2)::int,"
        " lease_owner = $2, lease_expires_at = now() + make_interval(secs => $3), updated_at = now()"
        " WHERE id = $1 AND EXISTS (SELECT 1 FROM documents d JOIN tasks t ON t.id = d.task_id"
        "   WHERE d.id = chunks.document_id AND t.status IN ('PENDING', 'PROCESSING'))"  # not paused meanwhile
        " AND (status = 'PENDING' OR (status = 'SUMMARIZING'"
        "   AND (lease_owner = $2 OR lease_expires_at IS NULL OR lease_expires_at < now())))"
        " RETURNING id",
        chunk_id,
        owner,
        ttl_s,
    )
    if taken is not None:
        return Claim.TAKEN
    status = await pool.fetchval("SELECT status FROM chunks WHERE id = $1", chunk_id)
    return Claim.HELD if status == ChunkStatus.SUMMARIZING else Claim.UNAVAILABLE


async def renew(pool: asyncpg.Pool, chunk_id: str, owner: str, ttl_s: float) -> None:
    await pool.execute(
        "UPDATE chunks SET lease_expires_at = now() + make_interval(secs => $3)"
        " WHERE id = $1 AND lease_owner = $2 AND status = 'SUMMARIZING'",
        chunk_id,
        owner,
        ttl_s,
    )


async def release(pool: asyncpg.Pool, chunk_id: str, owner: str) -> None:
    """Hand the chunk back untouched (shutting down mid-call): the next owner need not wait for expiry."""
    await pool.execute(
        "UPDATE chunks SET status = 'PENDING', lease_owner = NULL, lease_expires_at = NULL"
        " WHERE id = $1 AND lease_owner = $2 AND status = 'SUMMARIZING'",
        chunk_id,
        owner,
    )


async def complete(pool: asyncpg.Pool, chunk_id: str, task_id: str, summary: str, model: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE chunks SET status = 'COMPLETED', summary = $2, summary_model = $3, error = NULL,"
            f" summary_prompt_version = '{PROMPT_VERSION}',"
            " lease_owner = NULL, lease_expires_at = NULL, updated_at = now()"
            " WHERE id = $1 AND status IN ('PENDING', 'SUMMARIZING')",
            chunk_id,
            summary,
            model,
        )
        await conn.execute("UPDATE tasks SET last_active_at = now() WHERE id = $1", task_id)


async def fail(pool: asyncpg.Pool, chunk_id: str, error: str) -> None:
    await pool.execute(
        "UPDATE chunks SET status = 'FAILED', error = $2, lease_owner = NULL, lease_expires_at = NULL,"
        " updated_at = now() WHERE id = $1 AND status IN ('PENDING', 'SUMMARIZING')",
        chunk_id,
        error,
    )


async def record_error(pool: asyncpg.Pool, chunk_id: str, error: str, *, next_attempt: bool) -> None:
    """The error of a try that failed for a passing reason; `next_attempt`: the call is tried again at
    once, and that try counts as one more attempt (the first attempt was counted by the claim)."""
    await pool.execute(
        "UPDATE chunks SET error = $2, attempts = attempts + $3 WHERE id = $1 AND status = 'SUMMARIZING'",
        chunk_id,
        error,
        int(next_attempt),
    )
