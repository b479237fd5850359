"""Expiry and reconcile, run beside the merger by one process at a time (under a database lock); and, on
an object store, the sweep of the objects no blob row names.

It also counts the tasks by status for the docsum_tasks gauge, and how long the most stalled unfinished
task has gone without progress (docsum_task_stalled_seconds).

Expiry: unfinished tasks idle longer than the TTL become EXPIRED. Reconcile: unfinished tasks nobody
moved for `reconcile_idle_s` are re-driven from Postgres; a document re-driven `redrive_limit` times
without any progress is FAILED with its last error, so nothing is re-driven forever.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from docsum_shared import metrics
from docsum_shared.blobs import ObjectStore, parse_blob_store, sweep_orphans
from docsum_shared.events import TaskEvent
from docsum_shared.handlers import Publish, Sender
from docsum_shared.lifecycle import UNFINISHED, expire_idle, idle_unfinished
from docsum_shared.redrive import redrive_task
from docsum_shared.retry import keep_running
from docsum_shared.states import CHUNK_FINAL, TaskStatus

from .settings import MergerSettings

log = logging.getLogger(__name__)
# Tasks idle beyond their time limit end as EXPIRED (reconcile re-drives through redrive.py).
EXPIRY = Sender("the merger's maintenance", emits=(TaskEvent,))

# The (class, deployment) key space of the maintenance's advisory lock (apart from the blobs' class): each
# deployment sharing the database maintains its own tasks, one of its processes at a time.
_MAINTENANCE_LOCK_CLASS = 0x6D61696E  # "main"


async def maintain_once(pool: asyncpg.Pool, publish: Publish, settings: MergerSettings) -> tuple[int, int]:
    """Expire the deployment's idle tasks, then re-drive its unfinished tasks nobody moved for a while.
    (expired, re-driven). Another deployment's tasks are its own maintenance's: their events belong on
    its topics."""
    lock = (_MAINTENANCE_LOCK_CLASS, settings.deployment)
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1::int, hashtext($2))", *lock):
            return 0, 0  # another process of the deployment is at it
        try:
            expired = await expire_idle(pool, settings, settings.task_ttl_s, deployment=settings.deployment)
            for task_id in expired:
                log.info("task %s expired after %.0fs idle", task_id, settings.task_ttl_s)
            await publish([TaskEvent(task_id=t, status=TaskStatus.EXPIRED) for t in expired], sender=EXPIRY)
            stuck = await idle_unfinished(pool, settings.reconcile_idle_s, deployment=settings.deployment)
            for task_id in stuck:
                # Claimed only if still idle: an owner's re-drive of it meanwhile is not repeated.
                published = await redrive_task(
                    pool, publish, settings, task_id, idle_s=settings.reconcile_idle_s, bounded=True
                )
                log.info("reconcile: task %s idle, re-drove %d events", task_id, published)
            return len(expired), len(stuck)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1::int, hashtext($2))", *lock)


async def count_tasks(pool: asyncpg.Pool) -> None:
    """The docsum_tasks gauge: every merger process sets the same counts (read it as max by status)."""
    counts = {r["status"]: r["n"] for r in await pool.fetch("SELECT status, count(*) AS n FROM tasks GROUP BY status")}
    for status in TaskStatus:
        metrics.TASKS.labels(status).set(counts.get(status, 0))
    metrics.STALLED_SECONDS.set(await pool.fetchval(_STALLED_SECONDS, UNFINISHED, list(CHUNK_FINAL)))


# The docsum_task_stalled_seconds gauge. A re-drive moves last_active_at but is no progress, so progress
# is read where work leaves its mark: an LLM call (answered or cached), a document's step, a chunk's end.
_STALLED_SECONDS = """
SELECT coalesce(max(extract(epoch FROM now() - greatest(
           t.created_at,
           (SELECT max(l.created_at) FROM llm_calls l WHERE l.task_id = t.id),
           (SELECT max(d.updated_at) FROM documents d WHERE d.task_id = t.id),
           (SELECT max(c.updated_at) FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE d.task_id = t.id AND c.status = ANY($2::text[]))))), 0)::float8
  FROM tasks t WHERE t.status = ANY($1::text[])
"""


# The key of the orphan sweep's advisory lock (with the maintenance's class): one sweep of a database's
# blobs at a time, whatever the deployments sharing it.
_SWEEP_LOCK_KEY = 0x626C6F62  # "blob"


async def sweep_once(pool: asyncpg.Pool, objects: ObjectStore, grace_s: float) -> int:
    """Remove the object store's orphans (docsum_shared.blobs.sweep_orphans), unless another process is at
    it; how many went."""
    async with pool.acquire() as conn:
        if not await conn.fetchval(
            "SELECT pg_try_advisory_lock($1::int, $2::int)", _MAINTENANCE_LOCK_CLASS, _SWEEP_LOCK_KEY
        ):
            return 0
        try:
            removed = await sweep_orphans(pool, objects, grace_s)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1::int, $2::int)", _MAINTENANCE_LOCK_CLASS, _SWEEP_LOCK_KEY)
    if removed:
        log.info("blob sweep: removed %d object(s) no row names, older than %.0fs", removed, grace_s)
    return removed


async def maintain_forever(pool: asyncpg.Pool, publish: Publish, settings: MergerSettings) -> None:
    async def one_round() -> None:
        await count_tasks(pool)
        await maintain_once(pool, publish, settings)

    rounds = keep_running("maintenance round", one_round, every_s=settings.maintenance_interval_s)
    place = parse_blob_store(settings.blob_store)
    if place is None:  # PostgreSQL: a blob's bytes are its row, nothing to sweep
        await rounds
        return
    objects = ObjectStore(place)
    try:
        await asyncio.gather(
            rounds,
            keep_running(
                "blob sweep",
                lambda: sweep_once(pool, objects, settings.blob_orphan_grace_s),
                every_s=settings.blob_sweep_interval_s,
            ),
        )
    finally:
        await objects.close()
