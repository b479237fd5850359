"""The consumer shell hands a handler registered with `on_many` the messages waiting in one key's lane
together, on a real broker: in offset order, committed once handled, a malformed message still
dead-lettered on its own, and a batch that fails for one bad message handled one by one, so only that
message is dead-lettered."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from docsum_shared.consumer import ConsumerService
from docsum_shared.errors import Poison
from docsum_shared.events import ChunkSummarized, Event, Topic
from docsum_shared.handlers import Handlers
from docsum_shared.kafka import DLQ_SUFFIX, client_options, topic_partitions
from docsum_shared.settings import Settings
from tests.integration.helpers import eventually

pytestmark = pytest.mark.integration


@dataclass
class Seen:
    calls: list[list[int]] = field(default_factory=list)  # the chunk indexes of each call, in order
    release: asyncio.Event = field(default_factory=asyncio.Event)
    poison: int | None = None  # the chunk index a call refuses as poison


handlers = Handlers[Seen]()


@handlers.on_many(ChunkSummarized, emits=())
async def take(events: list[ChunkSummarized], seen: Seen) -> list[Event]:
    seen.calls.append([e.chunk_index for e in events])
    await seen.release.wait()
    if seen.poison in [e.chunk_index for e in events]:
        raise Poison(f"chunk {seen.poison} is refused")
    return []


def event(index: int) -> ChunkSummarized:
    return ChunkSummarized(task_id="t", document_id="doc", chunk_id=f"c{index}", chunk_index=index)


async def test_waiting_messages_of_one_key_are_handled_together(infra: dict[str, str]) -> None:
    settings = Settings(
        kafka_bootstrap_servers=infra["KAFKA_BOOTSTRAP_SERVERS"],
        topic_prefix=f"together-{uuid.uuid4().hex[:8]}.",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    seen = Seen(poison=7)
    service = ConsumerService("together", settings, handlers.bind(seen, ChunkSummarized))
    running = asyncio.create_task(service.run())
    topic = settings.topic(Topic.CHUNK_SUMMARIZED)
    producer = AIOKafkaProducer(**client_options(settings))
    await eventually(lambda: service.joined, timeout=60, message="the consumer to join")
    await producer.start()
    try:
        await producer.send_and_wait(topic, event(0).to_bytes(), key=b"doc")
        await eventually(lambda: seen.calls == [[0]], timeout=30, message="the first call")
        # While 0 is being handled, 1-4, a malformed message, 5-8 (7 refused) wait in the key's lane.
        for index in range(1, 5):
            await producer.send(topic, event(index).to_bytes(), key=b"doc")
        await producer.send(topic, b'{"not": "an event"}', key=b"doc")
        for index in range(5, 9):
            await producer.send(topic, event(index).to_bytes(), key=b"doc")
        await producer.flush()
        # All fetched (0 being handled, nine behind it), before 0 is let go.
        await eventually(lambda: service._lanes.held == 10, timeout=30, message="the nine to wait in the lane")
        seen.release.set()
        await eventually(
            lambda: seen.calls[-1:] == [[8]], timeout=30, message=lambda: f"chunk 8 alone, after {seen.calls}"
        )
    finally:
        await producer.stop()
        service.stop()
        await asyncio.wait_for(running, 60)

    assert seen.calls == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [5], [6], [7], [8]]
    parked = await _read(settings, topic + DLQ_SUFFIX)
    assert len(parked) == 2
    assert parked[0] == b'{"not": "an event"}'  # on its own: it never reached the handler
    assert ChunkSummarized.model_validate_json(parked[1]).chunk_index == 7  # the one refused, alone
    committed = await _committed(settings, topic, settings.group("together"))
    assert committed == 10  # every message done: none is delivered again


async def _read(settings: Settings, topic: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(topic_partitions(settings)[topic])]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        values: list[bytes] = []
        while sum(ends.values()) > len(values):
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                values.extend(r.value for r in records)
        return values
    finally:
        await consumer.stop()


async def _committed(settings: Settings, topic: str, group: str) -> int:
    consumer = AIOKafkaConsumer(**client_options(settings), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(topic_partitions(settings)[topic])]
        return sum([(await consumer.committed(tp)) or 0 for tp in partitions])
    finally:
        await consumer.stop()
