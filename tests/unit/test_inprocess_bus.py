"""The in-process runner's bus keeps what the handlers rely on of Kafka: one key's events in the order they
were published, other keys side by side up to the group's in-flight bound, every group reading a topic
gets each event, a handler's events are on the bus before its own counts as done, a message that is its
own fault is dead-lettered alone, and `twice` delivers every event a second time."""

from __future__ import annotations

import asyncio

import pytest
from docsum_pipeline.inprocess import Bus

from docsum_shared.errors import Poison
from docsum_shared.events import ChunkSummarized, DocumentMerged, DocumentOutcome, Event, TaskEvent
from docsum_shared.handlers import Handlers, Sender
from docsum_shared.settings import Settings
from docsum_shared.states import TaskStatus

SETTINGS = Settings(topic_prefix="t.")
TESTS = Sender("the tests", (ChunkSummarized, TaskEvent, DocumentMerged))


def _summarized(document: str, index: int) -> ChunkSummarized:
    return ChunkSummarized(task_id="task", document_id=document, chunk_id=f"{document}-{index}", chunk_index=index)


class Seen:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.running = 0
        self.most_running = 0
        self.release = asyncio.Event()
        self.release.set()


def _join(bus: Bus, name: str, handlers: Handlers[Seen], seen: Seen, max_inflight: int = 8) -> None:
    bound = handlers.bind(seen)
    bus.join(name, {SETTINGS.topic(topic): (topic, handler) for topic, handler in bound.items()}, max_inflight)


async def _idle(bus: Bus) -> None:
    for _ in range(500):
        if bus.idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the bus did not go idle")


def _recording(group: str) -> Handlers[Seen]:
    handlers = Handlers[Seen](group)

    @handlers.on(ChunkSummarized, emits=())
    async def record(event: ChunkSummarized, seen: Seen) -> list[Event]:
        seen.running += 1
        seen.most_running = max(seen.most_running, seen.running)
        await seen.release.wait()
        await asyncio.sleep(0)
        seen.events.append(event)
        seen.running -= 1
        return []

    return handlers


@pytest.mark.asyncio
async def test_one_keys_events_arrive_in_order_and_other_keys_run_beside_up_to_the_bound() -> None:
    bus = Bus(SETTINGS)
    seen = Seen()
    seen.release.clear()
    _join(bus, "merger", _recording("merger"), seen, max_inflight=3)
    events = [_summarized(document, index) for index in range(5) for document in ("a", "b", "c", "d", "e")]
    await bus(events, sender=TESTS)
    await asyncio.sleep(0.05)
    assert seen.running == 3  # five keys waiting, three at once
    seen.release.set()
    await _idle(bus)
    assert seen.most_running == 3
    for document in "abcde":
        assert [e.chunk_index for e in seen.events if isinstance(e, ChunkSummarized) and e.document_id == document] == [
            0, 1, 2, 3, 4,
        ]  # fmt: skip
    await bus.stop()


@pytest.mark.asyncio
async def test_every_group_reading_a_topic_gets_each_event_as_the_bytes_kafka_would_carry() -> None:
    bus = Bus(SETTINGS)
    merger, recorder = Seen(), Seen()
    _join(bus, "merger", _recording("merger"), merger)
    _join(bus, "gateway-progress", _recording("gateway-progress"), recorder)
    sent = _summarized("a", 0)
    await bus([sent], sender=TESTS)
    await _idle(bus)
    assert merger.events == recorder.events == [sent]
    assert merger.events[0] is not sent  # decoded again, as from a topic
    await bus.stop()


@pytest.mark.asyncio
async def test_a_handlers_events_are_handed_on_and_twice_delivers_each_a_second_time() -> None:
    bus = Bus(SETTINGS, twice=True)
    chain = Handlers[Seen]("merger")

    @chain.on(ChunkSummarized, emits=(DocumentMerged,))
    async def merge(event: ChunkSummarized, seen: Seen) -> list[Event]:
        seen.events.append(event)
        return [event.next(DocumentMerged, document_id=event.document_id, outcome=DocumentOutcome.COMPLETED)]

    @chain.on(DocumentMerged, emits=())
    async def merged(event: DocumentMerged, seen: Seen) -> list[Event]:
        seen.events.append(event)
        return []

    seen = Seen()
    _join(bus, "merger", chain, seen)
    await bus([_summarized("a", 0)], sender=TESTS)
    await _idle(bus)
    # The chunk's event twice; each handling emits a merge, each delivered twice.
    assert [type(e).__name__ for e in seen.events].count("ChunkSummarized") == 2
    assert [type(e).__name__ for e in seen.events].count("DocumentMerged") == 4
    await bus.stop()


@pytest.mark.asyncio
async def test_a_poison_message_is_dead_lettered_alone_and_its_key_goes_on() -> None:
    bus = Bus(SETTINGS)
    handlers = Handlers[Seen]("merger")

    @handlers.on(TaskEvent, emits=())
    async def task_event(event: TaskEvent, seen: Seen) -> list[Event]:
        if event.detail.get("bad"):
            raise Poison("this one is its own fault")
        seen.events.append(event)
        return []

    seen = Seen()
    _join(bus, "merger", handlers, seen)
    events = [TaskEvent(task_id="t", status=TaskStatus.PROCESSING, detail={"bad": i == 1, "n": i}) for i in range(3)]
    await bus(events, sender=TESTS)
    await _idle(bus)
    assert [e.detail["n"] for e in seen.events if isinstance(e, TaskEvent)] == [0, 2]
    assert [(d.group, "its own fault" in d.reason) for d in bus.dead_letters] == [("merger", True)]
    await bus.stop()


@pytest.mark.asyncio
async def test_a_sender_publishing_what_it_does_not_declare_is_refused() -> None:
    bus = Bus(SETTINGS)
    with pytest.raises(TypeError, match="does not declare"):
        await bus([_summarized("a", 0)], sender=Sender("the gateway", (TaskEvent,)))
    assert bus.published == 0
