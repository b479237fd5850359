"""Batch mode's SQL: the lines, the batches (the outbox of every submission), and what ingest stores."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from docsum_llm.base import SummaryResult
from docsum_llm.cache import sentences_json
from docsum_shared.states import LINE_LIVE, TASK_TAKES_WORK

from .policy import BatchState, Ending, LineStatus, halves, unrun_status

# The cluster-wide lock of the batch driver, per endpoint: one process drives an endpoint's batches at a time.
DRIVER_LOCK = "docsum batch driver"
TAKES_WORK = list(TASK_TAKES_WORK)
QUEUED = LineStatus.QUEUED
LIVE = list(LINE_LIVE)
# How often waiting on a batch refreshes its task's last_active_at: a task waiting on its batch is
# not idle, and reconcile leaves it alone.
ACTIVITY_EVERY_S = 5.0


@dataclass(frozen=True)
class QueuedTask:
    """A task with lines waiting to be gathered into a batch."""

    task_id: str
    owner: str
    takes_work: bool
    deadline: datetime | None


@dataclass(frozen=True)
class OpenBatch:
    """A batch not ended, with what deciding its next step needs of its task."""

    id: str
    task_id: str
    owner: str
    state: BatchState
    lines: int
    input_file_id: str | None
    provider_id: str | None
    provider_status: str | None
    cancel_reason: str | None
    submitted_at: datetime | None
    created_at: datetime
    takes_work: bool
    deadline: datetime | None


@dataclass(frozen=True)
class Announcement:
    """A chunk to announce again: the batch answered its line, or sent it back."""

    task_id: str
    document_id: str
    chunk_id: str
    chunk_index: int


def _deadline(options: Any) -> datetime | None:
    """The task's deadline; None when it has none, or one that is no instant (stored before intake
    checked it): such a task runs without a deadline rather than stopping the driver at each round."""
    stored = json.loads(options) if isinstance(options, str) else (options or {})
    value = stored.get("deadline") if isinstance(stored, dict) else None
    try:
        deadline = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return deadline if deadline is not None and deadline.utcoffset() is not None else None


def new_batch_id() -> str:
    return f"dsb_{secrets.token_hex(12)}"


class BatchRepository:
    """The batches and lines of one endpoint (the LLM settings' endpoint key): those of another endpoint
    are another driver's."""

    def __init__(self, pool: asyncpg.Pool, endpoint: str) -> None:
        self.pool = pool
        self.endpoint = endpoint

    async def take_over(self, earlier: str) -> int:
        """The batches and lines recorded under `earlier` (the endpoint's key before it named the account)
        become this endpoint's, so that a batch running at the provider across the upgrade is still polled
        and ingested, not left to be paid again in realtime; how many batches."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE batch_lines SET endpoint = $1 WHERE endpoint = $2", self.endpoint, earlier)
            return int(
                await conn.fetchval(
                    "WITH moved AS (UPDATE llm_batches SET endpoint = $1 WHERE endpoint = $2 RETURNING 1)"
                    " SELECT count(*) FROM moved",
                    self.endpoint,
                    earlier,
                )  # fmt: skip
            )

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[bool]:
        """Whether this process drives the batches now: the lock is held while the block runs, and let
        go when it ends, or when the process dies (its connection closes)."""
        async with self.pool.acquire() as conn, conn.transaction():
            lock = f"{DRIVER_LOCK} {self.endpoint}"
            yield bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock(hashtext($1))", lock))

    # --- gathering --------------------------------------------------------------------------------

    async def queued_tasks(self, gather_s: float) -> list[QueuedTask]:
        """Tasks whose queued lines stopped arriving `gather_s` ago (or that no longer take work)."""
        rows = await self.pool.fetch(
            "SELECT t.id, t.owner, t.status = ANY($2::text[]) AS takes_work, t.options"
            " FROM (SELECT task_id FROM batch_lines WHERE status = $1 AND endpoint = $4 GROUP BY task_id"
            "       HAVING max(created_at) < now() - make_interval(secs => $3)) q"
            " JOIN tasks t ON t.id = q.task_id",
            LineStatus.QUEUED, TAKES_WORK, gather_s, self.endpoint,
        )  # fmt: skip
        return [QueuedTask(r["id"], r["owner"], r["takes_work"], _deadline(r["options"])) for r in rows]

    async def settle_queued(self, task_id: str, status: LineStatus, error: str | None = None) -> int:
        """The task's queued lines, never sent, to `status` (realtime for a deadline near or a gathering
        that failed, with why; dropped for a task paused or ended); announced again when realtime."""
        return int(
            await self.pool.fetchval(
                "WITH moved AS (UPDATE batch_lines SET status = $3, announce = ($3 = $4), error = $6,"
                " updated_at = now() WHERE task_id = $1 AND status = $2 AND endpoint = $5 RETURNING 1)"
                " SELECT count(*) FROM moved",
                task_id,
                LineStatus.QUEUED,
                status,
                LineStatus.REALTIME,
                self.endpoint,
                error,
            )  # fmt: skip
        )

    async def gather(self, task: QueuedTask, max_lines: int) -> list[str]:
        """Gather the task's queued lines into batches of at most `max_lines` requests, recorded before
        anything is sent; the new batches' ids. A request already answered (the result cache) is not
        sent: its line is answered. One already in a running batch joins it: never paid twice. The
        lines stay in PostgreSQL: at most one batch's keys are read here at a time."""
        async with self.pool.acquire() as conn, conn.transaction():
            locked = await conn.fetchval(
                "SELECT count(*) FROM (SELECT 1 FROM batch_lines WHERE task_id = $1 AND status = $2"
                " AND endpoint = $3 FOR UPDATE) queued",
                task.task_id, LineStatus.QUEUED, self.endpoint,
            )  # fmt: skip
            if not locked:
                return []
            await conn.execute(
                "UPDATE batch_lines l SET status = $3, announce = true, updated_at = now()"
                " FROM llm_results r WHERE l.task_id = $1 AND l.status = $2 AND l.endpoint = $4"
                " AND r.key = l.custom_id",
                task.task_id, LineStatus.QUEUED, LineStatus.ANSWERED, self.endpoint,
            )  # fmt: skip
            await conn.execute(
                "UPDATE batch_lines l SET status = $3, batch_id = running.batch_id, updated_at = now()"
                " FROM (SELECT DISTINCT ON (custom_id) custom_id, batch_id FROM batch_lines"
                "       WHERE status = $3 AND batch_id IS NOT NULL AND endpoint = $4 AND custom_id IN"
                "       (SELECT custom_id FROM batch_lines WHERE task_id = $1 AND status = $2 AND endpoint = $4)"
                "      ) running"
                " WHERE l.task_id = $1 AND l.status = $2 AND l.endpoint = $4 AND l.custom_id = running.custom_id",
                task.task_id, LineStatus.QUEUED, LineStatus.SUBMITTED, self.endpoint,
            )  # fmt: skip
            made = []
            while keys := [
                r["custom_id"]
                for r in await conn.fetch(
                    "SELECT DISTINCT custom_id FROM batch_lines WHERE task_id = $1 AND status = $2 AND endpoint = $3"
                    " ORDER BY custom_id LIMIT $4",
                    task.task_id,
                    LineStatus.QUEUED,
                    self.endpoint,
                    max_lines,
                )  # fmt: skip
            ]:
                made.append(await self._record(conn, task.task_id, task.owner, keys, from_status=QUEUED))
            return made

    # --- the batches ----------------------------------------------------------------------------

    async def open_batches(self) -> list[OpenBatch]:
        rows = await self.pool.fetch(
            "SELECT b.id, b.task_id, b.owner, b.state, b.lines, b.input_file_id, b.provider_id, b.provider_status,"
            " b.cancel_reason, b.submitted_at, b.created_at, t.status = ANY($2::text[]) AS takes_work, t.options"
            " FROM llm_batches b JOIN tasks t ON t.id = b.task_id WHERE b.state <> $1 AND b.endpoint = $3"
            " ORDER BY b.created_at",
            BatchState.ENDED, TAKES_WORK, self.endpoint,
        )  # fmt: skip
        return [
            OpenBatch(
                **{k: v for k, v in r.items() if k not in ("state", "options")},
                state=BatchState(r["state"]),
                deadline=_deadline(r["options"]),
            )
            for r in rows
        ]

    async def request_pages(self, batch_id: str, size: int) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
        """The batch's distinct requests (custom_id, request), `size` at a time in custom_id order: a
        batch's requests are never all in memory at once."""
        after = ""
        while True:
            rows = await self.pool.fetch(
                "SELECT DISTINCT ON (custom_id) custom_id, request FROM batch_lines"
                " WHERE batch_id = $1 AND custom_id > $2 ORDER BY custom_id LIMIT $3",
                batch_id, after, size,
            )  # fmt: skip
            if rows:
                yield [(r["custom_id"], _json(r["request"])) for r in rows]
            if len(rows) < size:
                return
            after = rows[-1]["custom_id"]

    async def requests_of(self, batch_id: str, custom_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The batch's requests among `custom_ids`, by custom_id (a page of its output)."""
        rows = await self.pool.fetch(
            "SELECT DISTINCT ON (custom_id) custom_id, request FROM batch_lines"
            " WHERE batch_id = $1 AND custom_id = ANY($2::text[]) ORDER BY custom_id",
            batch_id, list(custom_ids),
        )  # fmt: skip
        return {r["custom_id"]: _json(r["request"]) for r in rows}

    async def move(self, batch_id: str, to: BatchState, **columns: Any) -> None:
        """The batch to its next state, with what the step learned (input_file_id, provider_id, ...)."""
        names = list(columns)
        sets = "".join(f", {name} = ${i + 3}" for i, name in enumerate(names))
        await self.pool.execute(
            f"UPDATE llm_batches SET state = $2, updated_at = now(){sets} WHERE id = $1",
            batch_id, to, *(columns[n] for n in names),
        )  # fmt: skip

    async def observed(self, batch_id: str, provider_status: str, done: int, failed: int) -> bool:
        """What the provider says of the batch now; whether that differs from what it said before."""
        changed = await self.pool.fetchval(
            "UPDATE llm_batches SET provider_status = $2, lines_done = $3, lines_failed = $4, updated_at = now()"
            " WHERE id = $1 AND (provider_status, lines_done, lines_failed) IS DISTINCT FROM ($2, $3, $4)"
            " RETURNING 1",
            batch_id, provider_status, done, failed,
        )  # fmt: skip
        return changed is not None

    async def cancelling(self, batch_id: str, reason: str) -> None:
        await self.pool.execute(
            "UPDATE llm_batches SET cancel_reason = coalesce(cancel_reason, $2), updated_at = now() WHERE id = $1",
            batch_id, reason,
        )  # fmt: skip

    # --- ingest ------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def page(self) -> AsyncIterator[asyncpg.Connection]:
        """A page of ingest in one transaction: its lines stored with one commit (a commit per line is a
        write-ahead-log flush per line), each answer in a savepoint of its own (`answered`), so that one
        PostgreSQL refuses rolls back that line alone. The database gone midway: the page is rolled back
        and read again at the next poll, the pages before it stay stored."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def answered(
        self, conn: asyncpg.Connection, batch_id: str, custom_id: str, result: SummaryResult, kind: str
    ) -> bool:
        """The batch answered `custom_id`: its answer into the result cache, its lines answered (and
        announced), and the line in the ledger at the batch tier, all in one statement guarded by the
        lines' status, so ingesting the same output again stores and books nothing twice. Run on a
        page's connection (`page`), in a savepoint of its own."""
        async with conn.transaction():
            return await self._answered(conn, batch_id, custom_id, result, kind)

    async def _answered(
        self, conn: asyncpg.Connection, batch_id: str, custom_id: str, result: SummaryResult, kind: str
    ) -> bool:
        moved = await conn.fetchval(
            "WITH moved AS (UPDATE batch_lines SET status = $3, announce = true, error = NULL, updated_at = now()"
            "   WHERE batch_id = $1 AND custom_id = $2 AND status = $4 RETURNING chunk_id, task_id),"
            " first AS (SELECT m.chunk_id, m.task_id, c.document_id FROM moved m JOIN chunks c ON c.id = m.chunk_id"
            "   ORDER BY m.chunk_id LIMIT 1),"
            " stored AS (INSERT INTO llm_results"
            "   (key, model, kind, result, prompt_tokens, completion_tokens, truncated, sentences)"
            "   SELECT $2, $5, $6, $7, $8, $9, $10, $12::jsonb FROM first ON CONFLICT (key) DO NOTHING RETURNING 1),"
            " booked AS (INSERT INTO llm_calls (task_id, document_id, chunk_id, kind, cache_key, model, cached,"
            "   prompt_tokens, completion_tokens, latency_ms, tier)"
            "   SELECT task_id, document_id, chunk_id, $6, $2, $5, false, $8, $9, 0, $11 FROM first RETURNING 1)"
            " SELECT count(*) FROM moved",  # (a statement in WITH runs to completion whether read or not)
            batch_id, custom_id, LineStatus.ANSWERED, LineStatus.SUBMITTED, result.model, kind, result.text,
            result.prompt_tokens, result.completion_tokens, result.truncated, result.tier,
            sentences_json(result.sentences),
        )  # fmt: skip
        return bool(moved)

    async def sent_back(
        self, batch_id: str, custom_ids: Sequence[str] | None, error: str, conn: asyncpg.Connection | None = None
    ) -> int:
        """Lines the batch did not answer (`custom_ids`; None: all it has not answered) back to their
        chunks: a realtime call, or dropped when the task no longer takes work. A line of another task
        that joined this batch is queued again for a batch of its own task. On a page's connection when
        given; counted in PostgreSQL (a batch's lines are never all read here)."""
        return int(
            await (conn or self.pool).fetchval(
                "WITH moved AS (UPDATE batch_lines l SET updated_at = now(), error = $4,"
                "   status = CASE WHEN l.task_id <> b.task_id THEN $5"
                "     WHEN t.status = ANY($6::text[]) THEN $7 ELSE $8 END,"
                "   batch_id = CASE WHEN l.task_id <> b.task_id THEN NULL ELSE l.batch_id END,"
                "   announce = l.task_id = b.task_id AND t.status = ANY($6::text[])"
                " FROM llm_batches b, tasks t"
                " WHERE b.id = $1 AND l.batch_id = $1 AND t.id = l.task_id AND l.status = $2"
                "   AND ($3::text[] IS NULL OR l.custom_id = ANY($3::text[]))"
                " RETURNING 1) SELECT count(*) FROM moved",
                batch_id,
                LineStatus.SUBMITTED,
                None if custom_ids is None else list(custom_ids),
                error,
                LineStatus.QUEUED,
                TAKES_WORK,
                unrun_status(True),
                unrun_status(False),
            )  # fmt: skip
        )

    async def requeue(self, batch_id: str) -> int:
        """A batch the provider lost: its lines queued again, for a new batch."""
        return int(
            await self.pool.fetchval(
                "WITH moved AS (UPDATE batch_lines SET status = $3, batch_id = NULL, updated_at = now()"
                " WHERE batch_id = $1 AND status = $2 RETURNING 1) SELECT count(*) FROM moved",
                batch_id,
                LineStatus.SUBMITTED,
                LineStatus.QUEUED,
            )  # fmt: skip
        )

    async def split(self, batch: OpenBatch) -> list[str]:
        """A batch refused as too large: its unanswered requests in two new batches, recorded."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "SELECT DISTINCT custom_id FROM batch_lines WHERE batch_id = $1 AND status = $2 ORDER BY custom_id",
                batch.id, LineStatus.SUBMITTED,
            )  # fmt: skip
            made = []
            for half in halves([r["custom_id"] for r in rows]):
                if half:
                    made.append(await self._record(conn, batch.task_id, batch.owner, half, from_batch=batch.id))
            return made

    async def end(self, batch_id: str, outcome: Ending, error: str = "") -> None:
        await self.pool.execute(
            "UPDATE llm_batches SET state = $2, outcome = $3, error = nullif($4, ''), ended_at = now(),"
            " updated_at = now() WHERE id = $1",
            batch_id, BatchState.ENDED, outcome, error,
        )  # fmt: skip

    # --- announcing, and the tasks that wait -------------------------------------------------------

    async def announcements(self, limit: int) -> list[Announcement]:
        rows = await self.pool.fetch(
            "SELECT d.task_id, c.document_id, c.id AS chunk_id, c.chunk_index"
            " FROM batch_lines l JOIN chunks c ON c.id = l.chunk_id JOIN documents d ON d.id = c.document_id"
            " WHERE l.announce AND l.endpoint = $2 ORDER BY l.updated_at LIMIT $1",
            limit,
            self.endpoint,
        )
        return [Announcement(**dict(r)) for r in rows]

    async def announced(self, chunk_ids: Sequence[str]) -> None:
        await self.pool.execute(
            "UPDATE batch_lines SET announce = false WHERE chunk_id = ANY($1::text[])", list(chunk_ids)
        )

    async def keep_waiting_tasks_active(self) -> None:
        """A task waiting on its batch is making progress: reconcile must not re-drive it as idle."""
        await self.pool.execute(
            "UPDATE tasks SET last_active_at = now()"
            " WHERE id IN (SELECT DISTINCT task_id FROM batch_lines WHERE status = ANY($1::text[]) AND endpoint = $3)"
            " AND last_active_at < now() - make_interval(secs => $2)",
            LIVE, ACTIVITY_EVERY_S, self.endpoint,
        )  # fmt: skip

    async def _record(
        self,
        conn: asyncpg.Connection,
        task_id: str,
        owner: str,
        keys: list[str],
        *,
        from_status: LineStatus = LineStatus.SUBMITTED,
        from_batch: str | None = None,
    ) -> str:
        """A new batch of `keys`, recorded (the outbox row) with its lines, before anything is sent."""
        batch_id = new_batch_id()
        await conn.execute(
            "INSERT INTO llm_batches (id, task_id, owner, state, lines, endpoint) VALUES ($1, $2, $3, $4, $5, $6)",
            batch_id, task_id, owner, BatchState.RECORDED, len(keys), self.endpoint,
        )  # fmt: skip
        await conn.execute(
            "UPDATE batch_lines SET status = $5, batch_id = $1, updated_at = now()"
            " WHERE custom_id = ANY($2::text[]) AND status = $3 AND endpoint = $7"
            " AND (task_id = $4 AND $6::text IS NULL OR batch_id = $6)",
            batch_id, keys, from_status, task_id, LineStatus.SUBMITTED, from_batch, self.endpoint,
        )  # fmt: skip
        return batch_id


def _json(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)
