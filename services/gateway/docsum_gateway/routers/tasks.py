"""/v1/tasks: submit a batch of documents, follow it, read its summaries."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import asyncpg
from fastapi import APIRouter, File, Form, HTTPException, Query, UploadFile, status

from docsum_shared import lifecycle
from docsum_shared.events import DocumentSubmitted, TaskEvent
from docsum_shared.kafka import publish
from docsum_shared.options import TaskOptions
from docsum_shared.redrive import redrive_task
from docsum_shared.states import TaskStatus

from .. import repository, views
from ..deps import OwnerDep, PoolDep, ProducerDep, SettingsDep
from ..schemas import CreatedDocument, FailureView, LifecycleResult, TaskCreated, TaskListItem, TaskView

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

_READ_BLOCK = 1024 * 1024


async def _read_limited(upload: UploadFile, max_bytes: int) -> bytes:
    data = bytearray()
    while block := await upload.read(_READ_BLOCK):
        data += block
        if len(data) > max_bytes:
            raise HTTPException(
                status.HTTP_413_CONTENT_TOO_LARGE,
                f"file '{upload.filename}' is over the limit of {max_bytes} bytes",
            )
    return bytes(data)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TaskCreated)
async def create_task(
    owner: OwnerDep,
    settings: SettingsDep,
    pool: PoolDep,
    producer: ProducerDep,
    files: Annotated[list[UploadFile] | None, File(description="the documents to summarize")] = None,
    title: Annotated[str | None, Form(max_length=500)] = None,
    strict: Annotated[bool, Form(description="fail a document if any part of it fails")] = False,
    language: Annotated[
        str | None, Form(max_length=40, description="summary language; default: the document's")
    ] = None,
    length: Annotated[Literal["brief", "standard", "detailed"], Form()] = "standard",
    style: Annotated[Literal["prose", "bullets"], Form()] = "prose",
) -> TaskCreated:
    if not files:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "no files: send one or more as multipart field 'files'")
    if len(files) > settings.max_files_per_task:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"{len(files)} files is over the limit of {settings.max_files_per_task} per task",
        )
    uploads = [
        repository.Upload(
            filename=(f.filename or f"document-{i + 1}")[:255],
            content_type=f.content_type,
            data=await _read_limited(f, settings.max_file_bytes),
        )
        for i, f in enumerate(files)
    ]
    options = TaskOptions(strict=strict, language=language or None, length=length, style=style)
    task_id, documents = await repository.create_task(pool, owner, title, uploads, options)
    await publish(
        producer,
        settings,
        [
            DocumentSubmitted(
                task_id=task_id,
                document_id=d.id,
                owner=owner,
                filename=d.upload.filename,
                content_type=d.upload.content_type,
                blob_sha256=d.upload.sha256,
                size_bytes=len(d.upload.data),
            )
            for d in documents
        ],
    )
    log.info("task %s: %d documents submitted by %s", task_id, len(documents), owner)
    return TaskCreated(
        task_id=task_id,
        status="PROCESSING",
        documents=[CreatedDocument(document_id=d.id, filename=d.upload.filename) for d in documents],
    )


@router.get("", response_model=list[TaskListItem])
async def list_tasks(
    owner: OwnerDep, pool: PoolDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[TaskListItem]:
    return await views.list_tasks(pool, owner, limit)


@router.get("/{task_id}", response_model=TaskView)
async def get_task(task_id: str, owner: OwnerDep, pool: PoolDep, settings: SettingsDep) -> TaskView:
    view = await views.task_view(pool, settings, owner, task_id)
    if view is None:  # another owner's task looks exactly like a missing one
        raise _not_found(task_id)
    return view


@router.get("/{task_id}/failures", response_model=list[FailureView])
async def get_failures(task_id: str, owner: OwnerDep, pool: PoolDep) -> list[FailureView]:
    listed = await views.failures(pool, owner, task_id)
    if listed is None:
        raise _not_found(task_id)
    return listed


@dataclass(frozen=True)
class _Control:
    """One lifecycle route: the guarded transition, what it is called in a 409, and what follows it."""

    move: Callable[[asyncpg.Pool, str], Awaitable[bool | int]]
    verb: str
    status: TaskStatus  # the task's status after it
    redrive: bool  # re-drive the freed work from Postgres (else: announce the new status)
    doc: str


_CONTROLS = {
    "pause": _Control(lifecycle.pause, "paused", TaskStatus.PAUSED, False,
                      "Work in flight finishes and is stored; no new LLM call starts for this task."),
    "resume": _Control(lifecycle.resume, "resumed", TaskStatus.PROCESSING, True,
                       "Back to PROCESSING; the remaining work is re-driven from Postgres."),
    "cancel": _Control(lifecycle.cancel, "cancelled", TaskStatus.CANCELLED, False,
                       "Terminal: nothing more is spent on the task."),
    "retry": _Control(lifecycle.retry_failed, "retried (nothing failed)", TaskStatus.PROCESSING, True,
                      "Re-drive the FAILED documents and chunks; every stored summary is reused."),
}  # fmt: skip


def _control_route(action: str, control: _Control) -> None:
    async def route(
        task_id: str, owner: OwnerDep, pool: PoolDep, producer: ProducerDep, settings: SettingsDep
    ) -> LifecycleResult:
        await _owned(pool, owner, task_id)
        if not await control.move(pool, task_id):
            raise await _conflict(pool, task_id, control.verb)
        if control.redrive:
            published = await redrive_task(pool, producer, settings, task_id)
            return LifecycleResult(task_id=task_id, status=control.status, redriven_events=published)
        await publish(producer, settings, [TaskEvent(task_id=task_id, status=control.status)])
        return LifecycleResult(task_id=task_id, status=control.status)

    router.add_api_route(
        f"/{{task_id}}/{action}", route, methods=["POST"], response_model=LifecycleResult, name=action,
        description=control.doc,
    )  # fmt: skip


for _action, _control in _CONTROLS.items():
    _control_route(_action, _control)


def _not_found(task_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")


async def _owned(pool: asyncpg.Pool, owner: str, task_id: str) -> None:
    if not await repository.owns(pool, owner, task_id):
        raise _not_found(task_id)


async def _conflict(pool: asyncpg.Pool, task_id: str, verb: str) -> HTTPException:
    current = await repository.task_status(pool, task_id)
    return HTTPException(status.HTTP_409_CONFLICT, f"task {task_id} is {current} and cannot be {verb}")
