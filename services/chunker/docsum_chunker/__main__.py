"""The chunker service: document-parsed → chunk rows in Postgres → chunk-created (one per chunk)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.errors import PermanentError
from docsum_shared.events import DocumentParsed, Event, Topic
from docsum_shared.settings import Settings
from docsum_shared.states import TASK_FINAL, DocumentStatus, TaskStatus

from . import repository
from .handler import announce, cut, should_announce_again

log = logging.getLogger("docsum_chunker")


def build_handlers(settings: Settings, pool: asyncpg.Pool):
    async def on_parsed(event: Event) -> list[Event]:
        assert isinstance(event, DocumentParsed)
        doc = await repository.load(pool, event.document_id)
        if doc is None:
            raise PermanentError(f"document {event.document_id} of task {event.task_id} is not registered")
        if doc.task_status is TaskStatus.PAUSED or doc.task_status in TASK_FINAL:
            return []  # resume and retry re-drive held work
        if doc.status is DocumentStatus.CHUNKING:
            if doc.text is None:
                raise PermanentError(f"document {event.document_id} has no stored text")
            rows = await asyncio.to_thread(cut, event.document_id, doc.text, settings)
            await repository.store_chunks(pool, event.document_id, rows)
            log.info("document %s: %d chunks", event.document_id, len(rows))
        elif not should_announce_again(doc.status):
            return []
        return list(announce(event, await repository.stored_chunks(pool, event.document_id)))

    return {Topic.DOCUMENT_PARSED: on_parsed}


def main() -> None:
    run_service(lambda stop: serve("chunker", stop, build_handlers))


if __name__ == "__main__":
    main()
