"""What an owner approves is the plan shown, not the task whatever it becomes (on PostgreSQL, through the
chunker's own repository and the lifecycle's resume):

- a task paused while a document is being cut is still held when the cut takes it over its ceiling, so
  resuming it cannot skip the owner's approval;
- a document cut while the task waits is part of the plan the owner is asked to approve;
- a document that takes the task beyond the approved plan holds it again, saying so.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from docsum_chunker.chunking import Chunk
from docsum_chunker.handlers import store_chunks
from docsum_chunker.policy import CutChunk, hold_rule
from docsum_chunker.repository import ChunkRepository
from docsum_chunker.settings import ChunkerSettings
from docsum_shared import lifecycle
from docsum_shared.db import migrate
from docsum_shared.states import DocumentStatus, TaskStatus

pytestmark = pytest.mark.integration

# 10 calls at most: a document of 6 chunks is 6 chunk calls and 1 merge.
SETTINGS = ChunkerSettings(llm_backend="openai", task_max_calls=10)


async def _task(db: asyncpg.Pool, status: TaskStatus) -> str:
    task_id = str(uuid.uuid4())
    await db.execute("INSERT INTO tasks (id, owner, status) VALUES ($1, 'alice', $2)", task_id, status)
    return task_id


async def _cut(db: asyncpg.Pool, task_id: str, chunks: int) -> str | None:
    """A document of the task, cut into `chunks` chunks: what the chunker stores, with the hold rule."""
    document_id = str(uuid.uuid4())
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'd.txt', $3)",
        document_id,
        task_id,
        DocumentStatus.CHUNKING,
    )
    rows = [CutChunk(str(uuid.uuid4()), i, Chunk(i, i * 10, i * 10 + 10, "x" * 10, "", "")) for i in range(chunks)]
    return await store_chunks(ChunkRepository(db), document_id, rows, hold_rule(SETTINGS))


async def _status(db: asyncpg.Pool, task_id: str) -> tuple[TaskStatus, str | None]:
    row = await db.fetchrow("SELECT status, hold_reason FROM tasks WHERE id = $1", task_id)
    return TaskStatus(row["status"]), row["hold_reason"]


async def test_a_pause_during_the_cut_does_not_skip_the_approval(db: asyncpg.Pool) -> None:
    await migrate(db)
    task_id = await _task(db, TaskStatus.PAUSED)
    reason = await _cut(db, task_id, 12)  # 12 chunk calls and a merge: over 10
    assert reason is not None and "ceiling of 10" in reason
    assert await _status(db, task_id) == (TaskStatus.AWAITING_APPROVAL, reason)


async def test_the_approved_plan_holds_and_a_task_that_outgrows_it_waits_again(db: asyncpg.Pool) -> None:
    await migrate(db)
    task_id = await _task(db, TaskStatus.PROCESSING)
    assert await _cut(db, task_id, 3) is None  # 3 chunks, 1 merge: within the ceiling
    held = await _cut(db, task_id, 9)  # 12 chunks, 2 documents merged and the task merge: 15 calls
    assert held is not None and "about 15 LLM calls" in held
    assert await lifecycle.resume(db, task_id)  # the owner approves those 15 calls
    assert await _status(db, task_id) == (TaskStatus.PROCESSING, None)

    # A document of one chunk and the task merge's one more input: 16 calls, beyond the 15 approved.
    again = await _cut(db, task_id, 1)
    assert again is not None and again.startswith("the task grew beyond the plan approved (about 15 LLM calls")
    assert await _status(db, task_id) == (TaskStatus.AWAITING_APPROVAL, again)
    assert await lifecycle.resume(db, task_id)


async def test_a_document_cut_while_the_task_waits_is_part_of_what_is_approved(db: asyncpg.Pool) -> None:
    await migrate(db)
    task_id = await _task(db, TaskStatus.PROCESSING)
    assert "about 15 LLM calls" in (await _cut(db, task_id, 14) or "")  # 14 chunks and a merge
    waiting = await _cut(db, task_id, 2)  # 16 chunks, 2 document merges and the task's: 19
    assert waiting is not None and "about 19 LLM calls" in waiting
    assert await _status(db, task_id) == (TaskStatus.AWAITING_APPROVAL, waiting)
    assert await lifecycle.resume(db, task_id)  # approves the 19 shown now, not the 15 of the first hold
    again = await _cut(db, task_id, 1)  # 21
    assert again is not None and again.startswith("the task grew beyond the plan approved (about 19 LLM calls")
