"""The progress recorder: reads the pipeline's topics and appends each task's steps to its progress log.

It runs in every gateway process, all replicas in ONE consumer group (`<prefix>docsum-gateway-progress`),
so each event is recorded by one of them, with the consumer shell's commit and dead-letter semantics;
appends are idempotent (one entry per step), so a redelivery or a re-drive adds nothing. The streams
(SSE and WebSocket, docsum_gateway.progress) read the log from PostgreSQL, so any replica serves any
task's stream from any point.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from docsum_shared.consumer import ConsumerService
from docsum_shared.settings import Settings

from .handlers import Deps, handlers

log = logging.getLogger(__name__)
GROUP = "gateway-progress"


def recorder(settings: Settings, pool: asyncpg.Pool) -> ConsumerService:
    return ConsumerService(GROUP, settings, handlers.bind(Deps(pool, settings)), dead_letters=False)


async def record_until(stop: asyncio.Event, settings: Settings, pool: asyncpg.Pool) -> None:
    """Run the recorder until `stop` is set; started again if it ends on an error (the broker away at
    start, say): the gateway serves requests meanwhile, and the recorder catches up from its offsets."""
    while not stop.is_set():
        service = recorder(settings, pool)
        watcher = asyncio.create_task(_stop_when(stop, service))
        try:
            await service.run()
        except Exception as exc:  # noqa: BLE001 - logged; the next round starts from the committed offsets
            log.warning("progress recorder stopped (%s); starting it again", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)
        finally:
            watcher.cancel()


async def _stop_when(stop: asyncio.Event, service: ConsumerService) -> None:
    await stop.wait()
    service.stop()
