"""The parser's repository in memory, with the rules of docsum_parser.repository: the text (with where its
units start) stored and the failure written only while the document still needs its parse, a text the
database would refuse refused, and another system's documents taken in whole or not at all
(tests/repositories/parser.py proves it)."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import time
from dataclasses import dataclass, field

from docsum_parser import intake
from docsum_parser.policy import NEEDS_PARSE, StoredDocument, TextRefused
from docsum_parser.settings import ParserSettings
from docsum_shared.events import DocumentSubmitted
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus
from docsum_shared.taskrate import admit_task


@dataclass
class TaskRow:
    owner: str
    status: TaskStatus = TaskStatus.PROCESSING
    title: str | None = None
    expected_documents: int | None = None  # None: a task the gateway made


@dataclass
class DocumentRow:
    task_id: str
    status: DocumentStatus = DocumentStatus.PENDING
    blob_sha256: str | None = None
    size_bytes: int | None = None
    filename: str = "a.txt"
    position: int = 0
    error: str | None = None
    text_chars: int | None = None
    size_level: SizeLevel | None = None


@dataclass
class ParserState:
    tasks: dict[str, TaskRow] = field(default_factory=dict)
    documents: dict[str, DocumentRow] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    ocr_pages: dict[tuple[str, int], str] = field(default_factory=dict)  # (document, page from 0) -> its text
    reading: dict[str, str | None] = field(default_factory=dict)  # what is being read now, per document
    positions: dict[str, Positions] = field(default_factory=dict)  # stored with the text
    task_rate: dict[str, float] = field(default_factory=dict)  # owner -> the theoretical arrival time of tasks


class FakeParserRepository:
    def __init__(self) -> None:
        self.state = ParserState()
        self.bytes_read = 0  # load_bytes calls: a test proves which bytes were never looked up
        self._lock = asyncio.Lock()  # take_in's transaction: one at a time

    # --- seeding ------------------------------------------------------------------------------------

    @classmethod
    def holding(cls, document_id: str, doc: StoredDocument, data: bytes | None = None) -> FakeParserRepository:
        """A repository holding one document as `load` would return it, with `data` as its stored bytes."""
        repo = cls()
        task_id = doc.task_id or "t"
        repo.state.tasks[task_id] = TaskRow(doc.owner or "o", doc.task_status)
        repo.state.documents[document_id] = DocumentRow(
            task_id, doc.status, doc.blob_sha256, error=doc.error, text_chars=doc.text_chars, size_level=doc.size_level
        )
        if doc.blob_sha256 is not None and data is not None:
            repo.state.blobs[doc.blob_sha256] = data
        return repo

    @property
    def documents(self) -> dict[str, DocumentRow]:
        return self.state.documents

    @property
    def texts(self) -> dict[str, str]:
        return self.state.texts

    # --- the repository -----------------------------------------------------------------------------

    async def load(self, document_id: str) -> StoredDocument | None:
        doc = self.state.documents.get(document_id)
        if doc is None:
            return None
        task = self.state.tasks[doc.task_id]
        return StoredDocument(
            status=doc.status,
            text_chars=doc.text_chars,
            size_level=doc.size_level,
            error=doc.error,
            task_status=task.status,
            owner=task.owner,
            blob_sha256=doc.blob_sha256,
            task_id=doc.task_id,
        )

    async def load_bytes(self, sha256: str) -> bytes | None:
        self.bytes_read += 1
        return self.state.blobs.get(sha256)

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        if _refused(text):
            raise TextRefused("DataError")
        doc = self.state.documents.get(document_id)
        if doc is None or doc.status not in NEEDS_PARSE:
            return
        doc.status, doc.size_level, doc.text_chars = DocumentStatus.CHUNKING, size_level, len(text)
        self.state.reading[document_id] = None
        self.state.texts[document_id] = text
        self.state.positions[document_id] = positions

    async def fail(self, document_id: str, error: str) -> None:
        doc = self.state.documents.get(document_id)
        if doc is not None and doc.status in NEEDS_PARSE:
            doc.status, doc.error = DocumentStatus.FAILED, error
            self.state.reading[document_id] = None

    async def ocr_texts(self, document_id: str) -> dict[int, str]:
        return {page: text for (doc, page), text in self.state.ocr_pages.items() if doc == document_id}

    async def reading(self, document_id: str, note: str) -> None:
        doc = self.state.documents.get(document_id)
        if doc is not None and doc.status in NEEDS_PARSE:
            self.state.reading[document_id] = note

    async def store_ocr_page(self, document_id: str, page: int, text: str) -> str:
        if _refused(text):
            raise TextRefused("DataError")
        return self.state.ocr_pages.setdefault((document_id, page), text)

    async def find_document(self, document_id: str) -> intake.ExistingDocument | None:
        return _existing(self.state, document_id)

    async def load_intake_task(self, task_id: str) -> intake.StoredTask | None:
        return _intake_task(self.state, task_id)

    async def take_in(
        self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
    ) -> None:
        async with self._lock:
            staged = copy.deepcopy(self.state)  # what a refusal (Poison, the task rate) rolls back
            _take_in(staged, event, data, error, settings)
            self.state = staged


def _refused(text: str) -> bool:
    """What PostgreSQL will not store in a text column: NUL, and what UTF-8 cannot encode (a lone surrogate)."""
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _existing(state: ParserState, document_id: str) -> intake.ExistingDocument | None:
    doc = state.documents.get(document_id)
    if doc is None:
        return None
    needs_bytes = doc.blob_sha256 is None and doc.status in NEEDS_PARSE
    return intake.ExistingDocument(doc.task_id, state.tasks[doc.task_id].owner, needs_bytes)


def _intake_task(state: ParserState, task_id: str) -> intake.StoredTask | None:
    task = state.tasks.get(task_id)
    if task is None:
        return None
    held = [d for d in state.documents.values() if d.task_id == task_id]
    return intake.StoredTask(task.owner, task.expected_documents, len(held), sum(d.size_bytes or 0 for d in held))


def _take_in(
    state: ParserState, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
) -> None:
    if event.task_id not in state.tasks:
        state.tasks[event.task_id] = TaskRow(event.owner, TaskStatus.PROCESSING, event.title, event.task_documents)
        if settings.tasks_per_minute:
            admission = admit_task(state.task_rate.get(event.owner), time.time(), settings.tasks_per_minute)
            intake.check_admission(event, admission, settings)
            state.task_rate[event.owner] = admission.tat
        if event.options is not None and event.options.previous_task is not None:
            previous = state.tasks.get(event.options.previous_task)
            intake.check_previous(event, previous.owner if previous is not None else None)
    task = _intake_task(state, event.task_id)
    existing = _existing(state, event.document_id)
    intake.check_document(event, existing)
    intake.check_task(event, task, new_document=existing is None)
    if existing is not None and not existing.needs_bytes:
        return
    assert task is not None
    if data is not None and (too_big := intake.task_bytes_error(task.total_bytes, len(data), settings)):
        data, error = None, too_big
    sha256 = hashlib.sha256(data).hexdigest() if data is not None else None
    if data is not None and sha256 is not None:
        state.blobs.setdefault(sha256, data)
    size = len(data) if data is not None else None
    status = DocumentStatus.PENDING if data is not None else DocumentStatus.FAILED
    if existing is None:
        state.documents[event.document_id] = DocumentRow(
            event.task_id, status, sha256, size, event.filename, position=task.documents, error=error
        )
        return
    doc = state.documents[event.document_id]  # reset by `docsum retry`: its bytes this time, or its failure
    doc.blob_sha256, doc.size_bytes, doc.status, doc.error = sha256, size, status, error
