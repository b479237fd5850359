"""What every runner does with the messages of one key: decode, handle, publish what the handler
returned, try again while the failure passes (retry.py's rule for messages), dead-letter what is the
message's own fault. The Kafka runner (consumer.py) hands it records it polled; the in-process runner
(inprocess.py) the events its bus carries, as the same bytes. Where a message goes next, and when its
offset counts as done, is the runner's.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from pydantic import ValidationError

from . import logs, telemetry
from .errors import Fail, classify
from .events import Event, Topic, decode
from .handlers import Bound
from .retry import Stopped, Tally, after_failure, for_messages, retry_until
from .settings import Settings

log = logging.getLogger(__name__)

# A message is handled again while its failure passes (retry.py's rule for messages): a bug gets a
# few tries, what is the message's own fault goes to the dead-letter topic at once.
LIMITS = for_messages()
# At most this many messages of one key go to a handler that takes them together (Handlers.on_many).
MAX_TOGETHER = 64


class Message(Protocol):
    """A message as a runner received it: Kafka's ConsumerRecord, or the in-process bus's."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


# A topic's handler (by the topic's full name): the event type it carries, and the registry bound to
# its dependencies. A carrier topic (the parser's intake.<producer>) carries another topic's events.
Routes = Mapping[str, tuple[Topic, Bound[Any]]]
Emit = Callable[[list[Event]], Awaitable[None]]  # done once the runner has taken every event
DeadLetter = Callable[[Message, str], Awaitable[None]]


@dataclass
class Handling:
    """The handlers of one consumer group, as a runner calls them."""

    name: str  # the consumer group's, as logs and spans name it
    settings: Settings
    routes: Routes
    emit: Emit
    dead_letter: DeadLetter
    stopping: asyncio.Event

    def most(self, topic: str) -> int:
        """How many messages of one key the handler of `topic` may take at once."""
        return MAX_TOGETHER if self.routes[topic][1].takes_many else 1

    async def leading(self, records: Sequence[Message]) -> int:
        """Handle the first of `records` (one key's, in order), or as many of them as the handler takes
        together; how many are done (handled or dead-lettered), 0 if handed back."""
        topic, handler = self.routes[records[0].topic]
        try:
            head = decode(topic, records[0].value)
        except ValidationError:
            return int(await self.one(records[0]))  # dead-lettered there, with the reason
        if len(records) < 2 or not handler.together([head]):
            return int(await self.one(records[0], head))
        events = [head]
        for record in records[1:]:
            try:
                events.append(decode(topic, record.value))
            except ValidationError:
                break  # a malformed one is dead-lettered on its own, when its turn comes
        events = events[: handler.together(events)]
        if len(events) < 2:
            return int(await self.one(records[0], head))
        return await self._together(records[: len(events)], handler, events)

    async def _together(self, records: Sequence[Message], handler: Bound[Any], events: list[Event]) -> int:
        """Several events of one key in one call: retried as one message would be; past a failure that
        is not passing, each is handled on its own (so one bad message is dead-lettered alone)."""
        ids = {**_log_ids(events[0]), "chunk_id": None}  # the key's ids: one document's, one task's
        what = f"{records[0].topic}@{records[0].offset}..{records[-1].offset}"
        topic = self.routes[records[0].topic][0]
        with (
            logs.bound(**ids),
            telemetry.consumer_span(self.name, topic, records[0], ids, self.settings.group(self.name)),
        ):
            try:
                await self._attempt(what, lambda: handler.many(events))
                return len(records)
            except Stopped:
                return 0
            except Exception as exc:  # noqa: BLE001 - each is tried on its own next, and logged there
                log.warning("%s: %s failed together (%s); handling each alone", self.name, what, exc)
        for done, (record, event) in enumerate(zip(records, events, strict=True)):
            if not await self.one(record, event):
                return done
        return len(records)

    async def one(self, record: Message, event: Event | None = None) -> bool:
        """Handle one message (`event`, when decoded already); True once it is done (handled or
        dead-lettered), False if handed back."""
        topic, handler = self.routes[record.topic]
        if event is None:
            try:
                event = decode(topic, record.value)
            except ValidationError as exc:
                with telemetry.consumer_span(self.name, topic, record, {}):
                    await self.dead_letter(record, f"malformed {topic} event: {exc.errors(include_url=False)}")
                return True
        # Every log line of the handler carries these ids; its span continues the trace of the record's
        # traceparent header, and the events it publishes carry the span's.
        ids = _log_ids(event)
        with logs.bound(**ids), telemetry.consumer_span(self.name, topic, record, ids, self.settings.group(self.name)):
            try:
                await self._attempt(f"{record.topic}@{record.offset}", partial(handler, event))
            except Stopped:
                return False  # asked to stop: hand the message back
            except Exception as exc:
                await self.dead_letter(record, "".join(traceback.format_exception_only(exc)).strip())
            return True

    async def _attempt(self, what: str, handle: Callable[[], Awaitable[list[Event]]]) -> None:
        """Handle and publish what the handler returns, tried again while the failure passes; raises
        Stopped when asked to stop, and the failure once it is the message's (or an unexpected one
        persists), to be dead-lettered."""

        async def attempt() -> None:
            await self.emit(await handle())

        def decide(exc: Exception, tally: Tally) -> float | None:
            kind = classify(exc)
            step = after_failure(kind, 0, tally[kind], LIMITS, retry_after=getattr(exc, "retry_after", None))
            if isinstance(step, Fail):
                if kind is None:
                    log.exception("%s: giving up on %s", self.name, what, exc_info=exc)
                return None  # the message's own fault (an item failure the handler did not take, too): dead-letter it
            log.warning(
                "%s: %s: %s on %s (attempt %d); retrying in %.1fs",
                self.name, type(exc).__name__, exc, what, tally.total(), step.seconds,
            )  # fmt: skip
            return step.seconds

        await retry_until(attempt, decide, stop=self.stopping)


def _log_ids(event: Event) -> dict[str, str | None]:
    return {
        "task_id": event.task_id,
        "document_id": getattr(event, "document_id", None),
        "chunk_id": getattr(event, "chunk_id", None),
        "trace_id": event.trace_id,
    }
