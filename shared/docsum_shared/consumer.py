"""The consumer shell every service runs: decode, handle, commit — and never crash-loop.

A service gives one async handler per topic. The handler stores its state and returns the events to
emit; the shell publishes them, waits for Kafka's acknowledgement, and only then counts the message as
done. Delivery is at-least-once, so handlers are idempotent (README, "How it works").

Concurrency: up to `max_inflight` keys are handled at once, the messages of one key one after another
in offset order (a lane per key; a handler registered with `on_many` gets the messages waiting in
its lane together, up to `MAX_TOGETHER`). A message whose key is busy waits in its lane without taking a
slot, so that repeats of one key (a re-drive, a replay) cannot fill every slot and starve the other
keys; the first message of a new key waits for a slot, its lane opened in turn. Messages are fetched
ahead while the slots are busy, at most `BUFFERED_PER_SLOT` per slot held in all. Per partition the
committed offset is the lowest one not yet done, so a crash redelivers only unfinished work.

The poll loop never waits for a handler: with the buffer full it still calls `getmany` now and then
(its partitions paused), so a slow LLM call never makes the consumer miss `max_poll_interval_ms` and
get thrown out of its group (aiokafka issue #848).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import uvloop
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition

from . import heap, logs, metrics, telemetry
from .db import connect_pool, migrate
from .errors import Kind, classify
from .events import Event, Topic
from .handlers import Bound, Publish
from .handling import Handling, Message
from .health import Ready, database_ready, listen, serve_health
from .kafka import DLQ_SUFFIX, KafkaPublish, client_options, ensure_topics, make_producer
from .lanes import Lanes
from .retry import MESSAGES, Tally, retry_until
from .settings import S, Settings, service_settings

log = logging.getLogger(__name__)

# Work a service runs beside its consumer (the merger's maintenance loop), given the port it publishes
# through (here Kafka's, on the consumer's producer).
Background = Callable[[Publish], Coroutine[Any, Any, None]]

POLL_MS = 200
# Messages held per in-flight slot, waiting in their key's lane included: bounds the memory a run of
# one key's messages can take while that key is busy.
BUFFERED_PER_SLOT = 16
LAG_EVERY_S = 5.0  # how often the consumer lag gauges are refreshed
# How often the offsets of finished messages are committed while running (and at every rebalance and
# stop): a crash redelivers at most this much finished work, which the idempotent handlers absorb;
# a commit per message would be a broker round trip per message.
COMMIT_EVERY_S = 1.0


@dataclass
class _PartitionProgress:
    """Offsets of one partition handed to handlers, in order, and which of them are done."""

    pending: collections.OrderedDict[int, bool] = field(default_factory=collections.OrderedDict)
    committable: int | None = None  # the offset to commit next (one past the last contiguous done)
    committed: int | None = None

    def add(self, offset: int) -> None:
        self.pending[offset] = False

    def finish(self, offset: int) -> None:
        if offset in self.pending:
            self.pending[offset] = True
        for offset, done in list(self.pending.items()):
            if not done:
                break
            del self.pending[offset]
            self.committable = offset + 1


Lane = tuple[TopicPartition, bytes | None]


class ConsumerService:
    def __init__(
        self,
        name: str,
        settings: Settings,
        handlers: Mapping[Topic, Bound[Any]],
        *,
        max_inflight: int | None = None,
        background: Background | None = None,
        dead_letters: bool = True,
        carriers: Mapping[str, tuple[Topic, Bound[Any]]] | None = None,
    ) -> None:
        self.background = background
        # False for a reader beside the topic's owner (the gateway's progress recorder): a message it
        # cannot take is skipped, and dead-lettered once, by the owner, not twice.
        self.dead_letters = dead_letters
        self.name = name
        self.settings = settings
        for handler in handlers.values():
            # The contract documents name each registry's group: the one it runs in must be that one.
            if handler.handlers.group not in (None, name):
                raise ValueError(f"handlers of group {handler.handlers.group!r} run in consumer group {name!r}")
        self.handlers = {settings.topic(topic): (topic, handler) for topic, handler in handlers.items()}
        # Topics (full names) that carry the events of another topic, each with a handler of its own: the
        # parser's intake.<producer> topics carry document-submitted events, and the handler knows the producer.
        self.handlers.update(carriers or {})
        self.max_inflight = max_inflight or settings.max_inflight
        self.producer = make_producer(settings)
        # What the handlers return and what the stage's loops publish, counted as this service's.
        self._publish = KafkaPublish(self.producer, settings, name)
        self.consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=settings.group(name),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
        )
        self._stopping = asyncio.Event()
        self._handling = Handling(name, settings, self.handlers, self._emit, self._dead_letter, self._stopping)
        self._progress: dict[TopicPartition, _PartitionProgress] = {}
        self._tasks: dict[Lane, asyncio.Task[None]] = {}  # one per lane being handled
        self._lanes: Lanes[Lane, ConsumerRecord] = Lanes()
        self._room = asyncio.Event()  # set when handled messages leave the buffer
        self.joined = False  # the group has given this member its partitions (readiness)
        self._lag_at = 0.0
        self._polled_at = self._committed_at = 0.0
        # A member that has not polled for max_poll_interval_ms is put out of its group.
        self._keepalive_s = settings.max_poll_interval_ms / 1000 / 4
        self._lag_reported: set[TopicPartition] = set()
        self._in_flight = metrics.IN_FLIGHT.labels(name)

    def stop(self) -> None:
        self._stopping.set()

    # --- the poll loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        await ensure_topics(self.settings)
        await self.producer.start()
        await self.consumer.start()
        await self._wait_for_topics()
        self.consumer.subscribe(list(self.handlers), listener=_Rebalance(self))
        log.info("%s consuming %s (%d in flight)", self.name, ", ".join(self.handlers), self.max_inflight)
        port = self._publish
        beside: asyncio.Task[None] | None = asyncio.create_task(self.background(port)) if self.background else None
        loop = asyncio.get_running_loop()
        try:
            while not self._stopping.is_set():
                # Fetched ahead while the slots are busy (up to the buffer): the messages of a key
                # being handled queue in its lane, the first of another key waits for a slot.
                free = self.max_inflight * BUFFERED_PER_SLOT - self._lanes.held
                assigned = self.consumer.assignment()
                if free <= 0:
                    if loop.time() - self._polled_at > self._keepalive_s:
                        # Poll now and then, so the group sees this member alive, but take nothing.
                        # Pausing drops what the fetcher holds of those partitions (fetched again on
                        # resume): hence only now and then, not at every turn of the loop.
                        self.consumer.pause(*assigned)
                        await self.consumer.getmany(timeout_ms=0)
                        self._polled_at = loop.time()
                    self._room.clear()
                    try:
                        await asyncio.wait_for(self._room.wait(), POLL_MS / 1000)
                    except TimeoutError:
                        pass
                else:
                    if self.consumer.paused():
                        self.consumer.resume(*assigned)
                    batches = await self.consumer.getmany(timeout_ms=POLL_MS, max_records=free)
                    self._polled_at = loop.time()
                    for partition, records in batches.items():
                        for record in records:
                            self._start(partition, record)
                if loop.time() - self._committed_at >= COMMIT_EVERY_S:
                    await self._commit_progress()
                    self._committed_at = loop.time()
                await self._measure_lag()
            await self._drain()
        finally:
            if beside is not None:
                beside.cancel()
            await self.consumer.stop()
            await self.producer.stop()

    async def _wait_for_topics(self, wait_s: float = 60.0) -> None:
        """Until the broker's metadata lists every topic consumed. A topic created a moment ago may not
        be there yet: subscribing then assigns none of its partitions, and the group is not rebalanced
        before the next metadata refresh (metadata_max_age_ms, 5 minutes), so the service sits idle."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while missing := set(self.handlers) - await self.consumer.topics():
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"{self.name}: topics missing from the cluster metadata: {sorted(missing)}")
            await asyncio.sleep(0.2)

    async def _measure_lag(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._lag_at < LAG_EVERY_S:
            return
        self._lag_at = now
        assigned = self.consumer.assignment()
        for tp in self._lag_reported - assigned:  # moved to another member: its lag is theirs to report
            metrics.LAG.remove(self.name, tp.topic, str(tp.partition))
        self._lag_reported = set(assigned)
        for tp in assigned:
            # Only what this process knows already: the poll loop must never wait on the broker here
            # (position() waits for an offset fetch, and stalled the loop while a leader moved).
            high = self.consumer.highwater(tp)
            progress = self._progress.get(tp)
            if high is None or progress is None:
                continue
            done = progress.committed if progress.committed is not None else next(iter(progress.pending), None)
            if done is not None:
                metrics.LAG.labels(self.name, tp.topic, str(tp.partition)).set(max(0, high - done))

    def _start(self, partition: TopicPartition, record: ConsumerRecord) -> None:
        self._progress.setdefault(partition, _PartitionProgress()).add(record.offset)
        lane = (partition, record.key)
        if self._lanes.add(lane, record):
            if len(self._tasks) < self.max_inflight and not self._lanes.ready:
                self._tasks[lane] = asyncio.create_task(self._handle_lane(lane))
            else:
                self._lanes.ready.append(lane)

    async def _handle_lane(self, lane: Lane) -> None:
        """Handle the messages of one key in offset order, in one slot, until none waits (several at
        once where the topic's handler takes them together)."""
        partition = lane[0]
        most = self._handling.most(partition.topic)
        self._in_flight.inc()
        try:
            while records := self._lanes.leading(lane, most):
                with metrics.HANDLER_SECONDS.labels(self.name, partition.topic).time():
                    handled = await self._handling.leading(records)
                if not handled:
                    return  # asked to stop: the rest of the lane is handed back too
                for record in records[:handled]:
                    metrics.CONSUMED.labels(self.name, record.topic).inc()
                    progress = self._progress.get(partition)
                    if progress is not None:
                        progress.finish(record.offset)
                    self._lanes.done(lane)
                self._room.set()
        finally:
            self._in_flight.dec()
            self._lanes.close(lane)
            self._tasks.pop(lane, None)
            if not self._stopping.is_set() and (waiting := self._lanes.next_ready()) is not None:
                self._tasks[waiting] = asyncio.create_task(self._handle_lane(waiting))
            self._room.set()

    async def _commit_progress(self, partitions: list[TopicPartition] | None = None) -> None:
        offsets = {
            tp: p.committable
            for tp, p in self._progress.items()
            if (partitions is None or tp in partitions) and p.committable is not None and p.committable != p.committed
        }
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except Exception as exc:  # a rebalance or a broker restart: the next round commits again
            log.warning("%s: commit failed (%s); will retry", self.name, exc)
            return
        for tp, offset in offsets.items():
            self._progress[tp].committed = offset

    async def _drain(self, partitions: list[TopicPartition] | None = None) -> None:
        """Let in-flight work on `partitions` (all if None) finish, hand back the rest, commit."""
        self._lanes.close_ready(
            lambda lane: partitions is None or lane[0] in partitions
        )  # not started: handed back as they are
        tasks = [t for (tp, _), t in self._tasks.items() if partitions is None or tp in partitions]
        if tasks:
            log.info("%s: waiting for %d messages in flight", self.name, len(tasks))
            _, unfinished = await asyncio.wait(tasks, timeout=self.settings.drain_timeout_s)
            for task in unfinished:  # handed back: their offsets stay uncommitted
                task.cancel()
            if unfinished:
                await asyncio.wait(unfinished, timeout=5)
                log.warning("%s: handed back %d unfinished messages", self.name, len(unfinished))
        await self._commit_progress(partitions)
        for tp in partitions if partitions is not None else list(self._progress):
            self._progress.pop(tp, None)

    async def _emit(self, events: list[Event]) -> None:
        """Publish what a handler returned; done once Kafka has acknowledged every event."""
        await self._publish(events, sender=None)  # checked by the handlers' registry

    async def _dead_letter(self, record: Message, reason: str) -> None:
        if not self.dead_letters:
            log.warning("skipping %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason)
            return
        log.error("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason)
        telemetry.failed(f"dead-lettered: {reason}")
        headers = [
            ("error", reason[:4000].encode()),
            ("source-topic", record.topic.encode()),
            ("source-partition", str(record.partition).encode()),
            ("source-offset", str(record.offset).encode()),
            ("service", self.name.encode()),
        ]

        dlq = record.topic + DLQ_SUFFIX

        def forever(exc: Exception, tally: Tally) -> float | None:
            if classify(exc) is Kind.POISON:
                return None  # refused for good: see below
            log.warning("dead-letter publish failed (%s); retrying", exc)
            return MESSAGES.delay(tally.total())

        try:
            await retry_until(
                lambda: self.producer.send_and_wait(dlq, record.value, key=record.key, headers=headers), forever
            )
        except Exception as exc:
            if record.value is None:
                raise
            # The dead-letter topic refuses the message itself for good (too large): keep where it came
            # from and why (the headers), rather than retry forever; its bytes stay on its topic.
            log.error("%s refused %s@%d for good (%s): dead-lettered without its value", dlq, record.topic,
                      record.offset, exc)  # fmt: skip
            await retry_until(
                lambda: self.producer.send_and_wait(dlq, None, key=record.key, headers=headers),
                lambda exc, tally: MESSAGES.delay(tally.total()),
            )
        metrics.DEAD_LETTERED.labels(self.name, record.topic).inc()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Before partitions move to another member, finish (or hand back) their work and commit it,
    so that two members never work on the same message at once."""

    def __init__(self, service: ConsumerService) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if revoked:
            await self.service._drain(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.service.joined = True
        log.info("%s: assigned %s", self.service.name, sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))


def run_service(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Entry point helper: logging, SIGTERM/SIGINT → graceful stop, one event loop (uvloop's: the
    loop's own work per message is a large share of a service's, and libuv's costs less of it)."""
    # Text until `serve` has read the settings (DOCSUM_LOG_FORMAT): a bad setting is still one line.
    logs.configure(_service_of_main())

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    heap.freeze_imports()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_main())


def _service_of_main() -> str:
    """The service run as `python -m docsum_<service>` ("parser"), for its log lines."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    package = spec.name.partition(".")[0] if spec is not None else ""
    return package.removeprefix("docsum_") or "docsum"


@dataclass(frozen=True)
class Consumer:
    """One consumer group of a service: its handlers and how many messages it handles at once."""

    handlers: Mapping[Topic, Bound[Any]]
    max_inflight: int | None = None
    group_suffix: str = ""  # a second group in the same service (e.g. "-retry")
    # Topics (full names) whose messages are events of another topic, with their own handlers.
    carriers: Mapping[str, tuple[Topic, Bound[Any]]] = field(default_factory=dict)
    # What its handlers hold open (an LLM client's connections), closed once it has stopped.
    close: Callable[[], Awaitable[None]] | None = None
    # What runs beside it, with its publishing port, for as long as it consumes (a service's loops).
    background: Background | None = None


async def serve(
    name: str,
    stop: asyncio.Event,
    model: type[S],
    build: Callable[[S, asyncpg.Pool], Mapping[Topic, Bound[Any]] | list[Consumer]],
) -> None:
    """Connect to Postgres (migrating it), then consume until `stop` is set.

    `model` is the service's settings class; `build` gives the handlers of one consumer group, or several
    `Consumer`s run side by side.
    """
    settings = service_settings(name, model)
    health_socket = (
        listen(settings.health_host, settings.health_port, "DOCSUM_HEALTH_PORT", name)
        if settings.health_port is not None
        else None
    )
    logs.configure(name, settings.log_format)
    telemetry.setup(name, settings.trace_file)  # before the pool and the clients, so they are instrumented
    pool = await connect_pool(settings.database_url, max_size=settings.db_pool_max)
    try:
        await migrate(pool)
        built = build(settings, pool)
        consumers = built if isinstance(built, list) else [Consumer(built)]
        services = [
            ConsumerService(
                name + c.group_suffix,
                settings,
                c.handlers,
                max_inflight=c.max_inflight,
                background=c.background,
                carriers=c.carriers,
            )
            for c in consumers
        ]
        watcher = asyncio.create_task(_stop_when(stop, services))
        health = (
            asyncio.create_task(serve_health(health_socket, _ready(services, pool)))
            if health_socket is not None
            else None
        )
        try:
            await asyncio.gather(*(service.run() for service in services))
        finally:
            watcher.cancel()
            if health is not None:
                health.cancel()
            for consumer in consumers:
                if consumer.close is not None:
                    await consumer.close()
    finally:
        await pool.close()
        if health_socket is not None:
            health_socket.close()


def _ready(services: list[ConsumerService], pool: asyncpg.Pool) -> Ready:
    """Ready: every consumer joined its group, and PostgreSQL answers."""
    database = database_ready(pool)

    async def check() -> str | None:
        waiting = [s.name for s in services if not s.joined]
        if waiting:
            return f"not yet in the consumer group: {', '.join(waiting)}"
        return await database()

    return check


async def _stop_when(stop: asyncio.Event, services: list[ConsumerService]) -> None:
    await stop.wait()
    for service in services:
        service.stop()
