"""The event contract: one frozen pydantic model per topic, all sharing one envelope.

Events carry intents and ids, never document bytes or texts: Postgres holds the state. New fields are
optional so that older consumers and external publishers keep working; `schema_version` is raised
only for a change that old consumers cannot read.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

E = TypeVar("E", bound="Event")


def _now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    event_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = 1
    occurred_at: datetime = Field(default_factory=_now)
    # One trace per submission, carried from each event to the events it causes (see `next`).
    trace_id: str | None = Field(default_factory=lambda: uuid.uuid4().hex)
    causation_id: str | None = None  # the event_id of the event that caused this one
    task_id: str

    def next(self, model: type[E], **fields: Any) -> E:
        """An event caused by this one: the same trace and (unless given) the same task."""
        fields.setdefault("task_id", self.task_id)
        return model(trace_id=self.trace_id or self.event_id, causation_id=self.event_id, **fields)

    def key(self) -> str:
        """The partition key: decides ordering and which consumer owns the event."""
        return self.task_id

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()


class DocumentSubmitted(Event):
    """A document exists and its bytes are stored by sha256 in the blobs table."""

    document_id: str
    owner: str
    filename: str
    content_type: str | None = None
    blob_sha256: str
    size_bytes: int = Field(ge=0)

    def key(self) -> str:
        return self.document_id


class DocumentParsed(Event):
    """The document's plain text is stored; its size level is known."""

    document_id: str
    text_chars: int = Field(ge=0)
    size_level: str

    def key(self) -> str:
        return self.document_id


class ChunkCreated(Event):
    """One chunk row exists (every chunk of the document is stored before the first is announced)."""

    document_id: str
    chunk_id: str
    chunk_index: int = Field(ge=0)

    def key(self) -> str:
        return self.chunk_id


class ChunkRetry(ChunkCreated):
    """A chunk whose LLM calls kept failing for a passing reason: try again at `not_before`."""

    not_before: datetime
    failures: int = Field(ge=0)  # attempts that failed so far


class ChunkSummarized(Event):
    """The chunk reached a final state (its summary stored, or FAILED)."""

    document_id: str
    chunk_id: str
    chunk_index: int = Field(ge=0)

    def key(self) -> str:
        return self.document_id


class DocumentOutcome(StrEnum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class DocumentMerged(Event):
    """The document is finished: its summary stored, or FAILED with its error stored."""

    document_id: str
    outcome: DocumentOutcome


class TaskEvent(Event):
    """Task lifecycle that has no pipeline topic of its own (finished, paused, expired...)."""

    status: str
    detail: dict[str, Any] = Field(default_factory=dict)


class Topic(StrEnum):
    DOCUMENT_SUBMITTED = "document-submitted"
    DOCUMENT_PARSED = "document-parsed"
    CHUNK_CREATED = "chunk-created"
    CHUNK_RETRY = "chunk-created.retry"  # delayed retries of chunk-created
    CHUNK_SUMMARIZED = "chunk-summarized"
    DOCUMENT_MERGED = "document-merged"
    TASK_EVENTS = "task-events"


EVENT_TYPES: dict[Topic, type[Event]] = {
    Topic.DOCUMENT_SUBMITTED: DocumentSubmitted,
    Topic.DOCUMENT_PARSED: DocumentParsed,
    Topic.CHUNK_CREATED: ChunkCreated,
    Topic.CHUNK_RETRY: ChunkRetry,
    Topic.CHUNK_SUMMARIZED: ChunkSummarized,
    Topic.DOCUMENT_MERGED: DocumentMerged,
    Topic.TASK_EVENTS: TaskEvent,
}
TOPIC_OF: dict[type[Event], Topic] = {model: topic for topic, model in EVENT_TYPES.items()}


def decode(topic: Topic, payload: bytes | None) -> Event:
    """Parse a message of `topic`; raises pydantic.ValidationError for anything malformed."""
    return EVENT_TYPES[topic].model_validate_json(payload or b"")
