"""The parser's decision: given a submitted document and what Postgres holds, what to store and emit."""

from __future__ import annotations

from dataclasses import dataclass

from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed, DocumentSubmitted, Event
from docsum_shared.levels import size_level
from docsum_shared.settings import Settings
from docsum_shared.states import TASK_FINAL, DocumentStatus, TaskStatus

from .extract import ParseError, extract_text

# Statuses in which the document still needs its text; anything later means the parse was stored.
NEEDS_PARSE = (DocumentStatus.PENDING, DocumentStatus.PARSING)


@dataclass(frozen=True)
class StoredDocument:
    status: DocumentStatus
    text_chars: int | None
    size_level: str | None
    error: str | None
    task_status: TaskStatus = TaskStatus.PROCESSING


@dataclass(frozen=True)
class StoreText:
    text: str
    size_level: str


@dataclass(frozen=True)
class Fail:
    error: str


@dataclass(frozen=True)
class Decision:
    write: StoreText | Fail | None
    emit: list[Event]


def task_holds_work(doc: StoredDocument) -> bool:
    """Paused, cancelled or finished tasks get no more work; resume and retry re-drive them."""
    return doc.task_status is TaskStatus.PAUSED or doc.task_status in TASK_FINAL


def already_done(event: DocumentSubmitted, doc: StoredDocument) -> Decision:
    """The document's parse was stored earlier: emit again what followed it, store nothing."""
    if doc.status is DocumentStatus.FAILED:
        return Decision(None, [_failed(event)])
    if doc.status is DocumentStatus.CANCELLED:
        return Decision(None, [])
    return Decision(
        None,
        [
            DocumentParsed(
                task_id=event.task_id,
                document_id=event.document_id,
                text_chars=doc.text_chars or 0,
                size_level=doc.size_level or "",
            )
        ],
    )


def parse(event: DocumentSubmitted, data: bytes, settings: Settings) -> Decision:
    """Extract the document's text from its bytes; a bad file fails this document only."""
    try:
        extracted = extract_text(data, event.filename, event.content_type)
    except ParseError as exc:
        return Decision(Fail(str(exc)), [_failed(event)])
    level = size_level(len(extracted.text), small_max=settings.small_max_chars, medium_max=settings.medium_max_chars)
    return Decision(
        StoreText(extracted.text, level),
        [
            DocumentParsed(
                task_id=event.task_id, document_id=event.document_id, text_chars=len(extracted.text), size_level=level
            )
        ],
    )


def _failed(event: DocumentSubmitted) -> DocumentMerged:
    return DocumentMerged(task_id=event.task_id, document_id=event.document_id, outcome=DocumentOutcome.FAILED)
