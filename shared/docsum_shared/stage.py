"""One stage of the pipeline, as its service declares it in its `stage` module (the plan, docsum_pipeline,
lists them): what it consumes (its
handlers' registry, which says what each handler sends), how its dependencies are built, the loops
that run beside its consumer, and what it publishes outside its handlers (its `Sender`s).

A runner serves it: `serve_stage` (one stage per process on Kafka, as in production) builds the
dependencies from the service's settings and pool, binds the handlers to them, and starts the loops
with the `Publish` port they publish through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import asyncpg

from .consumer import Background, Consumer, serve
from .events import Topic
from .handlers import Bound, Handlers, Publish, Sender
from .settings import Settings

S = TypeVar("S", bound=Settings)
D = TypeVar("D")


# How a stage's front (the gateway's application) reaches the rest of the pipeline: given its settings
# and pool, an async context that runs the stage's own consumer meanwhile and yields the port it
# publishes through. Kafka's is the gateway's own (app.on_kafka); the in-process runner's, its bus
# (docsum_pipeline.inprocess).
Attach = Callable[[Any, asyncpg.Pool], AbstractAsyncContextManager[Publish]]


def _no_bound(settings: Any) -> int | None:
    return None  # the consumer shell's default (DOCSUM_MAX_INFLIGHT)


@dataclass(frozen=True)
class Stage(Generic[S, D]):
    """A stage of the pipeline: its service's name (its consumer group, unless its registry names
    another), settings class, handlers, dependencies, loops and senders."""

    name: str
    settings: type[S]
    handlers: Handlers[D]
    deps: Callable[[S, asyncpg.Pool], D]  # what its handlers are called with
    # What runs beside its consumer (given the port it publishes through), built from its dependencies.
    loops: Callable[[S, asyncpg.Pool, D], Background] | None = None
    senders: tuple[Sender, ...] = ()  # what its loops (and the gateway's routes) publish
    max_inflight: Callable[[S], int | None] = _no_bound
    close: Callable[[D], Awaitable[None]] | None = None  # what its dependencies hold open
    # Topics (full names) whose messages are events of another topic, with handlers of their own.
    carriers: Callable[[D], Mapping[str, tuple[Topic, Bound[D]]]] | None = None

    def consumer(self, settings: S, pool: asyncpg.Pool) -> Consumer:
        """The stage wired: its dependencies built, its handlers bound to them, its loops beside."""
        deps = self.deps(settings, pool)
        close = self.close
        return Consumer(
            self.handlers.bind(deps),
            max_inflight=self.max_inflight(settings),
            carriers=self.carriers(deps) if self.carriers is not None else {},
            close=(lambda: close(deps)) if close is not None else None,
            background=self.loops(settings, pool, deps) if self.loops is not None else None,
        )


async def serve_stage(stage: Stage[Any, Any], stop: asyncio.Event) -> None:
    """Serve `stage` on Kafka until `stop` is set (consumer.serve: the pool, migrations, health)."""
    await serve(stage.name, stop, stage.settings, lambda settings, pool: [stage.consumer(settings, pool)])
