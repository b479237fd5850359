"""The in-process runner: the whole plan in one process and one event loop, an asyncio bus in Kafka's place.

    async with run_in_process(settings_of, port=8000) as running:   # settings objects, one per stage
        ...                                  # the gateway answers at running.url; events flow on the bus

Every stage of the plan is wired as the Kafka runner wires it (`Stage.consumer`: its dependencies, its
handlers bound to them, its loops beside), on the given PostgreSQL; its handlers are called by the same
`Handling` (decode, handle, publish what they return, the retry rule for messages, dead letters). The
gateway's application is mounted as its `__main__` serves it (the plan's FRONTS), its routes publishing
onto the bus.

The bus keeps what the handlers rely on of Kafka: each event is carried as the bytes Kafka would carry
and decoded again, every consumer group that reads its topic gets it, one key's events reach a group in
the order they were published (one after another; other keys meanwhile, up to the stage's in-flight
bound), and a handler's events are on the bus before its own event counts as done. Delivery is
at-least-once: `twice=True` delivers every event a second time, right after the first, as a consumer
restarting before its commit would. What the bus does not have: partitions, offsets that survive the
process, foreign producers' intake topics, brokers to kill. Tests of those run the Kafka runner.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from docsum_shared.db import connect_pool, migrate
from docsum_shared.events import TOPIC_OF, Event, Topic
from docsum_shared.handlers import Bound, Publish, Sender
from docsum_shared.handling import Handling, Message, Routes
from docsum_shared.kafka import DLQ_SUFFIX
from docsum_shared.lanes import Lanes
from docsum_shared.settings import Settings
from docsum_shared.stage import Attach, Stage

from . import plan

log = logging.getLogger(__name__)

SettingsOf = Callable[[Stage[Any, Any]], Settings]  # each stage's settings
GRACE_S = 5.0  # how long the gateway's server waits for requests in flight when the runner stops


@dataclass(frozen=True)
class BusRecord:
    """A message on the bus, as a consumer group receives it (handling.Message)."""

    topic: str
    offset: int
    key: bytes | None
    value: bytes | None
    partition: int = 0
    headers: Sequence[tuple[str, bytes]] = ()


@dataclass(frozen=True)
class DeadLetter:
    """A message a group could not take, and why (Kafka's runner puts it on `<topic>.dlq`)."""

    group: str
    record: BusRecord
    reason: str


class _Group:
    """One consumer group on the bus: a lane per key, its messages handled in order; at most
    `max_inflight` lanes at once, the others waiting for a slot in the order they opened."""

    def __init__(self, handling: Handling, max_inflight: int) -> None:
        self.handling = handling
        self.max_inflight = max_inflight
        self.lanes: Lanes[tuple[str, bytes | None], BusRecord] = Lanes()
        self.running: dict[tuple[str, bytes | None], asyncio.Task[None]] = {}

    def put(self, record: BusRecord) -> None:
        lane = (record.topic, record.key)
        if not self.lanes.add(lane, record):
            return
        if len(self.running) < self.max_inflight:
            self.running[lane] = asyncio.create_task(self._run(lane))
        else:
            self.lanes.ready.append(lane)

    @property
    def idle(self) -> bool:
        return not self.lanes.waiting

    async def _run(self, lane: tuple[str, bytes | None]) -> None:
        most = self.handling.most(lane[0])
        try:
            while records := self.lanes.leading(lane, most):
                done = await self.handling.leading(records)
                if not done:
                    return  # stopping: what is left is dropped with the bus
                for _ in range(done):
                    self.lanes.done(lane)
        finally:
            del self.running[lane]
            if not self.handling.stopping.is_set() and (waiting := self.lanes.next_ready()) is not None:
                self.running[waiting] = asyncio.create_task(self._run(waiting))

    async def stop(self) -> None:
        for task in self.running.values():
            task.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)


class Bus:
    """Kafka's place in the in-process runner: the events published, handed to every group that reads
    their topic. Also the `Publish` port the stages' loops and the gateway's routes are given."""

    def __init__(self, settings: Settings, *, twice: bool = False, keep: bool = False) -> None:
        self.settings = settings  # for the topics' full names
        self.twice = twice
        self.readers: dict[str, list[_Group]] = collections.defaultdict(list)
        self.dead_letters: list[DeadLetter] = []
        # Every message published, dead letters on `<topic>.dlq` included, in order: what a test reads
        # off the topics (`keep`; a topic on a broker keeps them too, but this one is in memory).
        self.kept: list[BusRecord] | None = [] if keep else None
        self.published = 0
        self._offsets = itertools.count()
        self.stopping = asyncio.Event()

    def join(self, name: str, routes: Routes, max_inflight: int, *, dead_letters: bool = True) -> None:
        """Add a consumer group reading the topics of `routes`."""

        async def dead_letter(record: Message, reason: str) -> None:
            if dead_letters:  # a reader beside the topics' owner skips what it cannot take
                log.error("%s: dead-lettering %s@%d: %s", name, record.topic, record.offset, reason)
                assert isinstance(record, BusRecord)
                self.dead_letters.append(DeadLetter(name, record, reason))
                if self.kept is not None:
                    headers = [("error", reason[:4000].encode()), ("source-topic", record.topic.encode()),
                               ("service", name.encode())]  # fmt: skip
                    self.kept.append(
                        BusRecord(record.topic + DLQ_SUFFIX, next(self._offsets), record.key, record.value, 0, headers)
                    )
            else:
                log.warning("%s: skipping %s@%d: %s", name, record.topic, record.offset, reason)

        group = _Group(Handling(name, self.settings, routes, self._emit, dead_letter, self.stopping), max_inflight)
        for topic in routes:
            self.readers[topic].append(group)

    async def __call__(self, events: Sequence[Event], *, sender: Sender) -> None:
        sender.check(events)
        await self._emit(list(events))

    async def _emit(self, events: list[Event]) -> None:
        """Handed to every group reading each event's topic: done at once (Kafka's acknowledgement)."""
        for event in events:
            topic = self.settings.topic(TOPIC_OF[type(event)])
            record = BusRecord(topic, next(self._offsets), event.key().encode(), event.to_bytes())
            self.published += 1
            if self.kept is not None:
                self.kept.append(record)
            for group in self.readers.get(topic, ()):
                group.put(record)
                if self.twice:
                    group.put(record)

    @property
    def idle(self) -> bool:
        """No message waits or is being handled (a stage's loops may still publish later)."""
        return all(group.idle for groups in self.readers.values() for group in groups)

    async def stop(self) -> None:
        self.stopping.set()
        groups = {id(g): g for groups in self.readers.values() for g in groups}
        await asyncio.gather(*(group.stop() for group in groups.values()))


@dataclass
class Running:
    """The plan running in this process."""

    bus: Bus
    url: str | None  # where the gateway answers (None: not mounted)


@asynccontextmanager
async def run_in_process(
    settings_of: SettingsOf,
    *,
    stages: Sequence[Stage[Any, Any]] | None = None,
    host: str = "127.0.0.1",
    port: int | None = 0,
    twice: bool = False,
    keep: bool = False,
) -> AsyncIterator[Running]:
    """Run `stages` (default: the whole plan) in this event loop until the context ends. The gateway's
    application, when it is among them, listens on `host`:`port` (0: a free port; None: not mounted).
    `twice`: every event delivered twice; `keep`: the bus keeps every message (Bus.kept)."""
    stages = list(plan.stages() if stages is None else stages)
    first = settings_of(stages[0])
    bus = Bus(first, twice=twice, keep=keep)
    async with AsyncExitStack() as stack:
        running = Running(bus, None)
        migrated = False
        for stage in stages:
            settings = settings_of(stage)
            pool = await connect_pool(settings.database_url, max_size=settings.db_pool_max)
            stack.push_async_callback(pool.close)
            if not migrated:
                await migrate(pool)
                migrated = True
            front = plan.FRONTS.get(stage.name)
            if front is not None:
                if port is None:
                    continue
                config = front(settings, _attach(bus, stage))
                running.url = await stack.enter_async_context(_served(config, host, port))
                continue
            _wire(bus, stage, settings, pool, stack)
        stack.push_async_callback(bus.stop)
        yield running


def _wire(bus: Bus, stage: Stage[Any, Any], settings: Settings, pool: asyncpg.Pool, stack: AsyncExitStack) -> None:
    """`stage` on the bus, as `Stage.consumer` wires it for Kafka: its handlers in its consumer group, its
    loops as tasks (cancelled at the end), what its dependencies hold closed after."""
    consumer = stage.consumer(settings, pool)
    routes: dict[str, tuple[Topic, Bound[Any]]] = {
        settings.topic(topic): (topic, handler) for topic, handler in consumer.handlers.items()
    }
    bus.join(
        stage.handlers.group or stage.name,
        routes,
        consumer.max_inflight or settings.max_inflight,
        dead_letters=stage.handlers.dead_letters,
    )
    if consumer.close is not None:
        stack.push_async_callback(consumer.close)
    if consumer.background is not None:
        loop = asyncio.create_task(consumer.background(bus))
        stack.push_async_callback(_cancelled, loop)


def _attach(bus: Bus, stage: Stage[Any, Any]) -> Attach:
    """The gateway's way onto the bus: its stage (the progress recorder) wired on the application's own
    pool while it runs, its routes publishing onto the bus."""

    @asynccontextmanager
    async def attach(settings: Any, pool: asyncpg.Pool) -> AsyncIterator[Publish]:
        async with AsyncExitStack() as stack:
            _wire(bus, stage, settings, pool, stack)
            yield bus

    return attach


@asynccontextmanager
async def _served(config: Any, host: str, port: int) -> AsyncIterator[str]:
    """A front's server (its uvicorn.Config) on `host`:`port` (0: a free one, bound here) until the
    context ends."""
    import uvicorn  # the gateway's server: only a runner that mounts the gateway needs it

    sock = socket.create_server((host, port))
    # A stream left open (a progress stream a client never closed) must not hold the runner's end: it
    # waits this long for requests in flight, then closes what is left.
    if config.timeout_graceful_shutdown is None:
        config.timeout_graceful_shutdown = GRACE_S
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            serving.result()  # the application failed to start: its error, here
            raise RuntimeError("the gateway stopped while starting")
        await asyncio.sleep(0.02)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
