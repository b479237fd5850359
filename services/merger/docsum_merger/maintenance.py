"""Expiry and reconcile, run beside the merger by one process at a time (under a database lock).

It also counts the tasks by status for the docsum_tasks gauge.

Expiry: unfinished tasks idle longer than the TTL become EXPIRED. Reconcile: unfinished tasks nobody
moved for `reconcile_idle_s` are re-driven from Postgres; a document re-driven `redrive_limit` times
without any progress is FAILED with its last error, so nothing is re-driven forever.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from aiokafka import AIOKafkaProducer

from docsum_shared import metrics
from docsum_shared.events import TaskEvent
from docsum_shared.kafka import publish
from docsum_shared.lifecycle import expire_idle, idle_unfinished
from docsum_shared.redrive import redrive_task
from docsum_shared.settings import Settings
from docsum_shared.states import TaskStatus

log = logging.getLogger(__name__)

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
                published = await redrive_task(pool, producer, settings, task_id, bounded=True)
                log.info("reconcile: task %s idle, re-drove %d events", task_id, published)
            return len(expired), len(stuck)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MAINTENANCE_LOCK_ID)


async def count_tasks(pool: asyncpg.Pool) -> None:
    """The docsum_tasks gauge: every merger process sets the same counts (read it as max by status)."""
    counts = {r["status"]: r["n"] for r in await pool.fetch("SELECT status, count(*) AS n FROM tasks GROUP BY status")}
    for status in TaskStatus:
        metrics.TASKS.labels(status).set(counts.get(status, 0))


async def maintain_forever(pool: asyncpg.Pool, producer: AIOKafkaProducer, settings: Settings) -> None:
    while True:
        try:
            await count_tasks(pool)
            await maintain_once(pool, producer, settings)
        except Exception as exc:  # the database or broker is away: try again next round
            log.warning("maintenance round failed: %s", exc)
        await asyncio.sleep(settings.maintenance_interval_s)
