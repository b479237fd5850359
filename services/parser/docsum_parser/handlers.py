"""The parser's handler: document-submitted → plain text in Postgres → document-parsed."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from docsum_shared.blobs import S3Connection
from docsum_shared.errors import Fail, ItemFailed
from docsum_shared.events import DocumentMerged, DocumentParsed, DocumentSubmitted, Event
from docsum_shared.handlers import Handlers, required
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions

from . import intake, policy, sources
from .extract import ExtractedText
from .parse_error import ParseError
from .policy import (
    Decision,
    Extractor,
    StoredDocument,
    StoreText,
    TextRefused,
    already_done,
    check_belongs,
    check_stored_bytes,
    needs_parse,
    parse_failed,
    parsed,
    text_refused,
)
from .progress import ReadingProgress
from .settings import ParserSettings
from .worker import Job, run_job

log = logging.getLogger("docsum_parser")


class Repository(Protocol):
    async def load(self, document_id: str) -> StoredDocument | None: ...
    async def load_bytes(self, sha256: str) -> bytes | None: ...
    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None: ...
    async def fail(self, document_id: str, error: str) -> None: ...
    async def ocr_texts(self, document_id: str) -> dict[int, str]: ...
    async def reading(self, document_id: str, note: str) -> None: ...
    async def store_ocr_page(self, document_id: str, page: int, text: str) -> str: ...
    async def find_document(self, document_id: str) -> intake.ExistingDocument | None: ...
    async def load_intake_task(self, task_id: str) -> intake.StoredTask | None: ...
    async def take_in(
        self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
    ) -> None: ...


@dataclass
class Deps:
    repo: Repository
    settings: ParserSettings
    extract: Extractor = run_job  # the service gives a ParseWorker: time and memory limits, own process
    # The producer whose intake topic the message came on (intake.<producer>); None: document-submitted,
    # the pipeline's own topic.
    producer: str | None = None
    # The pages being read, for the progress stream (the stage's loop publishes them).
    progress: ReadingProgress = field(default_factory=ReadingProgress)
    s3: S3Connection = field(default_factory=S3Connection)  # what s3:// URIs are read through


handlers = Handlers[Deps]("parser")
handle = handlers.handle


@handlers.on(DocumentSubmitted, emits=(DocumentParsed, DocumentMerged))
async def parse_document(event: DocumentSubmitted, deps: Deps) -> list[Event]:
    intake.check_source(event, deps.producer, deps.settings)
    if deps.producer is not None:  # another system's document, inline or by URI: the rows may not exist yet
        await take_in(event, deps)
    doc = required(await deps.repo.load(event.document_id), f"document {event.document_id} of task {event.task_id}")
    check_belongs(event, doc)
    check_stored_bytes(event, doc)
    if not needs_parse(doc):
        return already_done(event, doc).emit
    # Only ever the row's own bytes: a hash in the message could name another owner's.
    sha256 = doc.blob_sha256
    data = required(await deps.repo.load_bytes(sha256) if sha256 else None, f"the stored bytes of {event.document_id}")
    try:
        decision = await read(event, data, deps)
    except TextRefused as refused:  # an OCR'd page's text
        decision = text_refused(event, refused)
    del data  # not held while the text is stored
    if isinstance(stored := decision.write, StoreText):
        try:
            await deps.repo.store_text(event.document_id, stored.text, stored.size_level, stored.positions)
        except TextRefused as refused:
            decision = text_refused(event, refused)
        else:
            log.info("parsed document %s (%s): %d chars", event.document_id, event.filename, len(stored.text))
    if isinstance(decision.write, Fail):
        await deps.repo.fail(event.document_id, decision.write.error)
        log.info("document %s (%s) failed: %s", event.document_id, event.filename, decision.write.error)
    return decision.emit


async def read(event: DocumentSubmitted, data: bytes, deps: Deps) -> Decision:
    """The document's text, or why there is none. A PDF's scanned pages are read by OCR one at a time
    first, each stored as soon as it is read: a parser killed midway resumes at the next page, and no page
    stored is read again."""
    job = policy.job(event, data, deps.settings)
    try:
        # Parsing is CPU-bound (or waits for the worker): keep the event loop (and the consumer's heartbeat)
        # responsive.
        extracted = await asyncio.to_thread(deps.extract, job)
        if extracted.scanned:
            texts = await read_scanned(event, job, extracted, deps)
            extracted = await asyncio.to_thread(deps.extract, replace(job, ocr_texts=texts))
    except ParseError as exc:
        return parse_failed(event, exc)
    return parsed(event, extracted, deps.settings)


async def read_scanned(event: DocumentSubmitted, job: Job, extracted: ExtractedText, deps: Deps) -> dict[int, str]:
    """The OCR'd text of every scanned page: those stored before, then each other one read and stored."""
    texts = await deps.repo.ocr_texts(event.document_id)
    pages = extracted.pages or 0
    for page in extracted.scanned:
        if page in texts:
            continue
        note = policy.reading_note(page, pages)
        await deps.repo.reading(event.document_id, note)
        deps.progress.note(event.task_id, event.document_id, note)
        read_page = await asyncio.to_thread(deps.extract, replace(job, ocr_page=page))
        texts[page] = await deps.repo.store_ocr_page(event.document_id, page, read_page.text)
        log.info("document %s (%s): page %d of %d read by OCR", event.document_id, event.filename, page + 1, pages)
    return texts


async def take_in(event: DocumentSubmitted, deps: Deps) -> None:
    """Register another system's document: refuse what does not add up (Poison), take its bytes (or
    the reason there are none) and store the task and document rows. A replay finds the document and
    takes nothing: no row, no fetch."""
    intake.check_message(event, deps.settings)
    existing = await deps.repo.find_document(event.document_id)
    intake.check_document(event, existing)
    if existing is not None and not existing.needs_bytes:
        return
    task = await deps.repo.load_intake_task(event.task_id)
    intake.check_task(event, task, new_document=existing is None)
    if task is None:
        intake.check_deadline(event, datetime.now(UTC))
    data: bytes | None = None
    error: str | None = None
    try:
        data = await sources.content(event, deps.settings, deps.s3)  # no lock held while fetching
    except ItemFailed as exc:
        error = str(exc)
    await deps.repo.take_in(event, data, error, deps.settings)
    if error is None:
        log.info("document %s of task %s taken in: %d bytes", event.document_id, event.task_id, len(data or b""))
    else:
        log.info("document %s of task %s failed: %s", event.document_id, event.task_id, error)
