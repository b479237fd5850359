"""The webhooks' outbox against PostgreSQL: a task's end writes its deliveries in the transaction that stores
it, once per endpoint that wants it, whoever handles the end again."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest

from docsum_chunker.repository import ChunkRepository
from docsum_chunker.settings import ChunkerSettings
from docsum_gateway.webhooks import repository as webhooks
from docsum_merger.repository import MergeRepository
from docsum_merger.settings import MergerSettings
from docsum_parser.repository import DocumentRepository
from docsum_shared.approval import Hold
from docsum_shared.redrive import fail_stalled
from docsum_shared.scope import Scope
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.repositories.parser import SETTINGS as PARSER_SETTINGS
from tests.repositories.parser import published

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


async def test_a_hold_for_approval_is_written_once_however_many_documents_ask(repository_db: asyncpg.Pool) -> None:
    """Each document the chunker cuts may find the task over its ceiling: the first hold is told, the
    holds of the task's other documents (it waits already) are not."""
    db = repository_db
    owner = f"o-{uuid.uuid4().hex[:8]}"
    endpoint = await _endpoint(db, owner, ["task.awaiting_approval"])
    task_id = await _task(db, owner)
    documents = [str(uuid.uuid4()) for _ in range(2)]
    for position, document_id in enumerate(documents):
        await db.execute(
            "INSERT INTO documents (id, task_id, position, filename, status) VALUES ($1, $2, $3, 'a.txt', $4)",
            document_id, task_id, position, DocumentStatus.CHUNKING,
        )  # fmt: skip
    chunker = ChunkRepository(db, ChunkerSettings(_env_file=None))
    for document_id in documents:
        async with chunker.locked(document_id) as tx:
            assert await tx.hold(Hold("over the owner's ceiling of 1 call", calls=4, cost_usd=0.01))

    rows = await _deliveries(db, task_id)
    assert [(r["endpoint_id"], r["event_type"]) for r in rows] == [(endpoint, "task.awaiting_approval")]
    assert json.loads(rows[0]["payload"])["data"]["status"] == "AWAITING_APPROVAL"


async def test_a_document_failure_is_written_once_by_whichever_stage_fails_it(repository_db: asyncpg.Pool) -> None:
    db = repository_db
    owner = f"o-{uuid.uuid4().hex[:8]}"
    endpoint = await _endpoint(db, owner, ["document.failed"])
    task_id = await _task(db, owner)
    stages = [
        (DocumentStatus.PARSING, DocumentRepository(db).fail),
        (DocumentStatus.CHUNKING, ChunkRepository(db).fail),
        (DocumentStatus.SUMMARIZING, MergeRepository(db, MergerSettings(_env_file=None)).fail_document),
    ]
    failed = []
    for position, (status, fail) in enumerate(stages):
        document_id = str(uuid.uuid4())
        await db.execute(
            "INSERT INTO documents (id, task_id, position, filename, status) VALUES ($1, $2, $3, $4, $5)",
            document_id, task_id, position, f"{position}.pdf", status,
        )  # fmt: skip
        await fail(document_id, f"{status} failed: the file is damaged")
        await fail(document_id, f"{status} failed: the file is damaged")  # handled again: no second delivery
        failed.append(document_id)

    rows = await _deliveries(db, task_id)
    assert sorted(r["endpoint_id"] for r in rows) == [endpoint] * 3
    data = sorted((json.loads(r["payload"])["data"] for r in rows), key=lambda d: d["filename"])
    assert [(d["document_id"], d["task_id"], d["filename"]) for d in data] == [
        (failed[i], task_id, f"{i}.pdf") for i in range(3)
    ]
    assert data[0]["error"] == "PARSING failed: the file is damaged"


async def test_a_document_refused_at_intake_is_written_once(repository_db: asyncpg.Pool) -> None:
    """Another system's document whose bytes cannot be had is stored FAILED: its owner's endpoint is told."""
    db = repository_db
    owner = f"o-{uuid.uuid4().hex[:8]}"
    endpoint = await _endpoint(db, owner, ["document.failed"])
    task_id, document_id = f"crm:{uuid.uuid4().hex}", f"crm:{uuid.uuid4().hex}"
    event = published(task_id, document_id, owner=owner, documents=1)
    parser = DocumentRepository(db)
    for _ in range(2):  # the message delivered again
        await parser.take_in(event, None, "host files.example.com is not allowed", PARSER_SETTINGS)

    rows = await _deliveries(db, task_id)
    assert [r["endpoint_id"] for r in rows] == [endpoint]
    data = json.loads(rows[0]["payload"])["data"]
    assert data["document_id"] == document_id and data["error"] == "host files.example.com is not allowed"


async def test_a_document_failed_for_making_no_progress_is_written_once(repository_db: asyncpg.Pool) -> None:
    """Reconcile fails a document re-driven DOCSUM_REDRIVE_LIMIT times without progress: that is told too."""
    db = repository_db
    owner = f"o-{uuid.uuid4().hex[:8]}"
    endpoint = await _endpoint(db, owner, ["document.failed"])
    task_id, document_id = await _task(db, owner), str(uuid.uuid4())
    await db.execute(
        "INSERT INTO documents (id, task_id, position, filename, status) VALUES ($1, $2, 0, 'a.txt', $3)",
        document_id, task_id, DocumentStatus.SUMMARIZING,
    )  # fmt: skip
    failed = [await fail_stalled(db, task_id, limit=1) for _ in range(3)]  # marked, failed, final already
    assert failed == [[], [document_id], []]

    rows = await _deliveries(db, task_id)
    assert [r["endpoint_id"] for r in rows] == [endpoint]
    assert json.loads(rows[0]["payload"])["data"]["error"].startswith("no progress after 1 re-drives")


async def test_the_delivery_log_keeps_the_last_days_and_what_is_still_tried(repository_db: asyncpg.Pool) -> None:
    db = repository_db
    endpoint = await _endpoint(db, f"o-{uuid.uuid4().hex[:8]}", ["task.finished"])
    week = 7 * 24 * 3600.0
    cases = {  # delivery -> (created, delivered, due next): ages in days
        "old-delivered": (8, 8, None),
        "old-given-up": (9, None, None),
        "old-still-tried": (9, None, 0),
        "new-delivered": (1, 1, None),
    }
    for name, (created, delivered, due) in cases.items():
        await db.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, event_type, event_key, payload, created_at,"
            " delivered_at, next_attempt_at) VALUES ($1, $2, 'task.finished', $1, '{}',"
            " now() - make_interval(days => $3), now() - make_interval(days => $4), now() - make_interval(days => $5))",
            f"{endpoint}:{name}", endpoint, created, delivered, due,
        )  # fmt: skip
        await db.execute("INSERT INTO webhook_attempts (delivery_id, attempt) VALUES ($1, 1)", f"{endpoint}:{name}")

    while await webhooks.prune_deliveries(db, week, at_most=1):  # a page at a time, as the loop does
        pass

    kept = await db.fetch("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id", endpoint)
    assert [r["id"].split(":")[-1] for r in kept] == ["new-delivered", "old-still-tried"]
    attempts = await db.fetchval(
        "SELECT count(*) FROM webhook_attempts WHERE delivery_id LIKE $1 || ':%'", endpoint
    )  # those of the pruned deliveries went with them
    assert attempts == 2


async def test_a_deleted_endpoint_is_sent_nothing_more(repository_db: asyncpg.Pool) -> None:
    """Deleting an endpoint stops its deliveries, and one its last attempt in flight made due again is not
    claimed either."""
    db = repository_db
    owner = f"o-{uuid.uuid4().hex[:8]}"
    endpoint = await _endpoint(db, owner, ["task.finished"])
    task_id = await _task(db, owner)
    await MergeRepository(db, MergerSettings(_env_file=None)).finish_task(task_id, TaskStatus.COMPLETED, None, None)
    (delivery,) = await _deliveries(db, task_id)
    scope = Scope("", owner)
    assert await webhooks.disable_endpoint(db, Scope("", "someone-else"), endpoint) is None
    assert await webhooks.disable_endpoint(db, scope, endpoint) is not None
    assert await db.fetchval("SELECT next_attempt_at FROM webhook_deliveries WHERE id = $1", delivery["id"]) is None
    await db.execute("UPDATE webhook_deliveries SET next_attempt_at = now() WHERE id = $1", delivery["id"])

    claimed = await webhooks.claim_due(db, "", 1000, 30.0)
    assert delivery["id"] not in {d.id for d in claimed}
