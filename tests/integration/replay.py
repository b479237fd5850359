"""Replaying a task's events: read them back from every topic, publish them again, wait for the consumers."""

from __future__ import annotations

import json
import time

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from docsum_shared.events import Topic
from docsum_shared.kafka import topic_partitions
from docsum_shared.settings import Settings
from tests.integration.helpers import eventually, kafka_options

SERVICE_TOPICS = {
    "parser": [Topic.DOCUMENT_SUBMITTED],
    "chunker": [Topic.DOCUMENT_PARSED],
    "summarizer": [Topic.CHUNK_CREATED],
    "merger": [Topic.CHUNK_SUMMARIZED, Topic.DOCUMENT_MERGED],
}


async def republish_task_events(env: dict[str, str], task_id: str) -> int:
    prefix, options = env["DOCSUM_TOPIC_PREFIX"], kafka_options(env)
    topics = [prefix + t for t in Topic]
    consumer = AIOKafkaConsumer(**options, enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(**options, acks="all")
    await consumer.start()
    await producer.start()
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in range(_declared(prefix)[t])]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [r for r in records if _task_of(r.value) == task_id]
        for record in found:
            await producer.send_and_wait(record.topic, record.value, key=record.key)
        return len(found)
    finally:
        await consumer.stop()
        await producer.stop()


async def wait_until_consumed(env: dict[str, str], timeout: float = 60.0, *, quiet_s: float = 0.0) -> None:
    """Until every service's consumer group has committed up to the end of its topics; with `quiet_s`, until
    that has held for `quiet_s` seconds with no new event on those topics (a straggling re-emit has landed)."""
    prefix, options = env["DOCSUM_TOPIC_PREFIX"], kafka_options(env)
    admin = AIOKafkaAdminClient(**options)
    consumer = AIOKafkaConsumer(**options)
    await admin.start()
    await consumer.start()
    lagging: list[TopicPartition] = []
    quiet: tuple[dict[TopicPartition, int], float] | None = None  # the topics' ends, and since when

    async def caught_up() -> bool:
        nonlocal lagging, quiet
        lagging, ends = [], {}
        for service, topics in SERVICE_TOPICS.items():
            committed = await admin.list_consumer_group_offsets(f"{prefix}docsum-{service}")
            partitions = [TopicPartition(prefix + t, p) for t in topics for p in range(_declared(prefix)[prefix + t])]
            ends.update(await consumer.end_offsets(partitions))
            lagging += [tp for tp in partitions if ends[tp] > (committed.get(tp).offset if tp in committed else 0)]
        if lagging:
            quiet = None
            return False
        if quiet is None or quiet[0] != ends:
            quiet = (ends, time.monotonic())
        return time.monotonic() - quiet[1] >= quiet_s

    def lagging_on() -> str:
        return f"the consumers to catch up (lagging on {lagging})"

    try:
        await eventually(caught_up, timeout=timeout, interval=0.3, message=lagging_on)
    finally:
        await admin.close()
        await consumer.stop()


async def snapshot(db: asyncpg.Pool, task_id: str) -> dict[str, list]:
    """Every stored row of the task, as plain tuples."""
    return {
        "tasks": [tuple(r) for r in await db.fetch("SELECT * FROM tasks WHERE id = $1", task_id)],
        "documents": [
            tuple(r) for r in await db.fetch("SELECT * FROM documents WHERE task_id = $1 ORDER BY id", task_id)
        ],
        "chunks": [
            tuple(r)
            for r in await db.fetch(
                "SELECT c.* FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1 ORDER BY c.id",
                task_id,
            )
        ],
        "llm_results": [tuple(r) for r in await db.fetch("SELECT * FROM llm_results ORDER BY key")],
    }


def _declared(prefix: str) -> dict[str, int]:
    """The topics' partition counts, as the services declare them."""
    return topic_partitions(Settings(topic_prefix=prefix))


def _task_of(value: bytes | None) -> str | None:
    """The task an event belongs to; None for anything that is not an event (poison from other tests)."""
    try:
        data = json.loads(value or b"")
    except ValueError:
        return None
    return data.get("task_id") if isinstance(data, dict) else None
