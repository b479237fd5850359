"""The parser's handler: document-submitted → plain text in Postgres → document-parsed."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from docsum_shared.events import DocumentSubmitted, Event
from docsum_shared.handlers import Handlers, required
from docsum_shared.levels import SizeLevel
from docsum_shared.settings import Settings

from .policy import Extractor, Fail, StoredDocument, StoreText, already_done, needs_parse, parse
from .worker import run_job

log = logging.getLogger("docsum_parser")


class Repository(Protocol):
    async def load(self, document_id: str) -> StoredDocument | None: ...
    async def load_bytes(self, sha256: str) -> bytes | None: ...
    async def store_text(self, document_id: str, text: str, size_level: SizeLevel) -> None: ...
    async def fail(self, document_id: str, error: str) -> None: ...


@dataclass
class Deps:
    repo: Repository
    settings: Settings
    extract: Extractor = run_job  # the service gives a ParseWorker: time and memory limits, own process


handlers = Handlers[Deps]()
handle = handlers.handle


@handlers.on(DocumentSubmitted)
async def parse_document(event: DocumentSubmitted, deps: Deps) -> list[Event]:
    doc = required(await deps.repo.load(event.document_id), f"document {event.document_id} of task {event.task_id}")
    if not needs_parse(doc):
        return already_done(event, doc).emit
    data = required(await deps.repo.load_bytes(event.blob_sha256), f"the stored bytes with sha256 {event.blob_sha256}")
    # Parsing is CPU-bound (or waits for the worker): keep the event loop (and the consumer's heartbeat)
    # responsive.
    decision = await asyncio.to_thread(parse, event, data, deps.settings, deps.extract)
    del data  # not held while the text is stored
    if isinstance(decision.write, StoreText):
        await deps.repo.store_text(event.document_id, decision.write.text, decision.write.size_level)
        log.info("parsed document %s (%s): %d chars", event.document_id, event.filename, len(decision.write.text))
    elif isinstance(decision.write, Fail):
        await deps.repo.fail(event.document_id, decision.write.error)
        log.info("document %s (%s) failed: %s", event.document_id, event.filename, decision.write.error)
    return decision.emit
