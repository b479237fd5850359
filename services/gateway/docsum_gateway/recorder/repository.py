"""The progress log's SQL: append entries (numbered per task, once per step), read them back."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from .policy import ChunkRow, Entry

# Every append notifies this channel with the task id: the gateways' streams wake up at once (a
# stream that misses a notification still polls).
CHANNEL = "docsum_progress"


@dataclass(frozen=True)
class Logged:
    """An entry as stored: its number in the task's log, and what it says."""

    seq: int
    body: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return {"seq": self.seq, **self.body}


async def append(
    pool: asyncpg.Pool, task_id: str, make: Callable[[asyncpg.Connection], Awaitable[Sequence[Entry]]]
) -> list[int]:
    """Store the entries `make` gives that are not stored yet (by key), numbered after the task's last
    one; their numbers.

    The head row's lock serializes every append of the task (whichever gateway makes it): `make` reads
    the stored state under it, so each entry shows the task at least as far as the entry before it, the
    check for keys already stored sees every committed entry, and numbers commit in order. `make` reads
    on the lock's own connection: reading through the pool while holding the lock would deadlock once
    every other connection is held by an append waiting for this very lock."""
    async with pool.acquire() as conn, conn.transaction():
        head = await conn.fetchval(
            "INSERT INTO progress_heads (task_id, seq) VALUES ($1, 0)"
            " ON CONFLICT (task_id) DO UPDATE SET seq = progress_heads.seq RETURNING seq",
            task_id,
        )
        entries = await make(conn)
        if not entries:
            return []
        stored = {
            r["dedupe_key"]
            for r in await conn.fetch(
                "SELECT dedupe_key FROM progress_log WHERE task_id = $1 AND dedupe_key = ANY($2::text[])",
                task_id,
                [e.key for e in entries],
            )
        }
        new: list[Entry] = []
        for entry in entries:
            if entry.key not in stored:
                stored.add(entry.key)
                new.append(entry)
        if not new:
            return []
        numbers = list(range(head + 1, head + 1 + len(new)))
        await conn.execute(  # the entries, the head moved past them, the streams woken: one round trip
            "WITH added AS (INSERT INTO progress_log (task_id, seq, kind, dedupe_key, body)"
            "   SELECT $1, seq, kind, dedupe_key, body::jsonb"
            "   FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[]) AS e(seq, kind, dedupe_key, body)"
            "   RETURNING 1),"
            " moved AS (UPDATE progress_heads SET seq = $6 WHERE task_id = $1 RETURNING 1)"
            " SELECT pg_notify($7, $1), (SELECT count(*) FROM added), (SELECT count(*) FROM moved)",
            task_id, numbers, [e.kind for e in new], [e.key for e in new], [json.dumps(e.body) for e in new],
            numbers[-1], CHANNEL,
        )  # fmt: skip
        return numbers


async def entries_after(pool: asyncpg.Pool, task_id: str, after: int, limit: int = 500) -> list[Logged]:
    rows = await pool.fetch(
        "SELECT seq, body FROM progress_log WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        task_id,
        after,
        limit,
    )
    return [Logged(r["seq"], json.loads(r["body"])) for r in rows]


async def head(pool: asyncpg.Pool, task_id: str) -> int:
    """The number of the task's last entry (0: none yet)."""
    return int(await pool.fetchval("SELECT seq FROM progress_heads WHERE task_id = $1", task_id) or 0)


async def chunks(pool: asyncpg.Pool, task_id: str, document_id: str | None = None) -> list[ChunkRow]:
    """The stored chunks of a document (or of every document of the task)."""
    rows = await pool.fetch(
        "SELECT c.id, c.document_id, c.chunk_index, c.status FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.task_id = $1 AND ($2::text IS NULL OR c.document_id = $2)",
        task_id,
        document_id,
    )
    return [ChunkRow(r["id"], r["document_id"], r["chunk_index"], r["status"]) for r in rows]


async def chunks_by_id(pool: asyncpg.Pool, chunk_ids: Sequence[str]) -> list[ChunkRow]:
    if not chunk_ids:
        return []
    rows = await pool.fetch(
        "SELECT id, document_id, chunk_index, status FROM chunks WHERE id = ANY($1::text[])", list(chunk_ids)
    )
    return [ChunkRow(r["id"], r["document_id"], r["chunk_index"], r["status"]) for r in rows]


async def stream_state(pool: asyncpg.Pool, task_id: str) -> tuple[str | None, int, str | None]:
    """(the task's status, the number of its last entry, that entry's kind): tells a stream whether it is over."""
    row = await pool.fetchrow(
        "SELECT t.status, h.seq, l.kind FROM tasks t LEFT JOIN progress_heads h ON h.task_id = t.id"
        " LEFT JOIN progress_log l ON l.task_id = t.id AND l.seq = h.seq WHERE t.id = $1",
        task_id,
    )
    if row is None:
        return None, 0, None
    return row["status"], int(row["seq"] or 0), row["kind"]


async def stored_keys(pool: asyncpg.Pool, task_id: str, keys: Sequence[str]) -> set[str]:
    """Those of `keys` that have their entry in the task's log."""
    rows = await pool.fetch(
        "SELECT dedupe_key FROM progress_log WHERE task_id = $1 AND dedupe_key = ANY($2::text[])", task_id, list(keys)
    )
    return {r["dedupe_key"] for r in rows}


async def task_and_chunks(pool: asyncpg.Pool, task_id: str, chunk_ids: Sequence[str]) -> tuple[bool, dict[str, str]]:
    """Whether the task is stored, and the status of those of its chunks that are stored."""
    row = await pool.fetchrow(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1) AS stored,"
        " (SELECT coalesce(jsonb_object_agg(id, status), '{}') FROM chunks WHERE id = ANY($2::text[])) AS chunks",
        task_id,
        list(chunk_ids),
    )
    return bool(row["stored"]), json.loads(row["chunks"])
