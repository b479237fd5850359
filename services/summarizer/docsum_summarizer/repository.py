"""The summarizer's SQL."""

from __future__ import annotations

import asyncpg
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus

from .handler import StoredChunk


async def load(pool: asyncpg.Pool, chunk_id: str) -> StoredChunk | None:
    row = await pool.fetchrow(
        "SELECT c.status, c.text, c.context_before, c.context_after, d.status AS document_status,"
        " t.status AS task_status"
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
    )


async def start_attempt(pool: asyncpg.Pool, chunk_id: str) -> None:
    await pool.execute(
        "UPDATE chunks SET status = $2, attempts = attempts + 1, updated_at = now()"
        " WHERE id = $1 AND status IN ('PENDING', 'SUMMARIZING')",
        chunk_id,
        ChunkStatus.SUMMARIZING,
    )


async def complete(pool: asyncpg.Pool, chunk_id: str, summary: str, model: str) -> None:
    await pool.execute(
        "UPDATE chunks SET status = $2, summary = $3, summary_model = $4, error = NULL, updated_at = now()"
        " WHERE id = $1 AND status IN ('PENDING', 'SUMMARIZING')",
        chunk_id,
        ChunkStatus.COMPLETED,
        summary,
        model,
    )


async def fail(pool: asyncpg.Pool, chunk_id: str, error: str) -> None:
    await pool.execute(
        "UPDATE chunks SET status = $2, error = $3, updated_at = now()"
        " WHERE id = $1 AND status IN ('PENDING', 'SUMMARIZING')",
        chunk_id,
        ChunkStatus.FAILED,
        error,
    )
