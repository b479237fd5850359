"""A storm of re-drives by one owner: twenty concurrent `POST /v1/reconcile` over a backlog of ~3,000
chunks re-publish nothing for leased or recently active work and at most one backlog's worth in all.

The stack here is a gateway alone, so nothing consumes `chunk-created`: every event on its topic was
published by a re-drive, and the topic's messages are the count that cannot lie. The gateway's
`/healthz` latency during the storm is measured and printed (`-s`), never asserted. The gateway runs
in-process (what is tested is what a re-drive publishes, not a process or the broker): its topic is the
bus's.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import secrets
import time
import uuid
from collections import Counter

import asyncpg
import httpx
import pytest

from tests.integration.conftest import AnyStack, StackFactory
from tests.integration.helpers import eventually

TASKS, CHUNKS_PER_TASK, LEASED_PER_TASK = 5, 600, 60  # a backlog of 3,000 chunks, 300 of them leased
STORM = 20
PROBES = 4  # /healthz clients probing side by side during the storms
# Older than the stack's DOCSUM_REDRIVE_IDLE_S below (another stack's merger sharing the database leaves
# them alone: they are of this stack's deployment).
IDLE_S, REDRIVE_IDLE_S = 20.0, 10.0


async def _backlog(db: asyncpg.Pool, owner: str, deployment: str) -> tuple[list[str], set[str], set[str], str]:
    """Tasks of `deployment` idle for IDLE_S, each with one SUMMARIZING document of PENDING chunks, some of them leased
    (a summarizer is answering them), and one task that was active a moment ago. Returns the idle tasks,
    the ids of their unleased and leased chunks, and the active task's id."""
    data = b"backlog"
    sha = hashlib.sha256(data).hexdigest()
    tasks: list[str] = []
    free: set[str] = set()
    leased: set[str] = set()
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO blobs (sha256, data, size_bytes) VALUES ($1, $2, 7) ON CONFLICT (sha256) DO NOTHING", sha, data
        )
        for n in range(TASKS + 1):
            task_id, doc_id = str(uuid.uuid4()), str(uuid.uuid4())
            idle_s = IDLE_S if n < TASKS else 0.0  # the last one: active now, nothing of it is re-driven
            await conn.execute(
                "INSERT INTO tasks (id, owner, title, status, last_active_at, deployment)"
                " VALUES ($1, $2, 'backlog', 'PROCESSING', now() - make_interval(secs => $3), $4)",
                task_id, owner, idle_s, deployment,
            )  # fmt: skip
            await conn.execute(
                "INSERT INTO documents (id, task_id, filename, content_type, blob_sha256, size_bytes, status,"
                " text_chars, size_level, chunk_total, updated_at)"
                " VALUES ($1, $2, 'big.txt', 'text/plain', $3, 7, 'SUMMARIZING', 1000000, 'LARGE', $4,"
                " now() - make_interval(secs => $5))",
                doc_id, task_id, sha, CHUNKS_PER_TASK, idle_s,
            )  # fmt: skip
            rows = []
            for i in range(CHUNKS_PER_TASK):
                chunk_id = f"{doc_id}:{i:05d}"
                is_leased = i < LEASED_PER_TASK
                rows.append((chunk_id, doc_id, i, "SUMMARIZING" if is_leased else "PENDING", is_leased))
                if n < TASKS:
                    (leased if is_leased else free).add(chunk_id)
            await conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status,"
                " lease_owner, lease_expires_at, updated_at)"
                " VALUES ($1, $2, $3, 0, 1, 'x', $4, CASE WHEN $5 THEN 'summarizer-elsewhere' END,"
                " CASE WHEN $5 THEN now() + interval '1 hour' END, now() - interval '1 minute')",
                rows,
            )
            if n < TASKS:
                tasks.append(task_id)
            else:
                active = task_id
    return tasks, free, leased, active


async def _healthz_latencies(url: str, stop: asyncio.Event) -> list[float]:
    """/healthz, one request after another, until `stop`: each one's latency in seconds."""
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while not stop.is_set():
            started = time.perf_counter()
            await client.get("/healthz")
            latencies.append(time.perf_counter() - started)
    return latencies


async def _healthz_sample(url: str, n: int) -> list[float]:
    """`n` /healthz requests, one after another: each one's latency in seconds."""
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for _ in range(n):
            started = time.perf_counter()
            await client.get("/healthz")
            latencies.append(time.perf_counter() - started)
    return latencies


def _quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def _chunk_topic(stack: AnyStack) -> str:
    return f"{stack.env['DOCSUM_TOPIC_PREFIX']}chunk-created"


async def _published(stack: AnyStack) -> list[str]:
    """Every chunk id on the stack's chunk-created topic."""
    return [(record.key or b"").decode() for record in await stack.read_topics([_chunk_topic(stack)])]


async def _cancel(db: asyncpg.Pool, task_ids: list[str]) -> None:
    """The backlog is for this test alone: no merger sharing the database re-drives it later."""
    await db.execute("UPDATE tasks SET status = 'CANCELLED' WHERE id = ANY($1::text[])", task_ids)


@pytest.mark.parametrize(
    "rate",
    [
        pytest.param("6", id="default-rate"),
        # Without a rate, one owner's re-drives still run one at a time and never add up.
        pytest.param("0", id="no-rate"),
    ],
)
async def test_reconcile_storm_publishes_one_backlog_at_most(
    make_stack: StackFactory, db: asyncpg.Pool, rate: str
) -> None:
    # An owner of its own: a re-drive takes every idle task of its owner, and other tests leave tasks of
    # theirs unfinished on purpose (a batch still running while a test looks).
    owner, key = f"storm-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(24)
    stack = make_stack.in_process(
        services=("gateway",),
        DOCSUM_REDRIVE_IDLE_S=str(REDRIVE_IDLE_S),
        DOCSUM_REDRIVES_PER_MINUTE=rate,
        DOCSUM_API_KEYS=f"{owner}={key}",
    )
    stack.keys[owner] = key
    tasks, free, leased, active = await _backlog(db, owner, stack.env["DOCSUM_TOPIC_PREFIX"])
    try:
        quiet = await _healthz_sample(stack.gateway_url, 100)  # the same probe with no storm, for comparison
        stop = asyncio.Event()
        probes = [asyncio.create_task(_healthz_latencies(stack.gateway_url, stop)) for _ in range(PROBES)]
        async with stack.client(owner) as client:
            # A storm, and when it has been published, another: nothing of the second adds up either.
            first, first_s = await _storm(stack, db, client, owner)
            second, _ = await _storm(stack, db, client, owner)
        stop.set()
        latencies = [latency for probe in probes for latency in await probe]
        published = await _published(stack)
        answers = first + second
        statuses = Counter(a.status_code for a in answers)
        print(
            f"\nreconcile storm ({owner}, DOCSUM_REDRIVES_PER_MINUTE={rate}): the first {STORM} requests answered"
            f" in {first_s:.2f} s; two storms {dict(statuses)}; {len(published)} chunk-created re-published for"
            f" a backlog of {len(free)} idle unleased chunks; /healthz p50 {_quantile(latencies, 0.5) * 1000:.1f} ms,"
            f" p99 {_quantile(latencies, 0.99) * 1000:.1f} ms"
            f" (without a storm: p50 {_quantile(quiet, 0.5) * 1000:.1f} ms, p99 {_quantile(quiet, 0.99) * 1000:.1f} ms)"
            f" (max {max(latencies, default=0) * 1000:.1f} ms, {len(latencies)} probes)"
        )

        assert set(statuses) <= {200, 429}, [a.text for a in answers if a.status_code not in (200, 429)]
        assert Counter(a.status_code for a in first)[200] >= 1
        for refused in (a for a in answers if a.status_code == 429):
            assert int(refused.headers["Retry-After"]) >= 1, refused.headers
        assert not leased & set(published), "a chunk under a live lease was re-published"
        assert set(published) <= free, "something other than the idle backlog (an active task's?) was re-published"
        assert len(published) <= len(free), f"{len(published)} events for a backlog of {len(free)}"
        assert set(published) == free, "the idle, unleased backlog is re-driven"
        reported = sum(a.json()["redriven_events"] for a in answers if a.status_code == 200)
        assert reported == len(published), "redriven_events says what the re-drives publish"
    finally:
        await _cancel(db, [*tasks, active])


async def _storm(
    stack: AnyStack, db: asyncpg.Pool, client: httpx.AsyncClient, owner: str
) -> tuple[list[httpx.Response], float]:
    """STORM concurrent reconciles, answered and then published; the answers and how long they took."""
    started = time.perf_counter()
    answers = await asyncio.gather(*(client.post("/v1/reconcile") for _ in range(STORM)))
    answered_s = time.perf_counter() - started

    async def published() -> bool:
        # Done once the owner's re-drive has let go of its gate and the topic has stopped growing.
        events = len(await _published(stack))
        running = await db.fetchval(
            "SELECT count(*) FROM redrive_gates WHERE owner = $1 AND running_until > now()", owner
        )
        return running == 0 and events == len(await _published(stack))

    await eventually(published, timeout=300, message="the re-drives to finish publishing", stack=stack)
    return answers, answered_s
