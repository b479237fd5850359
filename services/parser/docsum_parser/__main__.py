"""The parser service: wiring only (the handler is in handlers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

import asyncpg

from docsum_shared.consumer import Consumer, run_service, serve
from docsum_shared.events import Topic
from docsum_shared.handlers import Handler
from docsum_shared.kafka import intake_topics
from docsum_shared.settings import service_settings

from . import logfilter
from .handlers import Deps, handlers
from .repository import DocumentRepository
from .settings import ParserSettings
from .worker import ParseWorker


def consumers(settings: ParserSettings, pool: asyncpg.Pool, worker: ParseWorker) -> list[Consumer]:
    """document-submitted (the pipeline's own), and each configured producer's intake topic with a
    handler that knows the producer: one consumer group reads them all."""
    logfilter.redact_uris()  # serve() has configured logging by now
    deps = Deps(DocumentRepository(pool), settings, worker)
    return [Consumer(handlers.bind(deps), carriers=intake_carriers(deps))]


def intake_carriers(deps: Deps) -> Mapping[str, tuple[Topic, Handler]]:
    """intake.<producer> → its messages are document-submitted events, handled knowing the producer."""
    return {
        topic: (Topic.DOCUMENT_SUBMITTED, handlers.bind(replace(deps, producer=producer))[Topic.DOCUMENT_SUBMITTED])
        for topic, producer in intake_topics(deps.settings).items()
    }


async def service(stop: asyncio.Event) -> None:
    settings = service_settings("parser", ParserSettings)
    worker = ParseWorker(
        timeout_s=settings.parse_timeout_s,
        memory_bytes=settings.parse_memory_bytes,
        idle_s=settings.parse_worker_idle_s,
    )
    worker.start()  # while the service connects: the first document finds it ready
    try:
        await serve("parser", stop, ParserSettings, lambda settings, pool: consumers(settings, pool, worker))
    finally:
        worker.close()


def main() -> None:
    run_service(service)


if __name__ == "__main__":
    main()
