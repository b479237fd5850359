"""An event Kafka refuses for good is not retried forever: the message that led to it is dead-lettered
with the reason, and the service goes on.

The stack's `task-finished` topic is created before its services start, with a `max.message.bytes`
smaller than any task's result: the merger's every result is refused (MessageSizeTooLargeError, which
says it is not retriable), as a result over a real broker's limit would be.
"""

from __future__ import annotations

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from docsum_shared.events import Topic
from docsum_shared.kafka import DLQ_SUFFIX, topic_partitions
from docsum_shared.settings import Settings
from tests.integration.conftest import SERVICES, Stack, StackFactory
from tests.integration.helpers import (
    eventually,
    kafka_options,
    new_marker,
    read_topics,
    submit,
    task_of,
    txt,
    wait_for_task,
)

RESULT_MAX_BYTES = 512  # a task's result is a few KB: the envelope and ids alone take ~300 bytes


async def _small_result_topic(stack: Stack) -> str:
    name = stack.env["DOCSUM_TOPIC_PREFIX"] + Topic.TASK_FINISHED
    partitions = topic_partitions(Settings(topic_prefix=stack.env["DOCSUM_TOPIC_PREFIX"]))[name]
    admin = AIOKafkaAdminClient(**kafka_options(stack.env))
    await admin.start()
    try:
        topic = NewTopic(name, partitions, 1, topic_configs={"max.message.bytes": str(RESULT_MAX_BYTES)})
        await admin.create_topics([topic])
    finally:
        await admin.close()
    return name


async def _dead_letters(stack: Stack, task_id: str) -> list[dict[str, str]]:
    """The headers of the task's messages on the task-events dead-letter topic, once there is one."""
    dlq = stack.env["DOCSUM_TOPIC_PREFIX"] + Topic.TASK_EVENTS + DLQ_SUFFIX

    async def found() -> list[dict[str, str]]:
        records = [r for r in await read_topics(stack.env, [dlq]) if task_of(r) == task_id]
        return [{k: v.decode() for k, v in r.headers} for r in records]

    return await eventually(found, timeout=60, message=f"task {task_id}'s refused result in {dlq}", stack=stack)


async def test_a_result_too_large_for_its_topic_is_dead_lettered_with_the_reason(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    stack = make_stack(services=())
    result_topic = await _small_result_topic(stack)
    for name in SERVICES:
        stack.start(name)
    stack.wait_ready()

    async with stack.client() as alice:
        # Two tasks, one after the other: the first refusal leaves the merger (and its producer) working.
        for n in range(2):
            text = f"{new_marker()} The quarterly report covers revenue, costs and plans. " * 20
            task_id = await submit(alice, [txt(f"report-{n}.txt", text)])
            task = await wait_for_task(alice, task_id, stack, timeout=120)
            assert task["status"] == "COMPLETED", task  # the task itself is done and stored

            (headers,) = await _dead_letters(stack, task_id)
            print(f"\n{task_id}: dead-lettered by the {headers['service']}: {headers['error']}")
            assert headers["service"] == "merger", headers
            assert "MessageSizeTooLargeError" in headers["error"], headers
            assert "not retriable" in headers["error"] and result_topic in headers["error"], headers
            assert not [r for r in await read_topics(stack.env, [result_topic]) if r.key == task_id.encode()]

    # Refused once, dead-lettered at once: never tried again.
    merger_log = (stack.logs / "merger.log").read_text(errors="replace").splitlines()
    retried = [line for line in merger_log if "MessageSizeTooLarge" in line and "retrying" in line]
    assert not retried, retried[:3]
