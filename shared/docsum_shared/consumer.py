"""The consumer shell every service runs: decode, handle, commit — and never crash-loop.

A service gives one async handler per topic. The handler stores its state and returns the events to
emit; the shell publishes them, waits for Kafka's acknowledgement, and only then commits the offset.
Delivery is at-least-once, so handlers are idempotent (see ARCHITECTURE.md, "the one rule").
"""

from __future__ import annotations

import asyncio
import logging
import signal
import traceback
from collections.abc import Awaitable, Callable, Mapping

import asyncpg
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from pydantic import ValidationError

from .db import connect_pool, migrate
from .errors import PermanentError, is_retriable
from .events import Event, Topic, decode
from .kafka import DLQ_SUFFIX, ensure_topics, make_producer, publish
from .settings import Settings, get_settings

log = logging.getLogger(__name__)

Handler = Callable[[Event], Awaitable[list[Event]]]

# A handler that keeps failing for a reason that is neither the input's fault nor a known passing
# outage (a bug, say) gets this many tries before its message is parked in the dead-letter topic.
UNEXPECTED_ATTEMPTS = 3
MAX_BACKOFF_S = 10.0


class ConsumerService:
    def __init__(self, name: str, settings: Settings, handlers: Mapping[Topic, Handler]) -> None:
        self.name = name
        self.settings = settings
        self.handlers = {settings.topic(topic): (topic, handler) for topic, handler in handlers.items()}
        self.producer = make_producer(settings)
        self.consumer = AIOKafkaConsumer(
            *self.handlers,
            bootstrap_servers=settings.kafka_bootstrap_servers,
            group_id=settings.group(name),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=50,
        )
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await ensure_topics(self.settings)
        await self.producer.start()
        await self.consumer.start()
        log.info("%s consuming %s", self.name, ", ".join(self.handlers))
        try:
            while not self._stopping.is_set():
                batches = await self.consumer.getmany(timeout_ms=500)
                for partition, records in batches.items():
                    for record in records:
                        if self._stopping.is_set():
                            break
                        await self._process(record)
                        await self._commit(partition, record.offset + 1)
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def _commit(self, partition: TopicPartition, offset: int) -> None:
        while True:
            try:
                await self.consumer.commit({partition: offset})
                return
            except Exception as exc:  # a rebalance or a broker restart: the next poll sorts it out
                if not is_retriable(exc):
                    log.warning("commit of %s@%d skipped: %s", partition, offset, exc)
                    return
                log.warning("commit failed (%s); retrying", exc)
                await asyncio.sleep(1.0)

    async def _process(self, record: ConsumerRecord) -> None:
        topic, handler = self.handlers[record.topic]
        try:
            event = decode(topic, record.value)
        except ValidationError as exc:
            await self._dead_letter(record, f"malformed {topic} event: {exc.errors(include_url=False)}")
            return
        attempt = 0
        while True:
            attempt += 1
            try:
                outgoing = await handler(event)
                await publish(self.producer, self.settings, outgoing)
                return
            except PermanentError as exc:
                await self._dead_letter(record, str(exc))
                return
            except Exception as exc:
                retriable = is_retriable(exc)
                if not retriable and attempt >= UNEXPECTED_ATTEMPTS:
                    log.exception("%s: giving up on %s@%d", self.name, record.topic, record.offset)
                    await self._dead_letter(record, "".join(traceback.format_exception_only(exc)).strip())
                    return
                delay = min(MAX_BACKOFF_S, 0.5 * 2 ** min(attempt, 5))
                log.warning(
                    "%s: %s on %s@%d (attempt %d); retrying in %.1fs",
                    self.name,
                    type(exc).__name__,
                    record.topic,
                    record.offset,
                    attempt,
                    delay,
                )
                try:
                    await asyncio.wait_for(self._stopping.wait(), timeout=delay)
                    raise asyncio.CancelledError  # asked to stop: leave the offset uncommitted
                except TimeoutError:
                    pass

    async def _dead_letter(self, record: ConsumerRecord, reason: str) -> None:
        log.error("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason)
        headers = [
            ("error", reason[:4000].encode()),
            ("source-topic", record.topic.encode()),
            ("source-partition", str(record.partition).encode()),
            ("source-offset", str(record.offset).encode()),
            ("service", self.name.encode()),
        ]
        while True:
            try:
                await self.producer.send_and_wait(
                    record.topic + DLQ_SUFFIX, record.value, key=record.key, headers=headers
                )
                return
            except Exception as exc:
                log.warning("dead-letter publish failed (%s); retrying", exc)
                await asyncio.sleep(1.0)


def run_service(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Entry point helper: logging, SIGTERM/SIGINT → graceful stop, one event loop."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(_main())


async def serve(
    name: str,
    stop: asyncio.Event,
    build_handlers: Callable[[Settings, asyncpg.Pool], Mapping[Topic, Handler]],
) -> None:
    """Connect to Postgres (migrating it), then consume until `stop` is set."""
    settings = get_settings()
    pool = await connect_pool(settings.database_url, max_size=settings.db_pool_max)
    try:
        await migrate(pool)
        service = ConsumerService(name, settings, build_handlers(settings, pool))
        watcher = asyncio.create_task(_stop_when(stop, service))
        try:
            await service.run()
        finally:
            watcher.cancel()
    finally:
        await pool.close()


async def _stop_when(stop: asyncio.Event, service: ConsumerService) -> None:
    await stop.wait()
    service.stop()
