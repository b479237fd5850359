"""Task lifecycle transitions in Postgres: pause, resume, cancel, retry, expiry, reconcile; and a document's
failure in whichever stage it fails.

Each is one guarded transition: it happens only from the statuses it names, so calling it twice (or
racing the pipeline) is harmless. Re-driving the work that a transition frees is redrive.py's job;
the loop that runs expiry and reconcile lives beside the merger (docsum_merger.maintenance).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import asyncpg

from . import outbox
from .settings import LLMSettings
from .states import DOCUMENT_FINAL, TASK_HELD, TASK_TAKES_WORK, ChunkStatus, DocumentStatus, TaskStatus

log = logging.getLogger(__name__)

UNFINISHED = list(TASK_TAKES_WORK)
RETRY_FROM = [TaskStatus.COMPLETED_WITH_ERRORS, TaskStatus.FAILED, TaskStatus.PROCESSING]


async def pause(pool: asyncpg.Pool, task_id: str) -> bool:
    return await _move(pool, task_id, UNFINISHED, TaskStatus.PAUSED)


async def resume(pool: asyncpg.Pool, task_id: str) -> bool:
    """Paused: go on. Awaiting approval: the plan it was held with is approved; it waits again only if
    it grows beyond that plan."""
    moved = await pool.fetchval(
        "UPDATE tasks SET status = $2, hold_reason = NULL,"
        " approved_calls = CASE WHEN status = $4 THEN held_calls ELSE approved_calls END,"
        " approved_cost_usd = CASE WHEN status = $4 THEN held_cost_usd ELSE approved_cost_usd END,"
        " updated_at = now(), last_active_at = now() WHERE id = $1 AND status = ANY($3::text[]) RETURNING id",
        task_id,
        TaskStatus.PROCESSING,
        list(TASK_HELD),
        TaskStatus.AWAITING_APPROVAL,
    )
    return moved is not None


async def cancel(pool: asyncpg.Pool, task_id: str, settings: LLMSettings) -> bool:
    """Cancelled, with its unfinished documents, and the webhook deliveries its end owes written in the same
    transaction (outbox.py): a cancel stored is always told."""
    async with pool.acquire() as conn, conn.transaction():
        moved = await _move(conn, task_id, [*UNFINISHED, *TASK_HELD], TaskStatus.CANCELLED)
        if moved:
            await conn.execute(
                "UPDATE documents SET status = $2, updated_at = now() WHERE task_id = $1 AND status <> ALL($3::text[])",
                task_id,
                DocumentStatus.CANCELLED,
                list(DOCUMENT_FINAL),
            )
            await outbox.enqueue_task(conn, settings, task_id, TaskStatus.CANCELLED)
        return moved


async def retry_failed(pool: asyncpg.Pool, task_id: str) -> int:
    """Make FAILED chunks and documents of the task pending again; stored summaries are kept.

    Returns how many documents were reset (0: nothing had failed, or the task cannot be retried).
    """
    async with pool.acquire() as conn, conn.transaction():
        status = await conn.fetchval("SELECT status FROM tasks WHERE id = $1 FOR UPDATE", task_id)
        if status not in RETRY_FROM:
            return 0
        failed = await conn.fetch(
            "SELECT id, chunk_total FROM documents WHERE task_id = $1 AND status = $2", task_id, DocumentStatus.FAILED
        )
        if not failed:
            return 0
        ids = [r["id"] for r in failed]
        await conn.execute(
            "UPDATE chunks SET status = $2, attempts = 0, failures = 0, error = NULL, announced_at = NULL,"
            " updated_at = now()"
            " WHERE document_id = ANY($1::text[]) AND status = $3",
            ids,
            ChunkStatus.PENDING,
            ChunkStatus.FAILED,
        )
        await recount_documents(conn, ids)
        # A document whose chunks exist resumes from them; one that failed earlier is parsed again.
        await conn.execute(
            "UPDATE documents SET status = CASE WHEN chunk_total IS NULL THEN $2 ELSE $3 END,"
            " error = NULL, merge_failures = 0, stalled_redrives = 0, redrive_mark = NULL, updated_at = now()"
            " WHERE id = ANY($1::text[])",
            ids,
            DocumentStatus.PENDING,
            DocumentStatus.SUMMARIZING,
        )
        await conn.execute(
            "UPDATE tasks SET status = $2, summary = NULL, error = NULL, merge_failures = 0,"
            " updated_at = now(), last_active_at = now() WHERE id = $1",
            task_id,
            TaskStatus.PROCESSING,
        )
        return len(ids)


async def recount_documents(conn: asyncpg.Connection, document_ids: list[str]) -> None:
    """Count the documents' chunks again (after chunks were reset): their progress counters and the
    prompt tokens still to send."""
    await conn.execute(
        "UPDATE documents d SET chunks_completed = c.completed, chunks_failed = c.failed,"
        " pending_token_estimate = c.pending_tokens"
        " FROM (SELECT document_id, count(*) FILTER (WHERE status = $2) AS completed,"
        "   count(*) FILTER (WHERE status = $3) AS failed,"
        "   coalesce(sum(coalesce(token_estimate, token_estimate_upper(context_before || text || context_after)))"
        "    FILTER (WHERE status = ANY($4::text[])), 0) AS pending_tokens"
        "  FROM chunks WHERE document_id = ANY($1::text[]) GROUP BY document_id) c"
        " WHERE c.document_id = d.id",
        document_ids,
        ChunkStatus.COMPLETED,
        ChunkStatus.FAILED,
        [ChunkStatus.PENDING, ChunkStatus.SUMMARIZING],
    )


async def expire_idle(pool: asyncpg.Pool, settings: LLMSettings, ttl_s: float, *, deployment: str) -> list[str]:
    """`deployment`'s unfinished or held tasks idle beyond `ttl_s`, EXPIRED now: their ids. Another
    deployment's are its own maintenance's (it announces the end on its own topics). The webhook
    deliveries each end owes are written in the same transaction: an expiry stored is always told."""
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            "UPDATE tasks SET status = $3, updated_at = now()"
            " WHERE status = ANY($1::text[]) AND last_active_at < now() - make_interval(secs => $2)"
            " AND deployment = $4 RETURNING id",
            [*UNFINISHED, *TASK_HELD],
            ttl_s,
            TaskStatus.EXPIRED,
            deployment,
        )
        for row in rows:
            await outbox.enqueue_task(conn, settings, row["id"], TaskStatus.EXPIRED)
    return [r["id"] for r in rows]


async def idle_unfinished(pool: asyncpg.Pool, idle_s: float, owner: str | None = None, *, deployment: str) -> list[str]:
    """`deployment`'s unfinished tasks (of `owner`, if given) idle beyond `idle_s`, longest idle first: a
    re-drive publishes on the deployment's topics, where only its own tasks' work belongs."""
    rows = await pool.fetch(
        "SELECT id FROM tasks WHERE status = ANY($1::text[]) AND last_active_at < now() - make_interval(secs => $2)"
        " AND ($3::text IS NULL OR owner = $3) AND deployment = $4 ORDER BY last_active_at",
        UNFINISHED,
        idle_s,
        owner,
        deployment,
    )
    return [r["id"] for r in rows]


async def fail_document(pool: asyncpg.Pool, document_id: str, error: str, sources: Iterable[DocumentStatus]) -> None:
    """The document FAILED with `error` if it is in one of `sources` (the statuses of the stage that fails
    it: handled twice, or after another stage moved it on, nothing changes), and the webhook deliveries that
    owes, in one transaction. What the parser was reading is cleared: a failed document reads nothing."""
    async with pool.acquire() as conn, conn.transaction():
        moved = await conn.fetchval(
            "UPDATE documents SET status = $2, error = $3, reading = NULL, updated_at = now()"
            " WHERE id = $1 AND status = ANY($4::text[]) RETURNING true",
            document_id,
            DocumentStatus.FAILED,
            error,
            list(sources),
        )
        if moved:
            await outbox.enqueue_document_failed(conn, document_id)


async def _move(
    db: asyncpg.Pool | asyncpg.Connection, task_id: str, sources: list[TaskStatus], target: TaskStatus
) -> bool:
    moved = await db.fetchval(
        "UPDATE tasks SET status = $2, updated_at = now(), last_active_at = now()"
        " WHERE id = $1 AND status = ANY($3::text[]) RETURNING id",
        task_id,
        target,
        sources,
    )
    return moved is not None
