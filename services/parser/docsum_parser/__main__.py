"""The parser service: document-submitted → plain text in Postgres → document-parsed."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from docsum_shared.consumer import run_service, serve
from docsum_shared.errors import PermanentError
from docsum_shared.events import DocumentSubmitted, Event, Topic
from docsum_shared.settings import Settings

from . import repository
from .handler import NEEDS_PARSE, Fail, StoreText, already_done, parse, task_holds_work

log = logging.getLogger("docsum_parser")


def build_handlers(settings: Settings, pool: asyncpg.Pool):
    async def on_submitted(event: Event) -> list[Event]:
        assert isinstance(event, DocumentSubmitted)
        doc = await repository.load(pool, event.document_id)
        if doc is None:
            raise PermanentError(f"document {event.document_id} of task {event.task_id} is not registered")
        if task_holds_work(doc):
            return []
        if doc.status not in NEEDS_PARSE:
            return already_done(event, doc).emit
        data = await repository.load_bytes(pool, event.blob_sha256)
        if data is None:
            raise PermanentError(f"no stored bytes with sha256 {event.blob_sha256}")
        # Parsing is CPU-bound: keep the event loop (and the consumer's heartbeat) responsive.
        decision = await asyncio.to_thread(parse, event, data, settings)
        if isinstance(decision.write, StoreText):
            await repository.store_text(pool, event.document_id, decision.write.text, decision.write.size_level)
            log.info("parsed document %s (%s): %d chars", event.document_id, event.filename, len(decision.write.text))
        elif isinstance(decision.write, Fail):
            await repository.fail(pool, event.document_id, decision.write.error)
            log.info("document %s (%s) failed: %s", event.document_id, event.filename, decision.write.error)
        return decision.emit

    return {Topic.DOCUMENT_SUBMITTED: on_submitted}


def main() -> None:
    run_service(lambda stop: serve("parser", stop, build_handlers))


if __name__ == "__main__":
    main()
