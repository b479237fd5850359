"""The gateway's repository in memory (docsum_gateway.repository.TaskRepository): each task its owner's,
stored whole or not at all, each file's bytes stored once by their hash."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from docsum_gateway.repository import NewDocument, new_id
from docsum_shared.options import TaskOptions
from docsum_shared.states import DocumentStatus, TaskStatus


@dataclass(frozen=True)
class TaskRow:
    id: str
    owner: str
    title: str | None
    status: str
    options: TaskOptions


@dataclass(frozen=True)
class DocumentRow:
    id: str
    task_id: str
    position: int
    filename: str
    content_type: str | None
    blob_sha256: str
    size_bytes: int
    status: str


class FakeTaskRepository:
    def __init__(self) -> None:
        self.tasks: dict[str, TaskRow] = {}
        self.documents: dict[str, DocumentRow] = {}
        self.blobs: dict[str, bytes] = {}

    async def create_task(
        self, owner: str, title: str | None, documents: list[NewDocument], options: TaskOptions
    ) -> str:
        ids = [d.id for d in documents]
        if len(set(ids)) < len(ids) or any(i in self.documents for i in ids):
            raise asyncpg.UniqueViolationError('duplicate key value violates unique constraint "documents_pkey"')
        blobs = {}
        for d in documents:  # read before anything is stored: the task is stored whole or not at all
            if d.file.sha256 not in self.blobs:
                blobs[d.file.sha256] = b"".join([block async for block in d.file.spool.blocks()])
        task_id = new_id()
        self.blobs.update(blobs)
        self.tasks[task_id] = TaskRow(task_id, owner, title, TaskStatus.PROCESSING, options)
        for i, d in enumerate(documents):
            self.documents[d.id] = DocumentRow(
                d.id, task_id, i, d.filename, d.file.content_type, d.file.sha256, d.file.size, DocumentStatus.PENDING
            )
        return task_id

    async def task_status(self, task_id: str) -> str | None:
        task = self.tasks.get(task_id)
        return None if task is None else task.status
