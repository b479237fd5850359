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

from .. import repository
from ..deps import OwnerDep, PoolDep, ProducerDep, SettingsDep
from ..schemas import (
    ChunkProgress,
    CreatedDocument,
    DocumentView,
    Estimate,
    FailureView,
    LifecycleResult,
    Recovery,
    TaskCreated,
    TaskListItem,
    TaskView,
    Usage,
)

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

_READ_BLOCK = 1024 * 1024
# What one chunk summary is expected to cost in completion tokens, for estimates before the calls.
EXPECTED_COMPLETION_TOKENS = 150


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
    rows = await repository.list_tasks(pool, owner, limit)
    return [
        TaskListItem(task_id=r["id"], title=r["title"], status=r["status"], created_at=r["created_at"]) for r in rows
    ]


@router.get("/{task_id}", response_model=TaskView)
async def get_task(task_id: str, owner: OwnerDep, pool: PoolDep, settings: SettingsDep) -> TaskView:
    found = await repository.get_task(pool, owner, task_id)
    if found is None:  # another owner's task looks exactly like a missing one
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    task, documents = found
    per_document: dict[str | None, Usage] = {}
    total = Usage()
    for row in await repository.usage_rows(pool, task_id):
        cost = settings.cost_usd(row["model"], row["prompt_tokens"], row["completion_tokens"])
        for usage in (per_document.setdefault(row["document_id"], Usage()), total):
            usage.prompt_tokens += row["prompt_tokens"]
            usage.completion_tokens += row["completion_tokens"]
            usage.llm_calls += row["llm_calls"]
            usage.cached_calls += row["cached_calls"]
            usage.cost_usd += cost
    recovered = await repository.recovery(pool, task_id)
    remaining = await repository.remaining_work(pool, task_id)
    rate_per_s = remaining["calls_last_minute"] / 60.0
    completion_tokens = remaining["chunks"] * EXPECTED_COMPLETION_TOKENS
    estimate = Estimate(
        remaining_chunks=remaining["chunks"],
        prompt_tokens=remaining["prompt_tokens"],
        cost_usd=settings.cost_usd(settings.llm_model, remaining["prompt_tokens"], completion_tokens),
        eta_s=round(remaining["chunks"] / rate_per_s, 1)
        if rate_per_s > 0
        else (0.0 if not remaining["chunks"] else None),
    )
    return TaskView(
        task_id=task["id"],
        title=task["title"],
        status=task["status"],
        created_at=task["created_at"],
        updated_at=task["updated_at"],
        summary=task["summary"],
        summary_model=task["summary_model"],
        error=task["error"],
        options=TaskOptions.from_stored(task["options"]),
        usage=total,
        estimate=estimate,
        recovery=Recovery(
            attempts=recovered["attempts"],
            interruptions=recovered["interruptions"],
            redrives=task["redrives"],
            calls_saved=total.cached_calls,
        ),
        documents=[
            DocumentView(
                document_id=d["id"],
                filename=d["filename"],
                status=d["status"],
                size_level=d["size_level"],
                text_chars=d["text_chars"],
                chunks=ChunkProgress(done=d["chunks_done"], failed=d["chunks_failed"], total=d["chunk_total"]),
                summary=d["summary"],
                summary_model=d["summary_model"],
                error=d["error"],
                coverage=d["coverage"],
                failed_chunks=d["failed_chunks"] or [],
                usage=per_document.get(d["id"], Usage()),
            )
            for d in documents
        ],
    )


@router.get("/{task_id}/failures", response_model=list[FailureView])
async def get_failures(task_id: str, owner: OwnerDep, pool: PoolDep) -> list[FailureView]:
    await _owned(pool, owner, task_id)
    return [
        FailureView(
            document_id=r["document_id"],
            filename=r["filename"],
            chunk_index=r["chunk_index"],
            error=r["error"],
            attempts=r["attempts"],
        )
        for r in await repository.failures(pool, task_id)
    ]


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


async def _owned(pool: asyncpg.Pool, owner: str, task_id: str) -> None:
    if not await repository.owns(pool, owner, task_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")


async def _conflict(pool: asyncpg.Pool, task_id: str, verb: str) -> HTTPException:
    current = await repository.task_status(pool, task_id)
    return HTTPException(status.HTTP_409_CONFLICT, f"task {task_id} is {current} and cannot be {verb}")
