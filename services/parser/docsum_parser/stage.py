"""The parser's stage of the pipeline: document-submitted in (the pipeline's own topic, and each
configured producer's intake topic), the document's plain text stored and announced."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import asyncpg

from docsum_shared.blobs import BlobStore
from docsum_shared.consumer import Background
from docsum_shared.events import Topic
from docsum_shared.handlers import Bound, Publish
from docsum_shared.kafka import intake_topics
from docsum_shared.stage import Stage

from . import logfilter
from .handlers import Deps, handlers
from .progress import READING
from .repository import DocumentRepository
from .settings import ParserSettings
from .worker import ParseWorker


def deps(settings: ParserSettings, pool: asyncpg.Pool) -> Deps:
    """The handlers' dependencies, with the parse worker started (the first document finds it ready)."""
    logfilter.redact_uris()  # serve() has configured logging by now
    worker = ParseWorker(
        timeout_s=settings.parse_timeout_s,
        memory_bytes=settings.parse_memory_bytes,
        idle_s=settings.parse_worker_idle_s,
    )
    worker.start()
    return Deps(DocumentRepository(pool, BlobStore.of(settings.blob_store)), settings, worker)


def intake_carriers(deps: Deps) -> Mapping[str, tuple[Topic, Bound[Deps]]]:
    """intake.<producer> → its messages are document-submitted events, handled knowing the producer:
    one consumer group reads them all."""
    return {
        topic: (Topic.DOCUMENT_SUBMITTED, handlers.bind(replace(deps, producer=producer))[Topic.DOCUMENT_SUBMITTED])
        for topic, producer in intake_topics(deps.settings).items()
    }


def loops(settings: ParserSettings, pool: asyncpg.Pool, deps: Deps) -> Background:
    """The reading progress's publisher: the pages the handler notes, on task-events. On an object store,
    its client is made first: botocore loads its models then (a second or more), not at the first document."""

    async def run(publish: Publish) -> None:
        if isinstance(deps.repo, DocumentRepository) and deps.repo.blobs.objects is not None:
            await deps.repo.blobs.objects.client()
        await deps.progress.run(publish)

    return run


async def close(deps: Deps) -> None:
    if isinstance(deps.extract, ParseWorker):
        deps.extract.close()
    if isinstance(deps.repo, DocumentRepository):
        await deps.repo.blobs.close()
    await deps.s3.close()


STAGE = Stage(
    "parser",
    ParserSettings,
    handlers,
    deps,
    loops=loops,
    senders=(READING,),
    close=close,
    carriers=intake_carriers,
)
