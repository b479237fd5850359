"""The chunker service: wiring only (the handler is in handlers.py)."""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.events import Topic
from docsum_shared.handlers import Handler

from .handlers import Deps, handlers
from .repository import ChunkRepository
from .settings import ChunkerSettings


def consumers(settings: ChunkerSettings, pool: asyncpg.Pool) -> Mapping[Topic, Handler]:
    return handlers.bind(Deps(ChunkRepository(pool), settings))


def main() -> None:
    run_service(lambda stop: serve("chunker", stop, ChunkerSettings, consumers))


if __name__ == "__main__":
    main()
