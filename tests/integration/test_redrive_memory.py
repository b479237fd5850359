"""What a re-drive holds and what it repeats, on a real PostgreSQL and a real broker.

A reconcile over a backlog of idle chunks holds at most one batch of events at a time: they are read
from PostgreSQL page by page and built only once the batch before was acknowledged. And a resume does
not announce again the chunks whose announcement is still on its way; it does announce those whose
announcement is old, or was taken up (dropped by a summarizer while the task was paused).

The database is the repository contracts' own (no merger reconciles it behind the test's back); the
events go to a stack's own topics, through the real producer, wrapped to count what each batch finds
alive.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer

from docsum_gateway.routers import maintenance
from docsum_gateway.settings import GatewaySettings
from docsum_shared import kafka as kafka_module
from docsum_shared import lifecycle, redrive
from docsum_shared.events import ChunkCreated, Event
from docsum_shared.kafka import KafkaPublish, ensure_topics, make_producer
from docsum_summarizer.repository import ChunkRepository, Claim
from tests.integration.conftest import StackFactory
from tests.integration.helpers import kafka_settings

BATCH = 40
TASKS, CHUNKS_PER_TASK = 3, 400  # a backlog of 1,200 idle chunks: 30 batches


@dataclass
class Counted:
    """What the publisher saw: each batch's size, and the most announcements of the test's tasks alive
    (anywhere in the process) while one was being published."""

    tasks: set[str]
    sizes: list[int] = field(default_factory=list)
    announced: list[str] = field(default_factory=list)
    most_alive: int = 0

    def alive(self) -> int:
        return sum(1 for o in gc.get_objects() if type(o) is ChunkCreated and o.task_id in self.tasks)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    seen = Counted(set())
    real = kafka_module.publish

    async def counting(producer: AIOKafkaProducer, settings: Any, events: Sequence[Event], **kw: Any) -> None:
        seen.sizes.append(len(events))
        seen.announced += [e.chunk_id for e in events if isinstance(e, ChunkCreated)]
        seen.most_alive = max(seen.most_alive, seen.alive())
        await real(producer, settings, events, **kw)

    monkeypatch.setattr(kafka_module, "publish", counting)  # what KafkaPublish calls
    return seen


@pytest_asyncio.fixture
async def broker(make_stack: StackFactory) -> AsyncIterator[tuple[AIOKafkaProducer, dict[str, Any]]]:
    stack = make_stack(services=())
    kafka = kafka_settings(stack.env)
    await ensure_topics(kafka, wait_s=30)
    producer = make_producer(kafka)
    await producer.start()
    try:
        yield producer, {"kafka_bootstrap_servers": kafka.kafka_bootstrap_servers, "topic_prefix": kafka.topic_prefix}
    finally:
        await producer.stop()


async def _task(
    db: asyncpg.Pool, owner: str, chunks: int, *, status: str, idle_s: float, deployment: str
) -> tuple[str, list[str]]:
    """A task of `deployment` with one SUMMARIZING document of `chunks` PENDING chunks, nothing moved for
    `idle_s`."""
    task_id, doc_id = str(uuid.uuid4()), str(uuid.uuid4())
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO tasks (id, owner, title, status, last_active_at, deployment)"
            " VALUES ($1, $2, 'backlog', $3, now() - make_interval(secs => $4), $5)",
            task_id, owner, status, idle_s, deployment,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO documents (id, task_id, filename, content_type, status, text_chars, size_level,"
            " chunk_total, updated_at)"
            " VALUES ($1, $2, 'big.txt', 'text/plain', 'SUMMARIZING', 1000000, 'LARGE', $3,"
            " now() - make_interval(secs => $4))",
            doc_id, task_id, chunks, idle_s,
        )  # fmt: skip
        ids = [f"{doc_id}:{i:05d}" for i in range(chunks)]
        await conn.executemany(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, admitted_at)"
            " VALUES ($1, $2, $3, 0, 1, 'x', 'PENDING', now())",  # admitted (admission.py): announced before
            [(chunk_id, doc_id, i) for i, chunk_id in enumerate(ids)],
        )
    return task_id, ids


async def test_a_reconcile_of_a_large_backlog_holds_one_batch_of_events_at_a_time(
    repository_db: asyncpg.Pool, broker: tuple[AIOKafkaProducer, dict[str, Any]], counted: Counted
) -> None:
    producer, kafka = broker
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    backlog: list[str] = []
    for _ in range(TASKS):
        task_id, ids = await _task(
            repository_db, owner, CHUNKS_PER_TASK, status="PROCESSING", idle_s=120, deployment=kafka["topic_prefix"]
        )
        counted.tasks.add(task_id)
        backlog += ids
    settings = GatewaySettings(_env_file=None, **kafka, redrive_batch_events=BATCH, redrive_idle_s=30)

    answer = await maintenance.reconcile(owner, repository_db, KafkaPublish(producer, settings), settings)
    assert sorted(answer.tasks) == sorted(counted.tasks)
    assert answer.redriven_events == len(backlog)
    await asyncio.gather(*maintenance._publishing)

    assert sorted(counted.announced) == sorted(backlog)  # every idle chunk, once
    assert max(counted.sizes) <= BATCH
    # The capacity bound: never more than one batch of the backlog's events in memory at once
    # (before: the whole backlog, 1,200, built before the first batch went out).
    assert counted.most_alive <= BATCH, counted.most_alive


async def test_a_resume_announces_only_chunks_whose_announcement_is_not_on_its_way(
    repository_db: asyncpg.Pool, broker: tuple[AIOKafkaProducer, dict[str, Any]], counted: Counted
) -> None:
    producer, kafka = broker
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    task_id, ids = await _task(repository_db, owner, 120, status="PAUSED", idle_s=0, deployment=kafka["topic_prefix"])
    counted.tasks.add(task_id)
    settings = GatewaySettings(_env_file=None, **kafka, redrive_batch_events=BATCH, redrive_announced_s=300)

    async def resume() -> list[str]:
        await lifecycle.pause(repository_db, task_id)
        assert await lifecycle.resume(repository_db, task_id)
        counted.announced.clear()
        claimed = await redrive.prepare_redrive(repository_db, settings, task_id)
        assert claimed is not None
        published = await redrive.publish_redrives(KafkaPublish(producer, settings), settings, [claimed])
        assert published == len(claimed.events) == len(counted.announced)
        return counted.announced

    assert sorted(await resume()) == ids  # never announced by a re-drive: all of them
    # Announced just now and still queued (no summarizer took them up): nothing is announced again.
    assert await resume() == []

    # Some grew old (their message may be lost); one a summarizer took up while the task was paused
    # (its claim drops it: the task is held), which the next resume must announce again.
    stale, dropped = ids[:10], ids[50]
    await repository_db.execute(
        "UPDATE chunks SET announced_at = now() - interval '301 seconds' WHERE id = ANY($1::text[])", stale
    )
    await lifecycle.pause(repository_db, task_id)
    claims = ChunkRepository(repository_db)
    assert (await claims.claim(dropped, "summarizer-1", 30.0)).outcome is Claim.UNAVAILABLE
    assert sorted(await resume()) == sorted([*stale, dropped])

    # A chunk taken up and handed back (a summarizer stopped mid-call) is announced again too.
    assert (await claims.claim(ids[60], "summarizer-1", 30.0)).outcome is Claim.TAKEN
    await claims.release(ids[60], "summarizer-1")
    assert await resume() == [ids[60]]
