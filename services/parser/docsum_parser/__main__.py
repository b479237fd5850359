"""The parser service: wiring only (the handler is in handlers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.events import Topic
from docsum_shared.handlers import Handler
from docsum_shared.settings import Settings, service_settings

from . import logfilter
from .handlers import Deps, handlers
from .repository import DocumentRepository
from .worker import ParseWorker


def consumers(settings: Settings, pool: asyncpg.Pool, worker: ParseWorker) -> Mapping[Topic, Handler]:
    logfilter.redact_uris()  # serve() has configured logging by now
    return handlers.bind(Deps(DocumentRepository(pool), settings, worker))


async def service(stop: asyncio.Event) -> None:
    settings = service_settings("parser")
    worker = ParseWorker(
        timeout_s=settings.parse_timeout_s,
        memory_bytes=settings.parse_memory_bytes,
        idle_s=settings.parse_worker_idle_s,
    )  # started by the first document
    try:
        await serve("parser", stop, lambda settings, pool: consumers(settings, pool, worker))
    finally:
        worker.close()


def main() -> None:
    run_service(service)


if __name__ == "__main__":
    main()
