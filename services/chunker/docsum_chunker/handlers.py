"""The chunker's handler: document-parsed → chunk rows in Postgres, waiting there for their slot in the fair
order between owners: the summarizer's admission (docsum_summarizer/admission.py) announces each on
chunk-created when it admits it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from docsum_shared.approval import Hold
from docsum_shared.errors import Fail, Poison
from docsum_shared.events import DocumentMerged, DocumentParsed, Event, TaskEvent
from docsum_shared.handlers import Handlers, required
from docsum_shared.states import DocumentStatus, TaskStatus, takes_work

from .policy import ChunkRef, CutChunk, HoldRule, cut, failed, hold_rule
from .repository import LockedTask, ParsedDocument, TaskCuts
from .settings import ChunkerSettings

log = logging.getLogger("docsum_chunker")


class Transaction(Protocol):
    """What the chunker reads and writes under its task's row lock."""

    @property
    def task(self) -> LockedTask | None: ...
    async def store_chunks(self, rows: Sequence[CutChunk], *, trace_id: str | None = None) -> bool: ...
    async def cuts(self) -> TaskCuts: ...
    async def hold(self, waits: Hold) -> bool: ...


class Repository(Protocol):
    async def load(self, document_id: str) -> ParsedDocument | None: ...
    async def stored_chunks(self, document_id: str) -> list[ChunkRef]: ...
    def locked(self, document_id: str, *, task: bool = True) -> AbstractAsyncContextManager[Transaction]: ...
    async def fail(self, document_id: str, error: str) -> None: ...


@dataclass
class Deps:
    repo: Repository
    settings: ChunkerSettings


handlers = Handlers[Deps]("chunker")
handle = handlers.handle


@handlers.on(DocumentParsed, emits=(TaskEvent, DocumentMerged))
async def chunk_document(event: DocumentParsed, deps: Deps) -> list[Event]:
    doc = required(await deps.repo.load(event.document_id), f"document {event.document_id} of task {event.task_id}")
    if not takes_work(doc.task_status):
        return []  # resume and retry re-drive held work
    if doc.status is DocumentStatus.CHUNKING:
        if doc.text is None:
            raise Poison(f"document {event.document_id} has no stored text")
        rows = await asyncio.to_thread(cut, event.document_id, doc.text, deps.settings, doc.previous)
        if isinstance(rows, Fail):
            await deps.repo.fail(event.document_id, rows.error)
            log.info("document %s failed: %s", event.document_id, rows.error)
            return [failed(event)]
        held = await store_chunks(deps.repo, event.document_id, rows, hold_rule(deps.settings), event.trace_id)
        log.info("document %s: %d chunks", event.document_id, len(rows))
        if held is not None:  # its chunks wait unadmitted until resume
            log.info("task %s awaits its owner's approval: %s", event.task_id, held)
            return [event.next(TaskEvent, status=TaskStatus.AWAITING_APPROVAL, detail={"reason": held})]
    # Stored chunks (cut now, or before a crash) are the admission's to announce: nothing to send.
    return []


async def store_chunks(
    repo: Repository, document_id: str, rows: list[CutChunk], rule: HoldRule | None, trace_id: str | None = None
) -> str | None:
    """Store the document's chunks; with `rule`, the task's plan (every document cut so far) is checked
    against its owner's ceiling and the plan approved before, under the task's row lock, and a task over
    both is held AWAITING_APPROVAL with the plan it asks for: returns why (None: not held). Without a
    rule, no lock: the task's documents are stored at once."""
    async with repo.locked(document_id, task=rule is not None) as tx:
        if not await tx.store_chunks(rows, trace_id=trace_id) or rule is None or tx.task is None:
            return None
        cuts = await tx.cuts()
        waits = rule(tx.task.owner, list(cuts.chunk_counts), cuts.prompt_tokens, tx.task.approved)
        if waits is None or not await tx.hold(waits):
            return None
        return waits.reason
