"""The webhooks' outbox against PostgreSQL: a task's end writes its deliveries in the transaction that stores
it, once per endpoint that wants it, whoever handles the end again."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest

from docsum_merger.repository import MergeRepository
from docsum_merger.settings import MergerSettings
from docsum_shared.states import TaskStatus

pytestmark = pytest.mark.integration


async def _task(db: asyncpg.Pool, owner: str, webhook_id: str | None = None) -> str:
    task_id = str(uuid.uuid4())
    await db.execute(
        "INSERT INTO tasks (id, owner, title, status, options, webhook_id) VALUES ($1, $2, 'batch', $3, '{}', $4)",
        task_id, owner, TaskStatus.PROCESSING, webhook_id,
    )  # fmt: skip
    return task_id


async def _endpoint(
    db: asyncpg.Pool, owner: str, events: list[str], *, all_tasks: bool = True, deployment: str = ""
) -> str:
    endpoint_id = str(uuid.uuid4())
    await db.execute(
        "INSERT INTO webhook_endpoints (id, deployment, owner, url, events, all_tasks, secret)"
        " VALUES ($1, $2, $3, 'https://example.com/hook', $4, $5, 'whsec_c2VjcmV0')",
        endpoint_id, deployment, owner, events, all_tasks,
    )  # fmt: skip
    return endpoint_id


async def _deliveries(db: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT id, endpoint_id, event_type, payload::text AS payload FROM webhook_deliveries WHERE task_id = $1",
        task_id,
    )


async def test_a_task_end_is_written_once_for_each_endpoint_that_wants_it(repository_db: asyncpg.Pool) -> None:
    db = repository_db
    owner, other = f"o-{uuid.uuid4().hex[:8]}", f"p-{uuid.uuid4().hex[:8]}"
    finished = await _endpoint(db, owner, ["task.finished", "task.failed"])
    failures = await _endpoint(db, owner, ["task.failed"])  # wants another event
    await _endpoint(db, other, ["task.finished"])  # another owner's
    await _endpoint(db, owner, ["task.finished"], deployment="elsewhere.")  # of another deployment's tasks
    named_only = await _endpoint(db, owner, ["task.finished"], all_tasks=False)  # for tasks naming it
    task_id = await _task(db, owner)
    repo = MergeRepository(db, MergerSettings(_env_file=None))

    await repo.finish_task(task_id, TaskStatus.COMPLETED, None, None)
    await repo.finish_task(task_id, TaskStatus.COMPLETED, None, None)  # the message handled again

    rows = await _deliveries(db, task_id)
    assert [(r["endpoint_id"], r["event_type"]) for r in rows] == [(finished, "task.finished")]
    body = json.loads(rows[0]["payload"])
    assert body["type"] == "task.finished"
    assert body["data"]["task_id"] == task_id and body["data"]["status"] == "COMPLETED"
    assert rows[0]["id"].startswith("msg_")

    named = await _task(db, owner, webhook_id=named_only)
    await repo.finish_task(named, TaskStatus.FAILED, None, "every document failed")
    assert sorted(r["endpoint_id"] for r in await _deliveries(db, named)) == sorted([finished, failures])
    await db.execute("UPDATE webhook_endpoints SET events = '{task.failed}' WHERE id = $1", named_only)
    again = await _task(db, owner, webhook_id=named_only)
    await repo.finish_task(again, TaskStatus.FAILED, None, "every document failed")
    assert sorted(r["endpoint_id"] for r in await _deliveries(db, again)) == sorted([finished, failures, named_only])


async def test_a_task_without_endpoints_writes_nothing(repository_db: asyncpg.Pool) -> None:
    task_id = await _task(repository_db, f"o-{uuid.uuid4().hex[:8]}")
    await MergeRepository(repository_db, MergerSettings(_env_file=None)).finish_task(
        task_id, TaskStatus.COMPLETED, None, None
    )
    assert await _deliveries(repository_db, task_id) == []
    assert await repository_db.fetchval("SELECT status FROM tasks WHERE id = $1", task_id) == "COMPLETED"
