"""The event contract: one frozen pydantic model per topic, all sharing one envelope.

Events carry intents and ids, never document bytes or texts: Postgres holds the state (task-finished,
the pipeline's output to other systems, carries the summaries). New fields are
optional so that older consumers and external publishers keep working; `schema_version` is raised
only for a change that old consumers cannot read. The JSON Schema of every topic is generated from
these models into contracts/ (`make contracts`, see contracts.py).
"""

from __future__ import annotations

import uuid
import zlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from .levels import SizeLevel
from .options import TaskOptions
from .readmodel.schemas import TaskResult
from .states import TaskStatus

E = TypeVar("E", bound="Event")


def _now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    # The field whose value is the Kafka message key (see `key`); published in the schema as x-kafka-key.
    KEY_FIELD: ClassVar[str] = "task_id"

    event_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description="Unique id of this event; the causation_id of the events it causes.",
    )
    schema_version: int = Field(
        default=1, description="Raised only for a change that consumers of the previous version cannot read."
    )
    occurred_at: datetime = Field(default_factory=_now, description="When the event was created (UTC).")
    trace_id: str | None = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description=(
            "Copied from each event to the events it causes, so that one id follows a submission through"
            " the pipeline; a root event (a submission, a re-drive) starts a new one."
        ),
    )
    causation_id: str | None = Field(
        default=None,
        description="The event_id of the event that caused this one; null for a root event.",
    )
    task_id: str = Field(description="The task (one submission of one or more documents) the event belongs to.")

    def next(self, model: type[E], **fields: Any) -> E:
        """An event caused by this one: the same trace and (unless given) the same task."""
        fields.setdefault("task_id", self.task_id)
        return model(trace_id=self.trace_id or self.event_id, causation_id=self.event_id, **fields)

    def key(self) -> str:
        """The partition key: decides ordering and which consumer owns the event."""
        return str(getattr(self, self.KEY_FIELD))

    def spread(self) -> int | None:
        """Where the event goes among its topic's partitions, if not where its key hashes to: a number that
        `kafka.publish` takes modulo the partition count (None: the key decides, as Kafka's default does)."""
        return None

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()


# Ids and owners of documents published by other systems (the gateway's own are uuids): what a
# producer may use, and what the parser refuses (dead-letters) otherwise.
ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"
_FOREIGN_IDS = {name: {"type": "string", "pattern": ID_PATTERN} for name in ("task_id", "document_id", "owner")}
_ABSENT = {"type": "null"}  # a field of another form: left out, or null
# The three forms of a submission, as the published schema states them (`oneOf`).
_SUBMISSION_FORMS: list[Any] = [
    {
        "title": "stored",
        "description": (
            "The bytes are already stored in PostgreSQL: what the gateway and re-drives publish, on"
            " document-submitted (the only form that topic takes)."
        ),
        "required": ["blob_sha256", "size_bytes"],
        "properties": {
            "blob_sha256": {"type": "string"},
            "size_bytes": {"type": "integer"},
            "content_base64": _ABSENT,
            "source_uri": _ABSENT,
        },
    },
    {
        "title": "inline",
        "description": "Another system's document, its bytes in the message (base64), on intake.<producer>.",
        "required": ["task_documents", "content_base64"],
        "properties": {
            **_FOREIGN_IDS,
            "task_documents": {"type": "integer"},
            "content_base64": {"type": "string"},
            "blob_sha256": _ABSENT,
            "source_uri": _ABSENT,
        },
    },
    {
        "title": "by URI",
        "description": (
            "Another system's document, fetched by the parser from a file://, http(s):// or s3:// URI, on"
            " intake.<producer>."
        ),
        "required": ["task_documents", "source_uri"],
        "properties": {
            **_FOREIGN_IDS,
            "task_documents": {"type": "integer"},
            "source_uri": {"type": "string"},
            "blob_sha256": _ABSENT,
            "content_base64": _ABSENT,
        },
    },
]
# Decoding with this context accepts a submission in none or several of the forms: the parser then
# fails that document with a message its submitter sees, instead of dead-lettering it unseen.
LENIENT_FORMS = {"submission_forms": "lenient"}


class DocumentSubmitted(Event):
    """A document to summarize. Three forms (exactly one per message):

    - stored: its bytes are stored by sha256 in the blobs table and the task and document rows exist
      (the gateway and the re-drives publish this form, on document-submitted: the only form it takes);
    - inline: another system publishes the bytes in `content_base64`;
    - by URI: another system names them by `source_uri` (file:// under the owner's roots, http(s):// to
      the owner's hosts, s3:// in the owner's buckets).

    Another system publishes the inline and URI forms on its own topic, intake.<producer>, for the owners
    it may act for. The task is created on first sight, from `owner`, `title`, `options` and
    `task_documents`, and finishes once that many documents of it are final. Publishing the same
    message again changes nothing.
    """

    model_config = ConfigDict(json_schema_extra={"oneOf": _SUBMISSION_FORMS})

    document_id: str = Field(
        description=(
            "The document's id, also the message key. Another system's ids (and owner) are 1-64 characters"
            " of A-Z a-z 0-9 . _ : - and unique: the same id under another task or owner is refused."
        )
    )
    owner: str = Field(description="Who the task belongs to; every message of one task names the same owner.")
    filename: str = Field(description="The document's name, as summaries and the API show it (at most 255 characters).")
    content_type: str | None = Field(
        default=None,
        description="The MIME type (application/pdf, text/plain...): a last resort, after the bytes and the extension.",
    )
    blob_sha256: str | None = Field(
        default=None,
        description="Stored form: the sha256 (hex) under which the document's bytes are stored in PostgreSQL.",
    )
    size_bytes: int | None = Field(default=None, ge=0, description="Stored form: the size of the stored bytes.")
    task_documents: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Inline and URI forms: how many documents the task has, the same number in each of its messages;"
            " the task finishes when that many are final, in whatever order they arrive."
        ),
    )
    content_base64: str | None = Field(
        default=None,
        description=(
            "Inline form: the document's bytes, base64 (RFC 4648). At most DOCSUM_INTAKE_INLINE_MAX_BYTES"
            " decoded bytes (700 KiB by default, so that the message fits the broker's default 1 MiB)."
        ),
    )
    source_uri: str | None = Field(
        default=None,
        description=(
            "URI form: where the parser fetches the bytes: file:///path under DOCSUM_INTAKE_FILE_ROOTS, or"
            " http(s)://host/... for a host in DOCSUM_INTAKE_HTTP_HOSTS (no redirect to another origin), or"
            " s3://bucket/key under a bucket and prefix in DOCSUM_INTAKE_S3_PLACES; at most DOCSUM_MAX_FILE_BYTES."
        ),
    )
    title: str | None = Field(
        default=None,
        max_length=500,
        description="Inline and URI forms: the task's title, taken from the first message of the task.",
    )
    options: TaskOptions | None = Field(
        default=None,
        description="Inline and URI forms: how the task's summaries are written, taken from the first message.",
    )
    document_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description=(
            "Inline and URI forms: what stays the same across the versions of this document (its path in your"
            " system, say): with options.previous_task, the document is compared with the previous task's"
            " document of the same key (else of the same filename)."
        ),
    )

    KEY_FIELD = "document_id"

    @property
    def form(self) -> str | None:
        """ "stored", "inline" or "uri": the form this message is in; None if it is in none or several."""
        given = [
            name
            for name, present in (
                ("stored", self.blob_sha256 is not None or self.size_bytes is not None),
                ("inline", self.content_base64 is not None),
                ("uri", self.source_uri is not None),
            )
            if present
        ]
        return given[0] if len(given) == 1 else None

    @model_validator(mode="after")
    def _one_form(self, info: ValidationInfo) -> DocumentSubmitted:
        if info.context == LENIENT_FORMS:
            return self
        form = self.form
        if form is None:
            raise ValueError(
                "give exactly one of: blob_sha256 with size_bytes (stored), content_base64 (inline), source_uri"
            )
        if form == "stored" and (self.blob_sha256 is None or self.size_bytes is None):
            raise ValueError("the stored form needs both blob_sha256 and size_bytes")
        if form != "stored" and self.task_documents is None:
            raise ValueError("the inline and URI forms need task_documents (how many documents the task has)")
        return self


class DocumentParsed(Event):
    """The document's plain text is stored; its size level is known."""

    document_id: str
    text_chars: int = Field(ge=0, description="Length of the stored plain text, in characters.")
    size_level: SizeLevel

    KEY_FIELD = "document_id"


class ChunkCreated(Event):
    """One chunk row exists (every chunk of the document is stored before the first is announced)."""

    document_id: str
    chunk_id: str
    chunk_index: int = Field(ge=0, description="The chunk's position in its document, from 0.")

    KEY_FIELD = "chunk_id"

    def spread(self) -> int:
        """A document's chunks go round the partitions in turn from one its id picks, so each member of the
        summarizer group gets an even share of a long document (by the chunk ids' hash, the 163 chunks of
        one document fell 83/78 or 78/85 over two members). A chunk always goes to the same partition."""
        return zlib.crc32(self.document_id.encode()) + self.chunk_index


class ChunkSummarized(Event):
    """The chunk reached a final state (its summary stored, or FAILED)."""

    document_id: str
    chunk_id: str
    chunk_index: int = Field(ge=0, description="The chunk's position in its document, from 0.")

    KEY_FIELD = "document_id"


class DocumentOutcome(StrEnum):
    """How a document ended."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class DocumentMerged(Event):
    """The document is finished: its summary stored, or FAILED with its error stored."""

    document_id: str
    outcome: DocumentOutcome


class TaskEvent(Event):
    """Task lifecycle that has no pipeline topic of its own (finished, paused, expired...)."""

    status: TaskStatus = Field(description="The task's status after the change this event reports.")
    detail: dict[str, Any] = Field(default_factory=dict)


class TaskFinished(Event, TaskResult):
    """A task reached a final status: its result, the JSON `docsum summarize --json` prints.

    Published once per final status; a replay or a re-drive may publish it again, identical (its
    envelope is derived from the task: no new event id, time or trace)."""

    @classmethod
    def from_result(cls, result: TaskResult) -> TaskFinished:
        return cls(
            **result.model_dump(),
            event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"docsum:task-finished:{result.task_id}:{result.status}").hex,
            occurred_at=result.updated_at,
            trace_id=None,
        )


class Topic(StrEnum):
    DOCUMENT_SUBMITTED = "document-submitted"
    DOCUMENT_PARSED = "document-parsed"
    CHUNK_CREATED = "chunk-created"
    CHUNK_SUMMARIZED = "chunk-summarized"
    DOCUMENT_MERGED = "document-merged"
    TASK_EVENTS = "task-events"
    TASK_FINISHED = "task-finished"


# The topic each producer of another system publishes its documents on (its DocumentSubmitted events,
# inline or by URI), one per producer so that the broker's ACLs tell the parser who published a message.
INTAKE_TOPIC = "intake.{producer}"


def intake_topic(producer: str) -> str:
    """The topic `producer` publishes on (before the deployment's DOCSUM_TOPIC_PREFIX)."""
    return INTAKE_TOPIC.format(producer=producer)


EVENT_TYPES: dict[Topic, type[Event]] = {
    Topic.DOCUMENT_SUBMITTED: DocumentSubmitted,
    Topic.DOCUMENT_PARSED: DocumentParsed,
    Topic.CHUNK_CREATED: ChunkCreated,
    Topic.CHUNK_SUMMARIZED: ChunkSummarized,
    Topic.DOCUMENT_MERGED: DocumentMerged,
    Topic.TASK_EVENTS: TaskEvent,
    Topic.TASK_FINISHED: TaskFinished,
}
TOPIC_OF: dict[type[Event], Topic] = {model: topic for topic, model in EVENT_TYPES.items()}


def decode(topic: Topic, payload: bytes | None) -> Event:
    """Parse a message of `topic`; raises pydantic.ValidationError for anything malformed. A submission in
    none or several of its forms is accepted: the parser fails that document with the reason."""
    return EVENT_TYPES[topic].model_validate_json(payload or b"", context=LENIENT_FORMS)
