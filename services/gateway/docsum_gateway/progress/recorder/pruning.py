"""The progress log's pruning, and the expired Idempotency-Keys': the gateway's loop beside its recorder
(its stage's `loops`)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from docsum_shared.retry import keep_running
from docsum_shared.states import TASK_FINAL

from ...repository import prune_idempotency_keys
from . import repository

log = logging.getLogger(__name__)


async def prune_until(stop: asyncio.Event, pool: asyncpg.Pool, retain_s: float, keys_ttl_s: float) -> None:
    """Delete the log of the tasks that ended more than `retain_s` ago, and the Idempotency-Keys past their
    `keys_ttl_s`, every half of the shorter of the two (at most hourly). The log is for watching a task
    happen: long after the end, the task's view (GET) tells all it did. An expired key already counts as
    absent: pruning only keeps the table to the keys of the last `keys_ttl_s`. Every replica prunes; a
    delete another replica made first deletes nothing."""
    every = min(3600.0, max(1.0, min(retain_s, keys_ttl_s) / 2))

    async def prune() -> None:
        while deleted := await repository.prune(pool, sorted(TASK_FINAL), retain_s):
            log.info("progress log: pruned %d entries of tasks that ended over %gs ago", deleted, retain_s)
        while deleted := await prune_idempotency_keys(pool):
            log.info("idempotency keys: pruned %d kept over %gs", deleted, keys_ttl_s)

    await keep_running("progress log: pruning", prune, every_s=every, stop=stop)
