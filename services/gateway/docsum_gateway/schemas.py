"""The gateway's own response models (a task's views are docsum_shared.readmodel.schemas)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CreatedDocument(BaseModel):
    document_id: str
    filename: str


class TaskCreated(BaseModel):
    task_id: str
    status: str
    documents: list[CreatedDocument]


class LifecycleResult(BaseModel):
    task_id: str
    status: str
    redriven_events: int = 0


class QuotedText(BaseModel):
    """A range of a document's extracted text: what a summary sentence's source quotes."""

    document_id: str
    filename: str
    unit: Literal["page", "paragraph", "line"] | None = Field(
        description="What `page` counts: PDF pages, DOCX paragraphs, lines of text; null: the text has no positions."
    )
    page: int | None = Field(description="The unit (from 1) the range starts in; null: not known.")
    last_page: int | None = Field(description="The unit the range ends in.")
    start: int
    end: int
    text: str = Field(description="The document's extracted text from `start` to `end` (characters, end excluded).")
