"""The chunker's handler: document-parsed → chunk rows in Postgres → chunk-created (one per chunk)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from docsum_shared.errors import Poison
from docsum_shared.events import ChunkCreated, DocumentMerged, DocumentParsed, Event, TaskEvent
from docsum_shared.handlers import Handlers, required
from docsum_shared.settings import Settings
from docsum_shared.states import DocumentStatus, TaskStatus, takes_work

from .policy import ChunkRow, Fail, HoldRule, announce, cut, failed, hold_rule, should_announce_again
from .repository import ParsedDocument

log = logging.getLogger("docsum_chunker")


class Repository(Protocol):
    async def load(self, document_id: str) -> ParsedDocument | None: ...
    async def stored_chunks(self, document_id: str) -> list[ChunkRow]: ...
    async def store_chunks(
        self, document_id: str, rows: list[ChunkRow], hold: HoldRule | None = None
    ) -> str | None: ...
    async def fail(self, document_id: str, error: str) -> None: ...


@dataclass
class Deps:
    repo: Repository
    settings: Settings


handlers = Handlers[Deps]()
handle = handlers.handle


@handlers.on(DocumentParsed, emits=(ChunkCreated, TaskEvent, DocumentMerged))
async def chunk_document(event: DocumentParsed, deps: Deps) -> list[Event]:
    doc = required(await deps.repo.load(event.document_id), f"document {event.document_id} of task {event.task_id}")
    if not takes_work(doc.task_status):
        return []  # resume and retry re-drive held work
    if doc.status is DocumentStatus.CHUNKING:
        if doc.text is None:
            raise Poison(f"document {event.document_id} has no stored text")
        rows = await asyncio.to_thread(cut, event.document_id, doc.text, deps.settings)
        if isinstance(rows, Fail):
            await deps.repo.fail(event.document_id, rows.error)
            log.info("document %s failed: %s", event.document_id, rows.error)
            return [failed(event)]
        held = await deps.repo.store_chunks(event.document_id, rows, hold_rule(deps.settings))
        log.info("document %s: %d chunks", event.document_id, len(rows))
        if held is not None:  # its chunks are announced all the same: held, they wait for resume
            log.info("task %s awaits its owner's approval: %s", event.task_id, held)
            waiting = event.next(TaskEvent, status=TaskStatus.AWAITING_APPROVAL, detail={"reason": held})
            return [waiting, *announce(event, await deps.repo.stored_chunks(event.document_id))]
    elif not should_announce_again(doc.status):
        return []
    return list(announce(event, await deps.repo.stored_chunks(event.document_id)))
