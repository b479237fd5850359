"""How a service declares its handlers: plain functions of (event, deps), registered by event type.

    handlers = Handlers[Deps]()

    @handlers.on(ChunkCreated)
    async def summarize_chunk(event: ChunkCreated, deps: Deps) -> list[Event]: ...

`handlers.handle(event, deps)` dispatches on the event's type; the consumer shell gets
`handlers.bind(deps)`, one callable per topic. A unit test calls `handle` with in-memory fakes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Generic, TypeVar

from .errors import Poison
from .events import TOPIC_OF, Event, Topic
from .states import TASK_FINAL, TASK_HELD, TaskStatus

D = TypeVar("D")
T = TypeVar("T")
Handler = Callable[[Event], Awaitable[list[Event]]]


class Handlers(Generic[D]):
    def __init__(self) -> None:
        self._by_type: dict[type[Event], Callable[[Any, D], Awaitable[list[Event]]]] = {}

    def on(self, *types: type[Event]) -> Callable[[Callable[[Any, D], Awaitable[list[Event]]]], Any]:
        def register(function: Callable[[Any, D], Awaitable[list[Event]]]) -> Any:
            for event_type in types:
                self._by_type[event_type] = function
            return function

        return register

    async def handle(self, event: Event, deps: D) -> list[Event]:
        function = self._by_type.get(type(event))
        if function is None:
            raise Poison(f"no handler for {type(event).__name__} events")
        return await function(event, deps)

    def bind(self, deps: D, *types: type[Event]) -> Mapping[Topic, Handler]:
        """The consumer shell's view: topic → handler, for `types` (default: every registered type)."""
        return {TOPIC_OF[t]: partial(self.handle, deps=deps) for t in types or tuple(self._by_type)}


def takes_work(task_status: TaskStatus) -> bool:
    """A task still takes work unless it is held (paused, or awaiting its owner's approval: resume
    re-drives it) or final."""
    return task_status not in TASK_HELD and task_status not in TASK_FINAL


def required(found: T | None, what: str) -> T:
    """The stored row an event names; an event naming nothing stored is poison (dead-lettered)."""
    if found is None:
        raise Poison(f"{what} is not registered")
    return found
