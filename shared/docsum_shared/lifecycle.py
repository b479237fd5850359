"""Task lifecycle transitions in Postgres: pause, resume, cancel, retry, expiry, reconcile.

Each is one guarded transition: it happens only from the statuses it names, so calling it twice (or
racing the pipeline) is harmless. Re-driving the work that a transition frees is redrive.py's job.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from aiokafka import AIOKafkaProducer

from .events import TaskEvent
from .kafka import publish
from .redrive import redrive_task
from .settings import Settings
from .states import TaskStatus

log = logging.getLogger(__name__)

UNFINISHED = [TaskStatus.PENDING, TaskStatus.PROCESSING]
RETRYABLE = [TaskStatus.COMPLETED_WITH_ERRORS, TaskStatus.FAILED, TaskStatus.PROCESSING]


async def pause(pool: asyncpg.Pool, task_id: str) -> bool:
    return await _move(pool, task_id, UNFINISHED, TaskStatus.PAUSED)


async def resume(pool: asyncpg.Pool, task_id: str) -> bool:
    return await _move(pool, task_id, [TaskStatus.PAUSED], TaskStatus.PROCESSING)


async def cancel(pool: asyncpg.Pool, task_id: str) -> bool:
    async with pool.acquire() as conn, conn.transaction():
        moved = await _move(conn, task_id, [*UNFINISHED, TaskStatus.PAUSED], TaskStatus.CANCELLED)
        if moved:
            await conn.execute(
                "UPDATE documents SET status = 'CANCELLED', updated_at = now()"
                " WHERE task_id = $1 AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')",
                task_id,
            )
        return moved


async def retry_failed(pool: asyncpg.Pool, task_id: str) -> int:
    """Make FAILED chunks and documents of the task pending again; stored summaries are kept.

    Returns how many documents were reset (0: nothing had failed, or the task cannot be retried).
    """
    async with pool.acquire() as conn, conn.transaction():
        status = await conn.fetchval("SELECT status FROM tasks WHERE id = $1 FOR UPDATE", task_id)
        if status not in RETRYABLE:
            return 0
        failed = await conn.fetch(
            "SELECT id, chunk_total FROM documents WHERE task_id = $1 AND status = 'FAILED'", task_id
        )
        if not failed:
            return 0
        ids = [r["id"] for r in failed]
        await conn.execute(
            "UPDATE chunks SET status = 'PENDING', attempts = 0, error = NULL, updated_at = now()"
            " WHERE document_id = ANY($1::text[]) AND status = 'FAILED'",
            ids,
        )
        # A document whose chunks exist resumes from them; one that failed earlier is parsed again.
        await conn.execute(
            "UPDATE documents SET status = CASE WHEN chunk_total IS NULL THEN 'PENDING' ELSE 'SUMMARIZING' END,"
            " error = NULL, updated_at = now() WHERE id = ANY($1::text[])",
            ids,
        )
        await conn.execute(
            "UPDATE tasks SET status = 'PROCESSING', summary = NULL, error = NULL, updated_at = now(),"
            " last_active_at = now() WHERE id = $1",
            task_id,
        )
        return len(ids)


async def expire_idle(pool: asyncpg.Pool, ttl_s: float) -> list[str]:
    rows = await pool.fetch(
        "UPDATE tasks SET status = 'EXPIRED', updated_at = now()"
        " WHERE status = ANY($1::text[]) AND last_active_at < now() - make_interval(secs => $2) RETURNING id",
        [*UNFINISHED, TaskStatus.PAUSED],
        ttl_s,
    )
    return [r["id"] for r in rows]


async def idle_unfinished(pool: asyncpg.Pool, idle_s: float, owner: str | None = None) -> list[str]:
    rows = await pool.fetch(
        "SELECT id FROM tasks WHERE status = ANY($1::text[]) AND last_active_at < now() - make_interval(secs => $2)"
        " AND ($3::text IS NULL OR owner = $3) ORDER BY last_active_at",
        UNFINISHED,
        idle_s,
        owner,
    )
    return [r["id"] for r in rows]


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


# --- the maintenance loop: expiry and reconcile, one process at a time --------------------------------

_MAINTENANCE_LOCK_ID = 0x646F6373756E  # any constant shared by every process of the deployment


async def maintain_once(pool: asyncpg.Pool, producer: AIOKafkaProducer, settings: Settings) -> tuple[int, int]:
    """Expire idle tasks, then re-drive unfinished tasks nobody moved for a while. (expired, re-driven)."""
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _MAINTENANCE_LOCK_ID):
            return 0, 0  # another process is at it
        try:
            expired = await expire_idle(pool, settings.task_ttl_s)
            for task_id in expired:
                log.info("task %s expired after %.0fs idle", task_id, settings.task_ttl_s)
            await publish(producer, settings, [TaskEvent(task_id=t, status=TaskStatus.EXPIRED) for t in expired])
            stuck = await idle_unfinished(pool, settings.reconcile_idle_s)
            for task_id in stuck:
                published = await redrive_task(pool, producer, settings, task_id)
                log.info("reconcile: task %s idle, re-drove %d events", task_id, published)
            return len(expired), len(stuck)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MAINTENANCE_LOCK_ID)


async def maintain_forever(pool: asyncpg.Pool, producer: AIOKafkaProducer, settings: Settings) -> None:
    while True:
        try:
            await maintain_once(pool, producer, settings)
        except Exception as exc:  # the database or broker is away: try again next round
            log.warning("maintenance round failed: %s", exc)
        await asyncio.sleep(settings.maintenance_interval_s)
