"""The broker or the database goes away mid-task, and comes back: the services reconnect by themselves,
and the task completes with nothing lost and (the broker's outage) nothing paid twice.

Each test stops and starts a server of its own, started by the project's own script in a state dir of
its own on ports of its own (`scripts/kafka.sh` on the session broker's jars, `scripts/postgres.sh`): the
session's broker and database, which every other test uses meanwhile, never go away.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.fake_llm import FakeLLMServer, LedgerEntry, free_port
from tests.integration.conftest import SERVICES, Server, Stack, StackFactory, own_state_dir
from tests.integration.helpers import (
    calls,
    chunks_of,
    dlq_names,
    eventually,
    marked_text,
    new_marker,
    read_topics,
    submit,
    task_of,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

OUTAGE_S = 10.0  # how long the broker or the database stays down


@pytest.fixture
async def own_broker() -> AsyncIterator[Server]:
    # KAFKA_BOOTSTRAP_SERVERS (an external broker for the rest of the suite) would make `start` a no-op.
    env = {name: value for name, value in os.environ.items() if name != "KAFKA_BOOTSTRAP_SERVERS"}
    state = own_state_dir()
    session = Server("kafka.sh", env, {})
    port = free_port()
    env |= {
        "DOCSUM_STATE_DIR": str(state),
        # The session broker's jars: nothing is downloaded again.
        "DOCSUM_KAFKA_LIBS_DIR": os.environ.get("DOCSUM_KAFKA_LIBS_DIR") or await session.run("libs"),
        "DOCSUM_KAFKA_PORT": str(port),
        "DOCSUM_KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    broker = Server("kafka.sh", env, {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    try:
        await broker.run("start")
        yield broker
    finally:
        await broker.run("stop")
        shutil.rmtree(state, ignore_errors=True)


def pids(stack: Stack) -> dict[str, int]:
    return {name: process.pid for name, process in stack.processes.items()}


async def _outage_mid_task(make_stack: StackFactory, llm: FakeLLMServer, server: Server) -> list[LedgerEntry]:
    """A stack on `server` (its broker or its database), stopped while chunks are being summarized, kept
    down, started again: the services reconnect by themselves and the task completes with nothing lost.
    Returns the task's requests."""
    stack = make_stack(SERVICES, **server.settings)
    # Across the outage: a connection the pool lost is made again when next used.
    async with asyncpg.create_pool(stack.env["DATABASE_URL"], min_size=1, max_size=2) as db:
        return await _outage(stack, db, llm, server)


async def _outage(stack: Stack, db: asyncpg.Pool, llm: FakeLLMServer, server: Server) -> list[LedgerEntry]:
    marker = new_marker()
    text = marked_text(40_000, seed=31, marker=marker)  # MEDIUM: ~20 chunks
    before = pids(stack)
    latency = llm.llm.config()["latency_s"]
    llm.llm.configure(latency_s=0.2)
    try:
        async with stack.client() as client:
            task_id = await submit(client, [txt("outage.txt", text)])
        await eventually(
            lambda: len(calls(llm, marker, 200)) >= 2, timeout=90, message="the first chunk summaries", stack=stack
        )
        # Mid-task: the task is unfinished and chunks remain to be summarized as the server goes down.
        state = await db.fetchrow(
            "SELECT t.status, d.chunk_total, now() AS now,"
            " (SELECT count(*) FROM chunks c WHERE c.document_id = d.id AND c.status = 'COMPLETED') AS done"
            " FROM tasks t JOIN documents d ON d.task_id = t.id WHERE t.id = $1",
            task_id,
        )
        assert state["status"] == "PROCESSING" and state["done"] < state["chunk_total"], dict(state)
        await server.run("stop")
        try:
            await asyncio.sleep(OUTAGE_S)  # the outage itself, not a synchronization
        finally:
            await server.run("start")
        async with stack.client() as client:
            task = await wait_for_task(client, task_id, stack)
    finally:
        llm.llm.configure(latency_s=latency)

    assert task["status"] == "COMPLETED", task
    document = task["documents"][0]
    assert document["status"] == "COMPLETED" and document["summary"]
    assert document["chunks"]["done"] == document["chunks"]["total"] == state["chunk_total"] > 1
    # Nothing lost: every chunk stored with its summary, and no event of the task was dead-lettered.
    chunks = await chunks_of(db, task_id)
    assert len(chunks) == state["chunk_total"]
    assert all(c["status"] == "COMPLETED" and c["summary"] for c in chunks)
    assert await db.fetchval("SELECT updated_at > $2 FROM tasks WHERE id = $1", task_id, state["now"])
    dead = [r for r in await read_topics(stack.env, dlq_names(stack.env)) if task_of(r) == task_id]
    assert not dead, [(r.topic, dict(r.headers)) for r in dead]
    # Reconnected on their own: the very same processes, all alive (none crashed, none restarted).
    assert pids(stack) == before
    assert {name: p.poll() for name, p in stack.processes.items()} == dict.fromkeys(before)
    return calls(llm, marker)


async def test_broker_outage_mid_task(make_stack: StackFactory, llm: FakeLLMServer, own_broker: Server) -> None:
    requests = await _outage_mid_task(make_stack, llm, own_broker)
    # The database never went away, so every summary stored before a failed publish was found again.
    answered = Counter(e.prompt_sha256 for e in requests if e.status == 200)
    assert set(answered.values()) == {1}, "a summary was paid for twice"


async def test_database_outage_mid_task(make_stack: StackFactory, llm: FakeLLMServer, own_database: Server) -> None:
    # A summary answered while the database was down could not be stored, so it may be asked for again.
    await _outage_mid_task(make_stack, llm, own_database)
