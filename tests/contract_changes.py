"""Event-model changes that the contract generator must take in its stride by regeneration alone.

`extend(monkeypatch)` makes events.py (as contracts/generate.py and kafka.py see it) gain a topic `task-archived`
(one that no part of docsum sends or receives) whose event carries nested results, and gives
`document-submitted` three alternative forms published as a `oneOf` (enforced by a model validator).
The models are made up for the test.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from docsum_shared import events, kafka
from docsum_shared.events import EVENT_TYPES, Event, Topic
from docsum_shared.states import DocumentStatus, TaskStatus
from tests import generators

contracts = generators.contracts()

FORMS = {"stored": ("blob_sha256", "size_bytes"), "inline": ("content_base64",), "uri": ("source_uri",)}


class DocumentSubmitted(Event):
    """A document to summarize: stored already, inline, or by URI (exactly one of them)."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        json_schema_extra={"oneOf": [{"required": list(fields)} for fields in FORMS.values()]},
    )
    KEY_FIELD = "document_id"

    document_id: str
    owner: str
    filename: str
    content_type: str | None = None
    blob_sha256: str | None = None
    size_bytes: int | None = Field(None, ge=0)
    task_documents: int | None = Field(None, ge=1, description="How many documents the task has.")
    content_base64: str | None = None
    source_uri: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> DocumentSubmitted:
        given = [name for name, fields in FORMS.items() if any(getattr(self, f) is not None for f in fields)]
        if len(given) != 1:
            raise ValueError(f"exactly one form of {sorted(FORMS)} is required, got {given}")
        return self


class DocumentResult(BaseModel):
    document_id: str
    filename: str
    status: DocumentStatus
    summary: str | None = None
    error: str | None = None


class TaskArchived(Event):
    """A finished task was archived, with its results."""

    status: TaskStatus
    summary: str | None = None
    documents: list[DocumentResult] = Field(min_length=1)
    usage: dict[str, Any] = Field(default_factory=dict)


def extend(monkeypatch: pytest.MonkeyPatch) -> type[StrEnum]:
    """Patch in the extended contract; returns the new Topic enum."""
    members = [(t.name, t.value) for t in Topic] + [("TASK_ARCHIVED", "task-archived")]
    topic = StrEnum("Topic", members)  # type: ignore[misc]
    types: dict[Any, type[Event]] = {topic(t.value): EVENT_TYPES[t] for t in Topic}
    types[topic("document-submitted")] = DocumentSubmitted
    types[topic("task-archived")] = TaskArchived
    for module in (contracts, kafka):
        monkeypatch.setattr(module, "Topic", topic)
    monkeypatch.setattr(contracts, "EVENT_TYPES", types)
    monkeypatch.setattr(events, "EVENT_TYPES", types)  # decode()
    return topic
