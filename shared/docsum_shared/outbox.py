"""The webhooks' outbox: the deliveries a state change owes its owner's endpoints, written by the service that
stores the change, in the same transaction (the gateway sends them: docsum_gateway.webhooks).

One row per endpoint and change (`event_key`), written with ON CONFLICT DO NOTHING: a message handled
twice, a re-drive or a replay writes nothing more, and the row keeps its webhook-id and body.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

import asyncpg

from .db import WEBHOOKS_DUE
from .events import TaskFinished
from .readmodel import views
from .settings import LLMSettings
from .states import TaskStatus


class WebhookEvent(StrEnum):
    """What an endpoint may ask to be told of."""

    TASK_FINISHED = "task.finished"  # COMPLETED or COMPLETED_WITH_ERRORS
    TASK_FAILED = "task.failed"
    TASK_AWAITING_APPROVAL = "task.awaiting_approval"
    TASK_CANCELLED = "task.cancelled"  # by its owner
    TASK_EXPIRED = "task.expired"  # idle beyond DOCSUM_TASK_TTL_S: given up
    DOCUMENT_FAILED = "document.failed"


def task_event(status: TaskStatus) -> WebhookEvent | None:
    """The webhook event a task's new status is: every final status has one, so an endpoint hears of each
    task's end however it ends (None: a status no endpoint is told of, e.g. PAUSED, which its owner set)."""
    return _TASK_EVENTS.get(status)


_TASK_EVENTS = {
    TaskStatus.COMPLETED: WebhookEvent.TASK_FINISHED,
    TaskStatus.COMPLETED_WITH_ERRORS: WebhookEvent.TASK_FINISHED,
    TaskStatus.FAILED: WebhookEvent.TASK_FAILED,
    TaskStatus.CANCELLED: WebhookEvent.TASK_CANCELLED,
    TaskStatus.EXPIRED: WebhookEvent.TASK_EXPIRED,
    TaskStatus.AWAITING_APPROVAL: WebhookEvent.TASK_AWAITING_APPROVAL,
}


def body(event: WebhookEvent, occurred_at: datetime, data: dict[str, Any]) -> str:
    """A delivery's body, in the shape Standard Webhooks recommends: the event's type, when it happened,
    and its data (for a task, what task-finished carries)."""
    return json.dumps({"type": event.value, "timestamp": occurred_at.isoformat(), "data": data})


# The endpoints of the task's owner (in the task's deployment) that want `event`: all of its tasks', or
# this one's by name.
_WANTING = (
    " FROM webhook_endpoints e JOIN tasks t ON t.id = $1"
    " WHERE e.owner = t.owner AND e.deployment = t.deployment AND e.disabled_at IS NULL AND $2 = ANY(e.events)"
    " AND (e.all_tasks OR e.id = t.webhook_id)"
)


async def wanted(conn: asyncpg.Connection, task_id: str, event: WebhookEvent) -> bool:
    """Whether any endpoint wants `event` of the task: if none does, no body is made."""
    return bool(await conn.fetchval(f"SELECT EXISTS (SELECT 1{_WANTING})", task_id, event.value))


async def enqueue(conn: asyncpg.Connection, task_id: str, event: WebhookEvent, event_key: str, payload: str) -> int:
    """A delivery of `payload` to each endpoint that wants `event` of the task, due now, unless the change
    `event_key` names has its rows already; how many rows were written."""
    rows = await conn.fetch(
        "INSERT INTO webhook_deliveries (id, endpoint_id, event_type, event_key, task_id, payload, next_attempt_at)"
        f" SELECT 'msg_' || md5(e.id || ':' || $3), e.id, $2, $3, $1, $4::json, now(){_WANTING}"
        " ON CONFLICT (endpoint_id, event_key) DO NOTHING RETURNING id",
        task_id, event.value, event_key, payload,
    )  # fmt: skip
    if rows:  # the senders wake at the commit, instead of at their next look
        await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_DUE)
    return len(rows)


async def enqueue_task(conn: asyncpg.Connection, settings: LLMSettings, task_id: str, status: TaskStatus) -> int:
    """The deliveries the task's move to `status` owes, its result (what task-finished carries) read on
    `conn`, in the transaction that stored the move."""
    event = task_event(status)
    if event is None or not await wanted(conn, task_id, event):
        return 0
    result = await views.task_result(conn, settings, task_id)
    if result is None:
        return 0
    finished = TaskFinished.from_result(result)
    payload = body(event, result.updated_at, finished.model_dump(mode="json"))
    # The move is the task's status at its time: a task retried and ended again is another move.
    key = f"task:{task_id}:{status.value}:{result.updated_at.isoformat()}"
    return await enqueue(conn, task_id, event, key, payload)


async def enqueue_document_failed(conn: asyncpg.Connection, document_id: str) -> int:
    """The deliveries a document's failure owes (its task, id, file name and error), read on `conn`, in the
    transaction that stored the failure."""
    row = await conn.fetchrow(
        "SELECT task_id, filename, error, updated_at FROM documents WHERE id = $1 AND status = 'FAILED'", document_id
    )
    event = WebhookEvent.DOCUMENT_FAILED
    if row is None or not await wanted(conn, row["task_id"], event):
        return 0
    data = {"task_id": row["task_id"], "document_id": document_id, "filename": row["filename"], "error": row["error"]}
    # A document retried and failed again is another failure: its time tells the two apart.
    key = f"document:{document_id}:FAILED:{row['updated_at'].isoformat()}"
    return await enqueue(conn, row["task_id"], event, key, body(event, row["updated_at"], data))
