"""The gateway's SQL: registering tasks and reading them back for their owner only."""

from __future__ import annotations

import struct
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus

from .uploads import UploadedFile


@dataclass(frozen=True)
class NewDocument:
    id: str
    file: UploadedFile
    filename: str


def new_id() -> str:
    """Task and document ids: 122 random bits, so nobody can guess another's."""
    return str(uuid.uuid4())


# The (class, hash) key space of advisory locks, apart from the single-key locks other services take.
_BLOB_LOCK_CLASS = 0x626C6F62  # "blob"
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_COPY_TRAILER = struct.pack("!h", -1)


async def _blob_rows(files: list[UploadedFile]) -> AsyncIterator[bytes]:
    """COPY ... (FORMAT binary) rows (sha256, data, size_bytes), each file's data read block by block
    from its spool: the bytes go to PostgreSQL without ever being whole in memory."""
    yield _COPY_HEADER
    for f in files:
        sha = f.sha256.encode()
        yield struct.pack("!hi", 3, len(sha)) + sha + struct.pack("!i", f.size)
        async for block in f.spool.blocks():
            yield block
        yield struct.pack("!iq", 8, f.size)
    yield _COPY_TRAILER


async def store_blobs(conn: asyncpg.Connection, files: list[UploadedFile]) -> None:
    """Store each distinct file once (by sha256), in the caller's transaction. A transaction-scoped
    advisory lock per hash (taken in order) makes concurrent uploads of the same bytes wait for each
    other instead of colliding on the primary key (two hashes sharing a lock key only wait for each
    other); only the hashes not stored yet are copied."""
    by_hash = {f.sha256: f for f in files}
    hashes = sorted(by_hash)
    await conn.execute(
        "SELECT pg_advisory_xact_lock($2, hashtext(h)) FROM (SELECT unnest($1::text[]) AS h ORDER BY 1) s",
        hashes,
        _BLOB_LOCK_CLASS,
    )
    stored = {r["sha256"] for r in await conn.fetch("SELECT sha256 FROM blobs WHERE sha256 = ANY($1::text[])", hashes)}
    missing = [by_hash[h] for h in hashes if h not in stored]
    if missing:
        await conn.copy_to_table(
            "blobs", source=_blob_rows(missing), columns=["sha256", "data", "size_bytes"], format="binary"
        )


async def create_task(
    pool: asyncpg.Pool, owner: str, title: str | None, documents: list[NewDocument], options: TaskOptions
) -> str:
    task_id = new_id()
    async with pool.acquire() as conn, conn.transaction():
        await store_blobs(conn, [d.file for d in documents])
        await conn.execute(
            "INSERT INTO tasks (id, owner, title, status, options) VALUES ($1, $2, $3, $4, $5)",
            task_id,
            owner,
            title,
            TaskStatus.PROCESSING,
            options.model_dump_json(),
        )
        await conn.executemany(
            "INSERT INTO documents (id, task_id, position, filename, content_type, blob_sha256, size_bytes, status)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            [
                (d.id, task_id, i, d.filename, d.file.content_type, d.file.sha256, d.file.size, DocumentStatus.PENDING)
                for i, d in enumerate(documents)
            ],
        )
    return task_id


async def get_task(pool: asyncpg.Pool, owner: str, task_id: str) -> tuple[asyncpg.Record, list[asyncpg.Record]] | None:
    task = await pool.fetchrow("SELECT * FROM tasks WHERE id = $1 AND owner = $2", task_id, owner)
    if task is None:
        return None
    documents = await pool.fetch(
        "SELECT d.id, d.filename, d.status, d.size_level, d.text_chars, d.chunk_total, d.summary,"
        " d.summary_model, d.error, d.coverage, d.failed_chunks, d.truncated_parts,"
        " d.chunks_completed AS chunks_done, d.chunks_failed"
        " FROM documents d WHERE d.task_id = $1 ORDER BY d.position",
        task_id,
    )
    return task, documents


async def usage_rows(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """Usage per document (None: the task-level merge) and model, from the calls ledger."""
    return await pool.fetch(
        "SELECT document_id, model, coalesce(sum(prompt_tokens), 0) AS prompt_tokens,"
        " coalesce(sum(completion_tokens), 0) AS completion_tokens,"
        " count(*) FILTER (WHERE NOT cached) AS llm_calls, count(*) FILTER (WHERE cached) AS cached_calls"
        " FROM llm_calls WHERE task_id = $1 GROUP BY document_id, model",
        task_id,
    )


async def remaining_work(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record:
    """Chunks still to summarize and their estimated prompt tokens (counted on each document as its chunks
    finish, see migration 0006: a sum over the task's documents, not its chunks), and the recent call rate."""
    return await pool.fetchrow(
        "SELECT coalesce(sum(d.chunk_total - d.chunks_completed - d.chunks_failed), 0)::bigint AS chunks,"
        "  coalesce(sum(d.pending_token_estimate), 0)::bigint AS prompt_tokens,"
        "  (SELECT count(*) FROM llm_calls WHERE task_id = $1 AND NOT cached"
        "   AND created_at > now() - interval '60 seconds') AS calls_last_minute"
        " FROM documents d WHERE d.task_id = $1",
        task_id,
    )


async def learned_budget(pool: asyncpg.Pool, key: str) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT context_tokens, learned_from FROM llm_endpoints WHERE key = $1", key)


async def recovery(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT coalesce(sum(c.attempts), 0) AS attempts, coalesce(sum(c.interruptions), 0) AS interruptions"
        " FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1",
        task_id,
    )


async def failures(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT d.id AS document_id, d.filename, c.chunk_index, coalesce(c.error, d.error) AS error, c.attempts"
        " FROM documents d LEFT JOIN chunks c ON c.document_id = d.id AND c.status = $2"
        " WHERE d.task_id = $1 AND (d.status = $3 OR c.id IS NOT NULL) ORDER BY d.position, c.chunk_index",
        task_id,
        ChunkStatus.FAILED,
        DocumentStatus.FAILED,
    )


async def owns(pool: asyncpg.Pool, owner: str, task_id: str) -> bool:
    return bool(await pool.fetchval("SELECT 1 FROM tasks WHERE id = $1 AND owner = $2", task_id, owner))


async def task_status(pool: asyncpg.Pool, task_id: str) -> str:
    return await pool.fetchval("SELECT status FROM tasks WHERE id = $1", task_id)


async def list_tasks(pool: asyncpg.Pool, owner: str, limit: int) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT id, title, status, created_at FROM tasks WHERE owner = $1 ORDER BY created_at DESC LIMIT $2",
        owner,
        limit,
    )
