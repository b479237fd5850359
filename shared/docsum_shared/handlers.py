"""How a service declares its handlers: plain functions of (event, deps), registered by event type.

    handlers = Handlers[Deps]()

    @handlers.on(ChunkCreated, emits=(ChunkSummarized,))
    async def summarize_chunk(event: ChunkCreated, deps: Deps) -> list[Event]: ...

What it sends is declared too (`emits=`) and checked on every handling; a part of docsum that
publishes outside any handler (the gateway, the re-drives, the round scheduler) declares a `Sender`
and passes it to the `Publish` port it is given (Kafka's: `kafka.KafkaPublish`), never to a producer:
the same loop runs whichever runner hands it the port. The contract documents' topic table (who
sends, who receives, with which consumer group) is built from these declarations as the pipeline's
plan lists them (docsum_pipeline.plan, read by contracts/generate.py), never written by hand.

`handlers.handle(event, deps)` dispatches on the event's type; the consumer shell gets
`handlers.bind(deps)`, one callable per topic. A unit test calls `handle` with in-memory fakes.

A handler whose work for several events of one key costs about what it costs for one (the progress
recorder reads its task's view once for every chunk that ended meanwhile; the merger checks its
document once) is registered with `on_many`: a function of a list of events, in offset order. The
shell hands it the events that wait in one key's lane together (`Bound.many`), and one event alone as
a list of one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from .errors import Poison
from .events import TOPIC_OF, Event, Topic

D = TypeVar("D")
T = TypeVar("T")


@dataclass(frozen=True)
class Sender:
    """A part of docsum that publishes events outside any handler, and the event types it may publish."""

    who: str  # as the topic table names it: "the gateway", "the re-drives"
    emits: tuple[type[Event], ...]

    def check(self, events: Sequence[Event]) -> None:
        stray = sorted({type(e).__name__ for e in events if type(e) not in self.emits})
        if stray:
            raise TypeError(f"{self.who} published {', '.join(stray)}, which it does not declare")


class Publish(Protocol):
    """The port a background loop or a route publishes through: done once every event is acknowledged
    (by Kafka, for `kafka.KafkaPublish`). `sender`: who publishes, checked against what it declares."""

    async def __call__(self, events: Sequence[Event], *, sender: Sender) -> None: ...


class Handlers(Generic[D]):
    """The handlers of one consumer group (`group`, as the service's consumer names it; None for a
    registry of tests), and what each receives and sends. `dead_letters`: False for a reader beside
    the topics' owners (the gateway's progress recorder), which skips what it cannot take."""

    def __init__(self, group: str | None = None, who: str | None = None, *, dead_letters: bool = True) -> None:
        self.group = group
        self.who = who or f"the {group}"
        self.dead_letters = dead_letters
        self._by_type: dict[type[Event], Callable[[Any, D], Awaitable[list[Event]]]] = {}
        self._many: dict[type[Event], Callable[[list[Any], D], Awaitable[list[Event]]]] = {}
        self._emits: dict[type[Event], tuple[type[Event], ...]] = {}

    def on(
        self, *types: type[Event], emits: tuple[type[Event], ...]
    ) -> Callable[[Callable[[Any, D], Awaitable[list[Event]]]], Any]:
        """Register a function of (event, deps) for `types`; it returns only events of the `emits` types."""

        def register(function: Callable[[Any, D], Awaitable[list[Event]]]) -> Any:
            for event_type in types:
                self._by_type[event_type] = function
                self._emits[event_type] = emits
            return function

        return register

    def on_many(
        self, *types: type[Event], emits: tuple[type[Event], ...]
    ) -> Callable[[Callable[[list[Any], D], Awaitable[list[Event]]]], Any]:
        """Register a function of (events, deps) for `types`: the events of one key waiting together,
        in offset order; one event alone comes as a list of one. It returns only `emits` events."""

        def register(function: Callable[[list[Any], D], Awaitable[list[Event]]]) -> Any:
            for event_type in types:
                self._many[event_type] = function
                self._by_type[event_type] = partial(_one_of_many, function)
                self._emits[event_type] = emits
            return function

        return register

    @property
    def receives(self) -> tuple[type[Event], ...]:
        """The event types it has handlers for, in the order they were registered."""
        return tuple(self._by_type)

    def emits(self, event_type: type[Event]) -> tuple[type[Event], ...]:
        """The event types the handler of `event_type` may return (the topic table is built from these)."""
        return self._emits[event_type]

    def _checked(self, event_type: type[Event], out: list[Event]) -> list[Event]:
        # What a handler declares is what the contract documents say it sends; a handler that returns
        # anything else is a bug to find in its unit test, not on the wire.
        stray = [type(e).__name__ for e in out if type(e) not in self._emits[event_type]]
        if stray:
            raise TypeError(f"the {event_type.__name__} handler returned {', '.join(stray)}, which it does not declare")
        return out

    async def handle(self, event: Event, deps: D) -> list[Event]:
        function = self._by_type.get(type(event))
        if function is None:
            raise Poison(f"no handler for {type(event).__name__} events")
        return self._checked(type(event), await function(event, deps))

    @property
    def takes_many(self) -> bool:
        """Whether any of its handlers takes several events at once (`on_many`)."""
        return bool(self._many)

    def together(self, events: Sequence[Event]) -> int:
        """How many of the leading `events` one call of their `on_many` function takes (0 or 1: none)."""
        function = self._many.get(type(events[0])) if events else None
        if function is None:
            return 0
        return next((i for i, e in enumerate(events) if self._many.get(type(e)) is not function), len(events))

    async def handle_many(self, events: list[Event], deps: D) -> list[Event]:
        """Handle events that `together` said go together."""
        return self._checked(type(events[0]), await self._many[type(events[0])](events, deps))

    def bind(self, deps: D, *types: type[Event]) -> Mapping[Topic, Bound[D]]:
        """What a runner calls: topic → the handlers bound to `deps`, for `types` (default: every
        registered type)."""
        bound = Bound(self, deps)
        return {TOPIC_OF[t]: bound for t in types or tuple(self._by_type)}


async def _one_of_many(
    function: Callable[[list[Any], Any], Awaitable[list[Event]]], event: Event, deps: Any
) -> list[Event]:
    return await function([event], deps)


@dataclass(frozen=True)
class Bound(Generic[D]):
    """The handlers with their deps, as the consumer shell calls them: one event, or several of one key."""

    handlers: Handlers[D]
    deps: D

    async def __call__(self, event: Event) -> list[Event]:
        return await self.handlers.handle(event, self.deps)

    @property
    def takes_many(self) -> bool:
        return self.handlers.takes_many

    def together(self, events: Sequence[Event]) -> int:
        return self.handlers.together(events)

    async def many(self, events: list[Event]) -> list[Event]:
        return await self.handlers.handle_many(events, self.deps)


def required(found: T | None, what: str) -> T:
    """The stored row an event names; an event naming nothing stored is poison (dead-lettered)."""
    if found is None:
        raise Poison(f"{what} is not registered")
    return found
