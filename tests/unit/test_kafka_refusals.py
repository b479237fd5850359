"""publish: an event Kafka refuses for good becomes EventRefused (the consumer shell dead-letters the
message with it), naming the event, its topic and the reason; a passing failure stays what it was. And
a message its dead-letter topic refuses is dead-lettered without its value, not retried forever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.structs import ConsumerRecord

from docsum_shared.consumer import ConsumerService
from docsum_shared.errors import EventRefused, Kind, classify
from docsum_shared.events import ChunkCreated, TaskEvent
from docsum_shared.handlers import Sender
from docsum_shared.kafka import publish
from docsum_shared.settings import Settings

EVENT = ChunkCreated(task_id="t", document_id="d", chunk_id="d:00001", chunk_index=1)


class _Producer:
    """Refuses at send (as aiokafka does over its own max_request_size) or at delivery (the broker)."""

    def __init__(self, *, at_send: Exception | None = None, at_delivery: Exception | None = None) -> None:
        self.at_send, self.at_delivery = at_send, at_delivery

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(12))

    async def send(self, topic: str, value: bytes, **_: Any) -> asyncio.Future[None]:
        if self.at_send is not None:
            raise self.at_send
        delivery: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.at_delivery is not None:
            delivery.set_exception(self.at_delivery)
        else:
            delivery.set_result(None)
        return delivery


@pytest.mark.parametrize("where", ["at_send", "at_delivery"])
async def test_an_event_refused_for_good_names_itself_its_topic_and_the_reason(where: str) -> None:
    producer = _Producer(**{where: kafka_errors.MessageSizeTooLargeError()})
    with pytest.raises(EventRefused) as refused:
        await publish(producer, Settings(topic_prefix="p."), [EVENT], sender=None)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "ChunkCreated" in message and "d:00001" in message and "p.chunk-created" in message
    assert "MessageSizeTooLargeError" in message and "not retriable" in message
    assert classify(refused.value) is Kind.POISON


@pytest.mark.parametrize(
    "error",
    [kafka_errors.NotLeaderForPartitionError(), kafka_errors.KafkaTimeoutError()],
    ids=lambda e: type(e).__name__,
)
async def test_a_passing_kafka_failure_is_raised_as_it_is(error: kafka_errors.KafkaError) -> None:
    with pytest.raises(type(error)):
        await publish(_Producer(at_delivery=error), Settings(), [EVENT], sender=None)  # type: ignore[arg-type]
    assert classify(error) is Kind.RETRIABLE


class _DeadLetterTopic:
    """A dead-letter topic that refuses any message with a value over `max_bytes` (max.message.bytes)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes]]]] = []

    async def send_and_wait(self, topic: str, value: bytes | None, *, key: bytes, headers: list) -> None:
        if value is not None and len(value) > self.max_bytes:
            raise kafka_errors.MessageSizeTooLargeError()
        self.sent.append((topic, value, headers))


async def test_a_message_its_dead_letter_topic_refuses_is_dead_lettered_without_its_value() -> None:
    """Not retried forever: the entry keeps where the message came from and why, without its bytes."""
    service = ConsumerService("parser", Settings(topic_prefix="p."), {})
    dlq = _DeadLetterTopic(max_bytes=100)
    service.producer = dlq  # type: ignore[assignment]
    record = ConsumerRecord(
        topic="p.document-submitted", partition=2, offset=41, timestamp=0, timestamp_type=0, key=b"d",
        value=b"x" * 1000, checksum=None, serialized_key_size=1, serialized_value_size=1000, headers=(),
    )  # fmt: skip
    await asyncio.wait_for(service._dead_letter(record, "the bytes are over a cap"), timeout=5)
    ((topic, value, headers),) = dlq.sent
    assert (topic, value) == ("p.document-submitted.dlq", None)
    assert dict(headers)["error"] == b"the bytes are over a cap" and dict(headers)["source-offset"] == b"41"


async def test_a_sender_publishes_only_what_it_declares() -> None:
    producer = _Producer(at_send=AssertionError("nothing may be sent"))
    scheduler = Sender("the round scheduler", emits=(TaskEvent,))
    with pytest.raises(TypeError, match="the round scheduler published ChunkCreated, which it does not declare"):
        await publish(producer, Settings(), [EVENT], sender=scheduler)  # type: ignore[arg-type]
