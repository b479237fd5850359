"""A producer's new tasks count against the same per-owner limit as the gateway's (DOCSUM_TASKS_PER_MINUTE,
one GCRA row per owner in PostgreSQL): over it, a message waits in the parser and is retried, never
refused nor lost.

The owner is made for this test alone (the database is the session's, and the limiter is per owner).
With 12 tasks a minute (a burst of 12, then one every 5 s): eleven uploads through the gateway, then
three one-document tasks from the producer `crm`. The first of them takes the last slot of the burst; the
other two wait their turn in the parser, and all three complete. Right after the last is created, the
gateway refuses the owner's next upload (429): both doors book the same slots.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
import uuid

import asyncpg
import httpx
import pytest

from tests.integration.conftest import StackFactory
from tests.integration.helpers import eventually, txt
from tests.integration.test_foreign_producers import producers, publish, read_finished

pytestmark = pytest.mark.integration

RATE = 12  # tasks a minute: one every 5 s after a burst of 12


async def test_intake_tasks_over_the_owners_rate_wait_and_then_complete(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    owner, key = f"rate-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(24)
    stack = make_stack(
        DOCSUM_LLM_BACKEND="extractive",
        DOCSUM_TASKS_PER_MINUTE=str(RATE),
        DOCSUM_API_KEYS=f"{owner}={key}",
        DOCSUM_INTAKE_PRODUCERS=producers(crm=[owner]),
    )
    client = httpx.AsyncClient(base_url=stack.gateway_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with client:
        for n in range(RATE - 1):  # all the burst's slots but one, through the gateway
            response = await client.post("/v1/tasks", files=[txt(f"rest-{n}.txt", f"Upload number {n} of the owner.")])
            assert response.status_code == 201, response.text

        tasks = [f"crm.rate:{uuid.uuid4().hex}" for _ in range(3)]
        text = "A short note about quarterly results that grew in every region. " * 5
        published_at = time.monotonic()
        await asyncio.to_thread(publish, stack, [
            {"task_id": task, "document_id": f"{task}:1", "owner": owner, "filename": "note.txt",
             "task_documents": 1, "content_base64": base64.b64encode(text.encode()).decode()}
            for task in tasks
        ])  # fmt: skip

        created: dict[str, float] = {}

        async def all_created() -> bool:
            for task in tasks:
                if task not in created and await db.fetchval("SELECT 1 FROM tasks WHERE id = $1", task):
                    created[task] = time.monotonic() - published_at
            return len(created) == len(tasks)

        await eventually(all_created, timeout=90, interval=0.2, message="every intake task, in its turn", stack=stack)
        # The slots are the gateway's too: the owner's next upload, right now, is over the limit.
        refused = await client.post("/v1/tasks", files=[txt("one-more.txt", "One upload too many.")])
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) >= 1

    results = await asyncio.to_thread(read_finished, stack, set(tasks), 120)
    assert {results[t]["status"] for t in tasks} == {"COMPLETED"}
    # They waited in the parser (retried as rate-limited), not refused: nothing dead-lettered, and the
    # parser's log says why they waited.
    parser_log = (stack.logs / "parser.log").read_text(errors="replace")
    assert f"owner {owner} is over {RATE} new tasks a minute (DOCSUM_TASKS_PER_MINUTE)" in parser_log
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE owner = $1", owner) == RATE - 1 + len(tasks)
    print(f"intake tasks created after publishing (s): {sorted(round(t, 1) for t in created.values())}")
