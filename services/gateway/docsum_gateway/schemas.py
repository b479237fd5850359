"""The gateway's own response models (a task's views are docsum_shared.readmodel.schemas)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from docsum_shared.readmodel.schemas import SourceView


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


class QuotedText(SourceView):
    """A range of a document's extracted text: what a summary sentence's source quotes."""

    text: str = Field(description="The document's extracted text from `start` to `end` (characters, end excluded).")
    ocr: bool = Field(
        False,
        description="The range is on a scanned page whose text was read by OCR: a word may be misread.",
    )
