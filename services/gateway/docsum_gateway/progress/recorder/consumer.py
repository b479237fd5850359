"""The progress recorder's Kafka consumer: reads the pipeline's topics and appends each task's steps to its log.

It runs in every gateway process, all replicas in ONE consumer group (`<prefix>docsum-gateway-progress`),
so each event is recorded by one of them, with the consumer shell's commit and dead-letter semantics;
appends are idempotent (one entry per step), so a redelivery or a re-drive adds nothing. The streams
(SSE and WebSocket, docsum_gateway.progress.streams) read the log from PostgreSQL, so any replica serves any
task's stream from any point.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from docsum_shared.consumer import ConsumerService
from docsum_shared.retry import keep_running
from docsum_shared.states import TASK_FINAL

from ...settings import GatewaySettings
from ...stage import STAGE
from . import repository
from .handlers import handlers

log = logging.getLogger(__name__)
GROUP = "gateway-progress"


def recorder(settings: GatewaySettings, pool: asyncpg.Pool) -> ConsumerService:
    return ConsumerService(
        GROUP, settings, handlers.bind(STAGE.deps(settings, pool)), dead_letters=handlers.dead_letters
    )


async def record_until(stop: asyncio.Event, settings: GatewaySettings, pool: asyncpg.Pool) -> None:
    """Run the recorder until `stop` is set; started again if it ends on an error (the broker away at
    start, say): the gateway serves requests meanwhile, and the recorder catches up from its offsets.
    The log's old entries are pruned meanwhile (`prune_until`)."""
    pruning = asyncio.create_task(prune_until(stop, pool, settings.progress_retain_s))
    try:
        await _record(stop, settings, pool)
    finally:
        pruning.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pruning


async def prune_until(stop: asyncio.Event, pool: asyncpg.Pool, retain_s: float) -> None:
    """Delete the log of the tasks that ended more than `retain_s` ago, every `retain_s / 2` (at most
    hourly). The log is for watching a task happen: long after the end, the task's view (GET) tells
    all it did. Every replica prunes; a delete another replica made first deletes nothing."""
    every = min(3600.0, max(1.0, retain_s / 2))

    async def prune() -> None:
        while deleted := await repository.prune(pool, sorted(TASK_FINAL), retain_s):
            log.info("progress log: pruned %d entries of tasks that ended over %gs ago", deleted, retain_s)

    await keep_running("progress log: pruning", prune, every_s=every, stop=stop)


async def _record(stop: asyncio.Event, settings: GatewaySettings, pool: asyncpg.Pool) -> None:
    """The recorder, started again after a failure (from its committed offsets) until `stop` is set."""

    async def run_once() -> None:
        service = recorder(settings, pool)
        watcher = asyncio.create_task(_stop_when(stop, service))
        try:
            await service.run()
        finally:
            watcher.cancel()

    await keep_running("progress recorder", run_once, stop=stop)


async def _stop_when(stop: asyncio.Event, service: ConsumerService) -> None:
    await stop.wait()
    service.stop()
