"""The progress recorder on Kafka: reads the pipeline's topics and appends each task's steps to its log.

It runs in every gateway process, all replicas in ONE consumer group (`<prefix>docsum-gateway-progress`),
so each event is recorded by one of them, with the consumer shell's commit and dead-letter semantics;
appends are idempotent (one entry per step), so a redelivery or a re-drive adds nothing. The streams
(SSE and WebSocket, docsum_gateway.progress.streams) read the log from PostgreSQL, so any replica serves any
task's stream from any point.
"""

from __future__ import annotations

import asyncio

import asyncpg

from docsum_shared.consumer import ConsumerService
from docsum_shared.retry import keep_running

from ...settings import GatewaySettings
from ...stage import STAGE
from .handlers import handlers


def recorder(settings: GatewaySettings, pool: asyncpg.Pool) -> ConsumerService:
    consumer = STAGE.consumer(settings, pool)
    return ConsumerService(handlers.group or "gateway", settings, consumer.handlers, dead_letters=handlers.dead_letters)


async def record_until(stop: asyncio.Event, settings: GatewaySettings, pool: asyncpg.Pool) -> None:
    """Run the recorder until `stop` is set; started again if it ends on an error (the broker away at
    start, say): the gateway serves requests meanwhile, and the recorder catches up from its offsets."""

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
