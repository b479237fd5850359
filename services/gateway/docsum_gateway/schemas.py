"""The gateway's own response models (a task's views are docsum_shared.readmodel.schemas)."""

from __future__ import annotations

from pydantic import BaseModel


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
