"""The parser's decisions: given a submitted document and what Postgres holds, what to store and emit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from docsum_shared.errors import Fail, Poison
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed, DocumentSubmitted, Event
from docsum_shared.levels import SizeLevel, size_level
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus, takes_work

from .extract import ExtractedText
from .limits import Limits, OcrConfig
from .parse_error import ParseError
from .settings import ParserSettings
from .worker import Job, run_job

# Turns a job into text: `run_job` in this process, or a ParseWorker running it in its worker.
Extractor = Callable[[Job], ExtractedText]

# Statuses in which the document still needs its text; anything later means the parse was stored.
NEEDS_PARSE = (DocumentStatus.PENDING, DocumentStatus.PARSING)


@dataclass(frozen=True)
class StoredDocument:
    status: DocumentStatus
    text_chars: int | None
    size_level: SizeLevel | None
    error: str | None
    task_status: TaskStatus = TaskStatus.PROCESSING
    owner: str | None = None  # the task's
    blob_sha256: str | None = None  # None: no bytes stored (a document that failed before they were)
    task_id: str | None = None


@dataclass(frozen=True)
class StoreText:
    text: str
    size_level: SizeLevel
    positions: Positions


class TextRefused(Exception):
    """The database refused the document's text: a character it cannot store got past normalization.
    str(e) names what refused it (no text of the document)."""


@dataclass(frozen=True)
class Decision:
    write: StoreText | Fail | None
    emit: list[Event]


def check_belongs(event: DocumentSubmitted, doc: StoredDocument) -> None:
    """A message naming a document of another task or owner is refused, whichever form it has."""
    other_owner = doc.owner is not None and doc.owner != event.owner
    if other_owner or (doc.task_id is not None and doc.task_id != event.task_id):
        raise Poison(f"document {event.document_id} belongs to another task or owner")


# One refusal for every stored-form message that names bytes other than its document's: the same words
# whether or not the named bytes exist, and decided before anything is looked up.
FOREIGN_BYTES = (
    "document {document_id}: blob_sha256 is not the hash of this document's stored bytes; the stored form"
    " only re-announces a document whose bytes are already stored: publish the bytes inline"
    " (content_base64) or by source_uri"
)


def check_stored_bytes(event: DocumentSubmitted, doc: StoredDocument) -> None:
    """The stored form may only name its own document's bytes. Blobs are stored once by sha256 for every
    owner, so the parser reads the row's blob and never a hash from the message; a message naming another
    hash is refused (Poison) with the same words whether or not such bytes are stored, and no bytes are
    looked up first: neither the outcome nor its timing tells anyone whether another owner has a file."""
    if event.blob_sha256 is not None and event.blob_sha256 != doc.blob_sha256:
        raise Poison(FOREIGN_BYTES.format(document_id=event.document_id))


def needs_parse(doc: StoredDocument) -> bool:
    return takes_work(doc.task_status) and doc.status in NEEDS_PARSE


def already_done(event: DocumentSubmitted, doc: StoredDocument) -> Decision:
    """Nothing to parse: paused, cancelled or finished tasks get no work (resume and retry re-drive
    them); a parse stored earlier is announced again, and nothing is stored."""
    if not takes_work(doc.task_status) or doc.status is DocumentStatus.CANCELLED:
        return Decision(None, [])
    if doc.status is DocumentStatus.FAILED:
        return Decision(None, [_failed(event)])
    text_chars = doc.text_chars or 0
    level = doc.size_level or size_level(text_chars)
    return Decision(
        None, [event.next(DocumentParsed, document_id=event.document_id, text_chars=text_chars, size_level=level)]
    )


def limits(settings: ParserSettings) -> Limits:
    return Limits(
        max_chars=settings.max_document_chars,
        max_pdf_pages=settings.max_pdf_pages,
        max_docx_unzipped_bytes=settings.max_docx_unzipped_bytes,
        max_zip_entries=settings.max_zip_entries,
        max_html_bytes=settings.max_html_bytes,
        max_ocr_pages=settings.max_ocr_pages,
    )


def job(event: DocumentSubmitted, data: bytes, settings: ParserSettings) -> Job:
    """What the worker is given to read the document's bytes (its scanned pages, one by one, after)."""
    ocr = OcrConfig(tessdata=settings.ocr_tessdata, languages=settings.ocr_languages)
    return Job(data, event.filename, event.content_type, limits(settings), event.document_id, ocr=ocr)


def reading_note(page: int, pages: int) -> str:
    """What the task's view says while page `page` (from 0) of a scanned PDF of `pages` pages is read."""
    return f"reading page {page + 1:,} of {pages:,} (OCR)"


def parse(event: DocumentSubmitted, data: bytes, settings: ParserSettings, extract: Extractor = run_job) -> Decision:
    """Extract the document's text from its bytes; a bad file, or one over a limit, fails this document only."""
    try:
        extracted = extract(job(event, data, settings))
    except ParseError as exc:
        return parse_failed(event, exc)
    return parsed(event, extracted, settings)


def parsed(event: DocumentSubmitted, extracted: ExtractedText, settings: ParserSettings) -> Decision:
    """The text read: stored, and announced with its size level."""
    chars = len(extracted.text)
    level = size_level(chars, small_max=settings.small_max_chars, medium_max=settings.medium_max_chars)
    return Decision(
        StoreText(extracted.text, level, extracted.positions),
        [event.next(DocumentParsed, document_id=event.document_id, text_chars=chars, size_level=level)],
    )


def parse_failed(event: DocumentSubmitted, exc: ParseError) -> Decision:
    """A bad file, or one over a limit, fails this document only, with what to do."""
    return Decision(Fail(str(exc)), [_failed(event)])


def text_refused(event: DocumentSubmitted, refused: TextRefused) -> Decision:
    """Text that cannot be stored fails its document, with what to do: retrying cannot change the
    text, so a retry (and, before it, the dead-letter topic) would only leave the document PENDING."""
    error = (
        f"the text extracted from {event.filename} cannot be stored: it holds a character the database"
        f" refuses ({refused}); save the file again from the program that made it (as a PDF with Unicode"
        " fonts, or as UTF-8 text) and submit it again"
    )
    return Decision(Fail(error), [_failed(event)])


def _failed(event: DocumentSubmitted) -> DocumentMerged:
    return event.next(DocumentMerged, document_id=event.document_id, outcome=DocumentOutcome.FAILED)
