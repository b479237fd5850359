"""The gateway's response models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class CreatedDocument(BaseModel):
    document_id: str
    filename: str


class TaskCreated(BaseModel):
    task_id: str
    status: str
    documents: list[CreatedDocument]


class ChunkProgress(BaseModel):
    done: int
    failed: int
    total: int | None


class DocumentView(BaseModel):
    document_id: str
    filename: str
    status: str
    size_level: str | None
    text_chars: int | None
    chunks: ChunkProgress
    summary: str | None
    summary_model: str | None
    error: str | None


class TaskView(BaseModel):
    task_id: str
    title: str | None
    status: str
    created_at: datetime
    updated_at: datetime
    summary: str | None
    summary_model: str | None
    error: str | None
    documents: list[DocumentView]


class TaskListItem(BaseModel):
    task_id: str
    title: str | None
    status: str
    created_at: datetime
