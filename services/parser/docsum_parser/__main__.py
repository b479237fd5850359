"""The parser service: wiring only (the handler is in handlers.py)."""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.events import Topic
from docsum_shared.handlers import Handler
from docsum_shared.settings import Settings

from .handlers import Deps, handlers
from .repository import DocumentRepository


def consumers(settings: Settings, pool: asyncpg.Pool) -> Mapping[Topic, Handler]:
    return handlers.bind(Deps(DocumentRepository(pool), settings))


def main() -> None:
    run_service(lambda stop: serve("parser", stop, consumers))


if __name__ == "__main__":
    main()
