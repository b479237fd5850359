"""A batch task's view through the gateway: GET /v1/tasks/{id} shows what its provider's batch holds.

The rows are written directly into a database of the module's own, served by a gateway alone: every stack
of the session shares the session's database, and a batch driver there would take up a batch it finds
open (poll it, find it lost, queue its lines again) while the test reads it. The gateway runs in-process
(what is tested is what its route shows, not a process)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from tests.integration.conftest import AnyStack, StackFactory, create_database, drop_database
from tests.integration.helpers import get_task

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def database(infra: dict[str, str]) -> Iterator[str]:
    """The URL of a database of the module's own, dropped at its end."""
    url = asyncio.run(create_database(infra["DATABASE_URL"], "docsum_batch_view"))
    yield url
    asyncio.run(drop_database(url))


@pytest.fixture(scope="module")
def gateway(make_stack: StackFactory, database: str) -> Iterator[AnyStack]:
    stack = make_stack.in_process(("gateway",), DATABASE_URL=database)
    yield stack
    stack.stop_all()


@pytest_asyncio.fixture
async def pool(database: str, gateway: AnyStack) -> AsyncIterator[asyncpg.Pool]:
    """The module's database, once its gateway has started (and so migrated it)."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    yield pool
    await pool.close()


async def _task(
    pool: asyncpg.Pool, gateway: AnyStack, options: dict[str, object], chunks: int
) -> tuple[str, list[str]]:
    """A PROCESSING task of alice's in the gateway's deployment with one document of `chunks` chunks; its
    id and its chunks' ids."""
    task_id, document_id = str(uuid.uuid4()), str(uuid.uuid4())
    chunk_ids = [f"{document_id}:{i}" for i in range(chunks)]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO tasks (id, owner, status, options, deployment)"
            " VALUES ($1, 'alice', 'PROCESSING', $2::jsonb, $3)",
            task_id, json.dumps(options), gateway.env["DOCSUM_TOPIC_PREFIX"],
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO documents (id, task_id, filename, status, chunk_total)"
            " VALUES ($1, $2, 'd.txt', 'SUMMARIZING', $3)",
            document_id, task_id, chunks,
        )  # fmt: skip
        await conn.executemany(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status)"
            " VALUES ($1, $2, $3, 0, 4, 'text', 'PENDING')",
            [(chunk_id, document_id, i) for i, chunk_id in enumerate(chunk_ids)],
        )
    return task_id, chunk_ids


async def _line(pool: asyncpg.Pool, chunk_id: str, task_id: str, status: str, batch_id: str | None = None) -> None:
    await pool.execute(
        "INSERT INTO batch_lines (chunk_id, task_id, owner, custom_id, request, batch_id, status)"
        " VALUES ($1, $2, 'alice', $3, '{}'::jsonb, $4, $5)",
        chunk_id, task_id, "k-" + chunk_id, batch_id, status,
    )  # fmt: skip


async def test_a_task_waiting_on_its_batch_shows_it(pool: asyncpg.Pool, gateway: AnyStack) -> None:
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=6)
    submitted_at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    task_id, chunks = await _task(pool, gateway, {"mode": "batch", "deadline": deadline.isoformat()}, 7)
    batch_id = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO llm_batches (id, task_id, owner, state, lines, provider_id, provider_status, lines_done,"
        " submitted_at) VALUES ($1, $2, 'alice', 'submitted', 4, 'batch_x', 'in_progress', 2, $3)",
        batch_id, task_id, submitted_at,
    )  # fmt: skip
    for chunk_id in chunks[:4]:
        await _line(pool, chunk_id, task_id, "submitted", batch_id)
    await _line(pool, chunks[4], task_id, "answered")
    await _line(pool, chunks[5], task_id, "realtime")
    await _line(pool, chunks[6], task_id, "queued")

    async with gateway.client("alice") as client:
        task = await get_task(client, task_id)
    # 2 of the batch's 4 requests done: 2 of the task's 4 lines in it, and the one answered before.
    assert task["batch"] == {
        "lines": 7,
        "done": 3,
        "waiting": 3,
        "sent_back": 1,
        "dropped": 0,
        "batches": 1,
        "submitted_at": submitted_at.isoformat().replace("+00:00", "Z"),
        "deadline": deadline.isoformat().replace("+00:00", "Z"),
        "state": "waiting",
    }
    assert task["estimate"]["eta_s"] is None  # a line is still to be sent: the batch's end is not known yet

    await pool.execute("DELETE FROM batch_lines WHERE chunk_id = $1", chunks[6])  # only the batch left
    async with gateway.client("alice") as client:
        task = await get_task(client, task_id)
    # Half the batch in an hour (by its stored submitted_at): about one hour more, from the batch alone.
    assert task["batch"]["waiting"] == 2 and task["batch"]["state"] == "waiting"
    assert 3600 <= task["estimate"]["eta_s"] < 2 * 3600


async def test_a_task_without_batch_lines_has_no_batch(pool: asyncpg.Pool, gateway: AnyStack) -> None:
    task_id, _ = await _task(pool, gateway, {"mode": "realtime"}, 2)
    async with gateway.client("alice") as client:
        task = await get_task(client, task_id)
    assert task["batch"] is None
