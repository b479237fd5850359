"""The event contract: one frozen pydantic model per topic, all sharing one envelope.

Events carry intents and ids, never document bytes or texts: Postgres holds the state (task-finished,
the pipeline's output to other systems, carries the summaries). New fields are
optional so that older consumers and external publishers keep working; `schema_version` is raised
only for a change that old consumers cannot read. The JSON Schema of every topic is generated from
these models into contracts/ (`make contracts`, see contracts.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .levels import SizeLevel
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

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()


class DocumentSubmitted(Event):
    """A document exists and its bytes are stored by sha256 in the blobs table."""

    document_id: str
    owner: str
    filename: str
    content_type: str | None = None
    blob_sha256: str = Field(description="The sha256 (hex) under which the document's bytes are stored.")
    size_bytes: int = Field(ge=0)

    KEY_FIELD = "document_id"


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
    """Parse a message of `topic`; raises pydantic.ValidationError for anything malformed."""
    return EVENT_TYPES[topic].model_validate_json(payload or b"")
