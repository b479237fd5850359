"""The progress log's SQL: append entries (numbered per task, once per step), read them back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncpg

from docsum_shared.readmodel import views
from docsum_shared.readmodel.schemas import TaskView

from ...settings import GatewaySettings
from .policy import Entry, LoggedChunk, compact

# Every append notifies this channel with the task id: the gateways' streams wake up at once (a
# stream that misses a notification still polls).
CHANNEL = "docsum_progress"


@dataclass(frozen=True)
class Logged:
    """An entry as stored: its number in the task's log, its kind, and the entry as JSON text (its
    number included), which is what a stream sends: no stream parses what it only passes on."""

    seq: int
    kind: str
    text: str


@dataclass(frozen=True)
class TaskChunks:
    """Whether a task is stored, the status of those of the asked chunks that are stored, and those of the
    asked keys that have their entry in the task's log."""

    stored: bool
    chunk_status: dict[str, str]
    stored_keys: set[str] = field(default_factory=set)


class StreamState(NamedTuple):
    """What tells a stream whether it is over: the task's status (None: no such task), the number of
    its last entry (0: none yet) and that entry's kind."""

    task_status: str | None
    last_seq: int
    last_kind: str | None


class ProgressLog:
    """The recorder's repository: what it reads before it takes a task's lock, the lock itself (`locked`),
    and pruning. The streams read the log through the functions below it."""

    def __init__(self, pool: asyncpg.Pool, settings: GatewaySettings) -> None:
        self.pool, self.settings = pool, settings

    async def task_and_chunks(self, task_id: str, chunk_ids: Sequence[str], keys: Sequence[str] = ()) -> TaskChunks:
        row = await self.pool.fetchrow(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1) AS stored,"
            " (SELECT coalesce(jsonb_object_agg(id, status), '{}') FROM chunks WHERE id = ANY($2::text[])) AS chunks,"
            " (SELECT coalesce(array_agg(dedupe_key), '{}') FROM progress_log"
            "  WHERE task_id = $1 AND dedupe_key = ANY($3::text[])) AS keys",
            task_id,
            list(chunk_ids),
            list(keys),
        )
        return TaskChunks(bool(row["stored"]), json.loads(row["chunks"]), set(row["keys"]))

    @asynccontextmanager
    async def locked(self, task_id: str) -> AsyncIterator[LockedLog]:
        """The task's log under the lock of its head row, in one transaction, committed when the block
        ends (rolled back if it raises).

        The lock serializes every append of the task (whichever gateway makes it): what is read under it
        shows the task at least as far as the entry before, the check for keys already stored sees every
        committed entry, and numbers commit in order. The reads go through the lock's own connection:
        reading through the pool while holding the lock would deadlock once every other connection is
        held by an append waiting for this very lock."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "INSERT INTO progress_heads (task_id, seq) VALUES ($1, 0)"
                " ON CONFLICT (task_id) DO UPDATE SET seq = progress_heads.seq RETURNING seq, told",
                task_id,
            )
            yield LockedLog(conn, self.settings, task_id, row["seq"], json.loads(row["told"]))

    async def prune(self, final: Sequence[str], retain_s: float, tasks_at_most: int = 100) -> int:
        return await prune(self.pool, final, retain_s, tasks_at_most)


class LockedLog:
    """A task's log while its head row is locked: the stored state an entry shows, and the append."""

    def __init__(
        self, conn: asyncpg.Connection, settings: GatewaySettings, task_id: str, head: int, told: dict[str, Any]
    ) -> None:
        self._conn, self._settings, self.task_id = conn, settings, task_id
        self._head, self._told = head, told

    async def task_view(self) -> TaskView | None:
        """The task as its stored state shows it (None: deleted)."""
        return await views.pipeline_view(self._conn, self._settings, self.task_id)

    async def chunks(self, document_id: str | None = None) -> list[LoggedChunk]:
        """The stored chunks of a document of the task (or of every document of the task)."""
        rows = await self._conn.fetch(
            "SELECT c.id, c.document_id, c.chunk_index, c.status FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE d.task_id = $1 AND ($2::text IS NULL OR c.document_id = $2)",
            self.task_id,
            document_id,
        )
        return [LoggedChunk(r["id"], r["document_id"], r["chunk_index"], r["status"]) for r in rows]

    async def chunks_by_id(self, chunk_ids: Sequence[str]) -> list[LoggedChunk]:
        if not chunk_ids:
            return []
        rows = await self._conn.fetch(
            "SELECT id, document_id, chunk_index, status FROM chunks WHERE id = ANY($1::text[])", list(chunk_ids)
        )
        return [LoggedChunk(r["id"], r["document_id"], r["chunk_index"], r["status"]) for r in rows]

    async def append(self, entries: Sequence[Entry]) -> list[int]:
        """Store those of `entries` that are not stored yet (by key), numbered after the task's last one;
        their numbers."""
        if not entries:
            return []
        conn = self._conn
        stored = {
            r["dedupe_key"]
            for r in await conn.fetch(
                "SELECT dedupe_key FROM progress_log WHERE task_id = $1 AND dedupe_key = ANY($2::text[])",
                self.task_id,
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
        numbers = list(range(self._head + 1, self._head + 1 + len(new)))
        bodies, told = compact([e.body for e in new], self._told)
        await conn.execute(  # the entries, the head moved past them, the streams woken: one round trip
            "WITH added AS (INSERT INTO progress_log (task_id, seq, kind, dedupe_key, body)"
            "   SELECT $1, seq, kind, dedupe_key, body::jsonb"
            "   FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[]) AS e(seq, kind, dedupe_key, body)"
            "   RETURNING 1),"
            " moved AS (UPDATE progress_heads SET seq = $6, told = $8::jsonb WHERE task_id = $1 RETURNING 1)"
            " SELECT pg_notify($7, $1), (SELECT count(*) FROM added), (SELECT count(*) FROM moved)",
            self.task_id, numbers, [e.kind for e in new], [e.key for e in new], [json.dumps(b) for b in bodies],
            numbers[-1], CHANNEL, json.dumps(told),
        )  # fmt: skip
        self._head, self._told = numbers[-1], told
        return numbers


# From the pool: the streams' and routes' reads (any replica serves any task's stream), and pruning.


async def entries_after(pool: asyncpg.Pool, task_id: str, after: int, max_bytes: int, limit: int = 500) -> list[Logged]:
    """The entries after `after`, in order, as many as fit in `max_bytes` of text (the first always):
    what one stream holds at once is bounded by bytes, whatever the backlog."""
    rows = await pool.fetch(
        "SELECT seq, kind, text FROM ("
        "  SELECT seq, kind, text, sum(octet_length(text)) OVER (ORDER BY seq) AS running FROM ("
        "    SELECT seq, kind, (jsonb_build_object('seq', seq) || body)::text AS text FROM progress_log"
        "    WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) AS next) AS sized"
        " WHERE running <= $4 OR seq = (SELECT min(seq) FROM progress_log WHERE task_id = $1 AND seq > $2)"
        " ORDER BY seq",
        task_id, after, limit, max_bytes,
    )  # fmt: skip
    return [Logged(r["seq"], r["kind"], r["text"]) for r in rows]


async def heads(pool: asyncpg.Pool, task_ids: Sequence[str]) -> dict[str, int]:
    """The number of the last entry of each of the tasks (those with a log): one read for every stream."""
    rows = await pool.fetch("SELECT task_id, seq FROM progress_heads WHERE task_id = ANY($1::text[])", list(task_ids))
    return {r["task_id"]: int(r["seq"]) for r in rows}


async def prune(pool: asyncpg.Pool, final: Sequence[str], retain_s: float, tasks_at_most: int = 100) -> int:
    """Delete the log of up to `tasks_at_most` tasks that ended more than `retain_s` ago; how many
    entries went. The head row stays: its number keeps counting if a retry revives the task, so a
    client's Last-Event-ID never names a different entry, and a stream of a pruned task ends at once."""
    deleted = await pool.fetchval(
        "WITH old AS (SELECT DISTINCT l.task_id FROM progress_log l JOIN tasks t ON t.id = l.task_id"
        "   WHERE t.status = ANY($1::text[]) AND t.updated_at < now() - make_interval(secs => $2) LIMIT $3),"
        " gone AS (DELETE FROM progress_log WHERE task_id IN (SELECT task_id FROM old) RETURNING 1)"
        " SELECT count(*) FROM gone",
        list(final), retain_s, tasks_at_most,
    )  # fmt: skip
    return int(deleted or 0)


async def head(pool: asyncpg.Pool, task_id: str) -> int:
    """The number of the task's last entry (0: none yet)."""
    return int(await pool.fetchval("SELECT seq FROM progress_heads WHERE task_id = $1", task_id) or 0)


async def stream_state(pool: asyncpg.Pool, task_id: str) -> StreamState:
    row = await pool.fetchrow(
        "SELECT t.status, h.seq, l.kind FROM tasks t LEFT JOIN progress_heads h ON h.task_id = t.id"
        " LEFT JOIN progress_log l ON l.task_id = t.id AND l.seq = h.seq WHERE t.id = $1",
        task_id,
    )
    if row is None:
        return StreamState(None, 0, None)
    return StreamState(row["status"], int(row["seq"] or 0), row["kind"])
