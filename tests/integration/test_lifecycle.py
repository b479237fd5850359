"""Task lifecycle controls on the real broker and database: pause, resume, cancel, retry, expiry, reconcile.

The controls run on the in-process pipeline (what is tested is what a control does to a task, its rows
and its calls, not processes or the broker), expiry and the periodic reconcile on a merger of their own
in-process; a paused task's submission and a cancel amid a task's announcement are published on the
broker (the session's processes).

The stand-in LLM's ledger is shared by the whole session, so every test marks its documents with a
word of its own (every paragraph opens with it) and only looks at the requests whose prompt carries it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from docsum_shared.events import DocumentSubmitted
from tests.documents import english_prose
from tests.fake_llm import FakeLLMServer
from tests.inprocess import InProcessStack
from tests.integration.conftest import AnyStack, Stack, StackFactory
from tests.integration.helpers import (
    calls,
    chunk_calls,
    chunks_of,
    eventually,
    get_task,
    kafka_options,
    new_marker,
    paid_twice,
    submit,
    tagged,
    task_finished,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

DOCSUM_CLI = Path(sys.executable).parent / "docsum"
OBSERVE_S = 3.0  # how long a held task is watched for calls it must not make


# --- helpers -------------------------------------------------------------------------------------------


def _marked_text(marker: str, chars: int, seed: int) -> str:
    """English prose whose every paragraph opens with `marker` (and a number): every chunk's prompt carries it."""
    return tagged(english_prose(chars, seed=seed), marker, numbered=True)


async def _settle(db: asyncpg.Pool, llm: FakeLLMServer, task_id: str, marker: str, stack: AnyStack) -> float:
    """Wait until no chunk of the task is being summarized and its calls stopped coming; returns when."""
    seen = -1

    async def settled() -> bool:
        nonlocal seen
        busy = sum(c["status"] == "SUMMARIZING" for c in await chunks_of(db, task_id))
        count, seen = seen, len(calls(llm, marker))
        return busy == 0 and count == seen

    await eventually(settled, timeout=30, message=f"in-flight work of task {task_id} to finish", stack=stack)
    return time.monotonic()


async def _observe_until(since: float) -> None:
    """The rest of the observation window that started at `since` (watching, not synchronizing)."""
    left = OBSERVE_S - (time.monotonic() - since)
    if left > 0:
        await asyncio.sleep(left)


async def _chunk_counts(db: asyncpg.Pool, task_id: str) -> dict[str, int]:
    return dict(Counter(c["status"] for c in await chunks_of(db, task_id)))


async def _insert_task(
    db: asyncpg.Pool,
    text: str,
    *,
    deployment: str,
    owner: str = "alice",
    task_status: str = "PROCESSING",
    doc_status: str = "PENDING",
    idle_s: float = 0.0,
    filename: str = "stuck.txt",
) -> tuple[str, str]:
    """A task of `deployment` (the topic prefix of the stack that is to take its work) with one text
    document, written straight into Postgres: no event announces it."""
    task_id, doc_id = str(uuid.uuid4()), str(uuid.uuid4())
    data = text.encode()
    sha = hashlib.sha256(data).hexdigest()
    chunking = doc_status == "CHUNKING"
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO blobs (sha256, data, size_bytes) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
            sha,
            data,
            len(data),
        )
        await conn.execute(
            "INSERT INTO tasks (id, owner, title, status, last_active_at, deployment)"
            " VALUES ($1, $2, 'stuck', $3, now() - make_interval(secs => $4), $5)",
            task_id,
            owner,
            task_status,
            idle_s,
            deployment,
        )
        await conn.execute(
            "INSERT INTO documents (id, task_id, position, filename, content_type, blob_sha256, size_bytes, status,"
            " text_chars, size_level) VALUES ($1, $2, 0, $8, 'text/plain', $3, $4, $5, $6, $7)",
            doc_id,
            task_id,
            sha,
            len(data),
            doc_status,
            len(text) if chunking else None,
            "SMALL" if chunking else None,
            filename,
        )
        if chunking:
            await conn.execute("INSERT INTO document_texts (document_id, text) VALUES ($1, $2)", doc_id, text)
    return task_id, doc_id


def _deployment(stack: AnyStack) -> str:
    """The deployment a stack's tasks belong to: its topic prefix."""
    return stack.env["DOCSUM_TOPIC_PREFIX"]


async def _add_finished_document(db: asyncpg.Pool, task_id: str, filename: str) -> str:
    """A second document of the task, summarized already."""
    doc_id, data = str(uuid.uuid4()), f"{filename} was summarized earlier.".encode()
    sha = hashlib.sha256(data).hexdigest()
    await db.execute(
        "INSERT INTO blobs (sha256, data, size_bytes) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
        sha,
        data,
        len(data),
    )
    await db.execute(
        "INSERT INTO documents (id, task_id, position, filename, content_type, blob_sha256, size_bytes, status,"
        " summary, summary_model) VALUES ($1, $2, 1, $3, 'text/plain', $4, $5, 'COMPLETED', 'Done earlier.', 'm')",
        doc_id,
        task_id,
        filename,
        sha,
        len(data),
    )
    return doc_id


async def _announce(stack: Stack, db: asyncpg.Pool, task_id: str, doc_id: str) -> None:
    """Publish the document's DocumentSubmitted on the stack's topic, as the gateway does."""
    row = await db.fetchrow("SELECT filename, blob_sha256, size_bytes FROM documents WHERE id = $1", doc_id)
    event = DocumentSubmitted(
        task_id=task_id,
        document_id=doc_id,
        owner="alice",
        filename=row["filename"],
        content_type="text/plain",
        blob_sha256=row["blob_sha256"],
        size_bytes=row["size_bytes"],
    )
    producer = AIOKafkaProducer(**kafka_options(stack.env), acks="all")
    await producer.start()
    try:
        topic = f"{stack.env['DOCSUM_TOPIC_PREFIX']}document-submitted"
        await producer.send_and_wait(topic, event.to_bytes(), key=event.key().encode())
    finally:
        await producer.stop()


async def _cli(stack: AnyStack, *args: str, owner: str = "alice") -> tuple[int, str, str]:
    env = {**os.environ, "DOCSUM_GATEWAY_URL": stack.gateway_url, "DOCSUM_API_KEY": stack.keys[owner]}
    process = await asyncio.create_subprocess_exec(
        str(DOCSUM_CLI), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def slow_llm(llm: FakeLLMServer) -> Iterator[FakeLLMServer]:
    """Answers take 0.2 s, so a task of ~30 chunks is still running when a control reaches it."""
    before = llm.llm.config()["latency_s"]
    llm.llm.configure(latency_s=0.2)
    yield llm
    llm.llm.configure(latency_s=before)


# --- pause and resume -------------------------------------------------------------------------------------


async def test_pause_holds_the_task_and_resume_finishes_it_without_repeats(
    pipeline: InProcessStack, db: asyncpg.Pool, slow_llm: FakeLLMServer
) -> None:
    stack, llm, marker = pipeline, slow_llm, new_marker()
    files = [txt("paused.txt", _marked_text(marker, 54_000, seed=31))]
    async with stack.client() as alice:
        task_id = await submit(alice, files)

        async def some_chunks_answered() -> bool:
            return len(chunk_calls(llm, marker)) >= 2

        await eventually(some_chunks_answered, timeout=60, message="the first chunk summaries", stack=stack)
        paused = await alice.post(f"/v1/tasks/{task_id}/pause")
        assert paused.status_code == 200, paused.text
        assert paused.json()["status"] == "PAUSED"
        assert (await alice.post(f"/v1/tasks/{task_id}/pause")).status_code == 409

        # Work in flight finishes and is stored; then nothing more starts for the task.
        settled_at = await _settle(db, llm, task_id, marker, stack)
        calls_at_pause = len(calls(llm, marker))
        counts = await _chunk_counts(db, task_id)
        total = sum(counts.values())
        done = counts.get("COMPLETED", 0)
        assert total >= 25, counts
        assert 2 <= done < total, counts
        assert done == len(chunk_calls(llm, marker)), "every answered call's summary is stored"

        # Other tasks are not held up by the paused one.
        other_marker = new_marker()
        other_id = await submit(alice, [txt("other.txt", _marked_text(other_marker, 1_500, seed=32))])
        other = await wait_for_task(alice, other_id, stack, timeout=60)
        assert other["status"] == "COMPLETED"
        assert len(chunk_calls(llm, other_marker)) == 1

        await _observe_until(settled_at)
        assert len(calls(llm, marker)) == calls_at_pause, "an LLM call started for a paused task"
        held = await get_task(alice, task_id)
        assert held["status"] == "PAUSED"
        assert held["documents"][0]["status"] == "SUMMARIZING"
        assert await _chunk_counts(db, task_id) == counts

        # Resume re-drives exactly the unfinished chunks; finished ones are never sent again.
        resumed = await alice.post(f"/v1/tasks/{task_id}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["status"] == "PROCESSING"
        assert resumed.json()["redriven_events"] == total - done
        task = await wait_for_task(alice, task_id, stack, timeout=120)

    assert task["status"] == "COMPLETED", task
    assert task["summary"] and task["documents"][0]["status"] == "COMPLETED"
    assert task["documents"][0]["chunks"] == {"done": total, "failed": 0, "total": total}
    assert paid_twice(calls(llm, marker)) == 0
    assert len(chunk_calls(llm, marker)) == total
    assert task["recovery"]["redrives"] >= 1
    assert task["recovery"]["attempts"] == total


async def test_paused_task_is_not_parsed(stack: Stack, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    """The parser leaves a paused task's document PENDING when its submission arrives; resume re-drives it."""
    from tests.integration.replay import wait_until_consumed

    marker = new_marker()
    task_id, doc_id = await _insert_task(
        db, _marked_text(marker, 1_200, seed=33), task_status="PAUSED", deployment=_deployment(stack)
    )
    await _announce(stack, db, task_id, doc_id)
    await wait_until_consumed(stack.env)

    assert await db.fetchval("SELECT status FROM documents WHERE id = $1", doc_id) == "PENDING"
    assert await db.fetchval("SELECT count(*) FROM document_texts WHERE document_id = $1", doc_id) == 0
    assert calls(llm, marker) == []

    async with stack.client() as alice:
        resumed = await alice.post(f"/v1/tasks/{task_id}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["redriven_events"] == 1
        task = await wait_for_task(alice, task_id, stack, timeout=60)
    assert task["status"] == "COMPLETED"
    assert len(chunk_calls(llm, marker)) == 1


# --- cancel and retry -----------------------------------------------------------------------------------


async def test_cancel_is_terminal_and_owned(stack: Stack, db: asyncpg.Pool, slow_llm: FakeLLMServer) -> None:
    llm, marker = slow_llm, new_marker()
    # A task with one document summarized already and a large one announced now.
    task_id, large_id = await _insert_task(
        db, _marked_text(marker, 54_000, seed=42), filename="large.txt", deployment=_deployment(stack)
    )
    await _add_finished_document(db, task_id, "small.txt")
    await _announce(stack, db, task_id, large_id)
    async with stack.client("alice") as alice, stack.client("bob") as bob:

        async def some_chunks_answered() -> bool:
            return len(chunk_calls(llm, marker)) >= 2

        await eventually(some_chunks_answered, timeout=60, message="the first chunk summaries", stack=stack)
        cancelled = await alice.post(f"/v1/tasks/{task_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "CANCELLED"
        published, *again = await task_finished(stack.env, task_id, stack)  # whoever ends a task, it is published
        assert published["status"] == "CANCELLED" and all(other == published for other in again)
        assert {d["filename"]: d["status"] for d in published["documents"]}["small.txt"] == "COMPLETED"

        settled_at = await _settle(db, llm, task_id, marker, stack)
        calls_at_cancel = len(calls(llm, marker))
        counts = await _chunk_counts(db, task_id)
        assert counts.get("PENDING", 0) > 0, counts  # it really was stopped mid-way

        # Terminal: no control moves it again.
        for action in ("resume", "retry", "pause", "cancel"):
            response = await alice.post(f"/v1/tasks/{task_id}/{action}")
            assert response.status_code == 409, (action, response.text)
        # Another owner cannot even see it.
        assert (await bob.get(f"/v1/tasks/{task_id}")).status_code == 404
        assert (await bob.get(f"/v1/tasks/{task_id}/failures")).status_code == 404
        for action in ("pause", "resume", "cancel", "retry"):
            response = await bob.post(f"/v1/tasks/{task_id}/{action}")
            assert response.status_code == 404, (action, response.text)

        await _observe_until(settled_at)
        assert len(calls(llm, marker)) == calls_at_cancel, "an LLM call started for a cancelled task"
        assert await _chunk_counts(db, task_id) == counts
        task = await get_task(alice, task_id)

    assert task["status"] == "CANCELLED"
    docs = {d["filename"]: d["status"] for d in task["documents"]}
    assert docs == {"small.txt": "COMPLETED", "large.txt": "CANCELLED"}
    assert task["summary"] is None


async def test_retry_with_nothing_failed_conflicts(pipeline: InProcessStack) -> None:
    stack = pipeline
    files = [txt("fine.txt", _marked_text(new_marker(), 800, seed=51))]
    async with stack.client() as alice, stack.client("bob") as bob:
        task_id = await submit(alice, files)
        task = await wait_for_task(alice, task_id, stack, timeout=60)
        assert task["status"] == "COMPLETED"
        response = await alice.post(f"/v1/tasks/{task_id}/retry")
        assert response.status_code == 409, response.text
        assert "COMPLETED" in response.json()["detail"]
        assert (await bob.post(f"/v1/tasks/{task_id}/retry")).status_code == 404
        assert (await get_task(alice, task_id))["status"] == "COMPLETED"


# --- deployments sharing the database ---------------------------------------------------------------------


async def test_a_task_of_another_deployment_is_no_task_through_its_gateway(
    pipeline: InProcessStack, make_stack: StackFactory, db: asyncpg.Pool, slow_llm: FakeLLMServer
) -> None:
    """Two deployments on one database, alice with a key in each: her paused task of the first is, through
    the second's gateway, no task at all. Every route answers 404 (the WebSocket is refused), exactly as
    for another owner's task; the task does not move and nothing of it is published on the second's
    topics (a resume there would re-drive it onto them). Through its own gateway it is hers."""
    other = make_stack.in_process(services=("gateway",))
    llm, marker = slow_llm, new_marker()
    async with pipeline.client() as alice:
        task_id = await submit(alice, [txt("theirs.txt", _marked_text(marker, 54_000, seed=91))])

        async def some_chunks_answered() -> bool:
            return len(chunk_calls(llm, marker)) >= 2

        await eventually(some_chunks_answered, timeout=60, message="the first chunk summaries", stack=pipeline)
        assert (await alice.post(f"/v1/tasks/{task_id}/pause")).status_code == 200
        await _settle(db, llm, task_id, marker, pipeline)
        [document] = (await get_task(alice, task_id))["documents"]
        text = f"/v1/tasks/{task_id}/documents/{document['document_id']}/text?start=0&end=20"
        assert (await alice.get(text)).status_code == 200  # the text is there to be quoted
    before = await db.fetchrow("SELECT status, updated_at, redrives FROM tasks WHERE id = $1", task_id)
    counts = await _chunk_counts(db, task_id)

    async with other.client() as alice_there:
        answers = {
            "view": await alice_there.get(f"/v1/tasks/{task_id}"),
            "failures": await alice_there.get(f"/v1/tasks/{task_id}/failures"),
            "text": await alice_there.get(text),
            "ticket": await alice_there.post(f"/v1/tasks/{task_id}/ticket"),
        }
        sse = alice_there.stream("GET", f"/v1/tasks/{task_id}/events", headers={"Accept": "text/event-stream"})
        async with sse as answers["sse"]:  # the head first: a stream that opened would not end
            if answers["sse"].status_code == 404:
                await answers["sse"].aread()
        for action in ("pause", "resume", "cancel", "retry"):
            answers[action] = await alice_there.post(f"/v1/tasks/{task_id}/{action}")
        assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 404)
        assert all(a.json()["detail"] == f"no task {task_id}" for a in answers.values())
        listed = await alice_there.get("/v1/tasks")
        assert listed.status_code == 200 and task_id not in {t["task_id"] for t in listed.json()}
        reconciled = await alice_there.post("/v1/reconcile")
        assert reconciled.status_code == 200 and task_id not in reconciled.json()["tasks"]
    ws_url = other.gateway_url.replace("http://", "ws://") + f"/v1/tasks/{task_id}/events"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(
            ws_url, open_timeout=10, additional_headers={"Authorization": f"Bearer {other.keys['alice']}"}
        ):
            pass
    assert refused.value.response.status_code == 403

    assert await db.fetchrow("SELECT status, updated_at, redrives FROM tasks WHERE id = $1", task_id) == before
    assert await _chunk_counts(db, task_id) == counts
    assert other.bus is not None
    assert [r.topic for r in other.bus.kept or [] if task_id.encode() in (r.value or b"")] == []

    async with pipeline.client() as alice:
        resumed = await alice.post(f"/v1/tasks/{task_id}/resume")
        assert resumed.status_code == 200, resumed.text
        task = await wait_for_task(alice, task_id, pipeline, timeout=120)
    assert task["status"] == "COMPLETED" and task["summary"], task
    assert paid_twice(calls(llm, marker)) == 0


# --- expiry -----------------------------------------------------------------------------------------------


async def test_paused_task_expires_and_is_never_resumed(
    make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer
) -> None:
    marker = new_marker()
    # A task no event will move (nothing announces it), paused through the API.
    # A deployment of its own, whose maintenance is a merger with a 3 s TTL: it expires its own tasks only;
    # its gateway is the one that reaches them. In-process: what is tested is what the TTL does to the
    # task's rows, not how the merger is reached.
    prefix = f"test-{uuid.uuid4().hex[:8]}."
    task_id, _ = await _insert_task(db, _marked_text(marker, 800, seed=61), deployment=prefix)
    short = make_stack.in_process(
        ("gateway", "merger"), DOCSUM_TOPIC_PREFIX=prefix, DOCSUM_TASK_TTL_S="3", DOCSUM_MAINTENANCE_INTERVAL_S="1"
    )
    try:
        async with short.client() as alice:
            paused = await alice.post(f"/v1/tasks/{task_id}/pause")
            assert paused.status_code == 200 and paused.json()["status"] == "PAUSED", paused.text

            async def expired() -> bool:
                return (await get_task(alice, task_id))["status"] == "EXPIRED"

            await eventually(expired, timeout=90, message=f"task {task_id} to expire", stack=short)
            for action in ("resume", "pause", "cancel", "retry"):
                response = await alice.post(f"/v1/tasks/{task_id}/{action}")
                assert response.status_code == 409, (action, response.text)
            task = await get_task(alice, task_id)
    finally:
        short.stop_all()
    assert task["status"] == "EXPIRED" and task["summary"] is None
    assert task["documents"][0]["status"] != "COMPLETED"
    assert calls(llm, marker) == []


# --- reconcile --------------------------------------------------------------------------------------------


async def test_reconcile_redrives_a_task_no_event_moves(
    pipeline: InProcessStack, db: asyncpg.Pool, llm: FakeLLMServer
) -> None:
    stack, marker = pipeline, new_marker()
    task_id, _ = await _insert_task(db, _marked_text(marker, 1_200, seed=71), deployment=_deployment(stack))
    async with stack.client("alice") as alice, stack.client("bob") as bob:
        theirs = await bob.post("/v1/reconcile")
        assert theirs.status_code == 200 and task_id not in theirs.json()["tasks"]
        assert await db.fetchval("SELECT status FROM documents WHERE task_id = $1", task_id) == "PENDING"

        response = await alice.post("/v1/reconcile")
        assert response.status_code == 200, response.text
        assert task_id in response.json()["tasks"]
        assert response.json()["redriven_events"] >= 1
        task = await wait_for_task(alice, task_id, stack, timeout=60)
    assert task["status"] == "COMPLETED", task
    assert task["documents"][0]["status"] == "COMPLETED" and task["summary"]
    assert task["recovery"]["redrives"] >= 1
    assert len(chunk_calls(llm, marker)) == 1 and paid_twice(calls(llm, marker)) == 0


async def test_cli_reconcile(pipeline: InProcessStack, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    stack, marker = pipeline, new_marker()
    task_id, _ = await _insert_task(db, _marked_text(marker, 1_200, seed=72), deployment=_deployment(stack))
    code, out, err = await _cli(stack, "reconcile")
    assert code == 0, err
    result = json.loads(out)
    assert task_id in result["tasks"] and result["redriven_events"] >= 1
    async with stack.client() as alice:
        task = await wait_for_task(alice, task_id, stack, timeout=60)
    assert task["status"] == "COMPLETED"
    assert len(chunk_calls(llm, marker)) == 1


async def test_cli_pause_resume_cancel(pipeline: InProcessStack, db: asyncpg.Pool) -> None:
    stack = pipeline
    first, _ = await _insert_task(db, _marked_text(new_marker(), 1_000, seed=73), deployment=_deployment(stack))
    second, _ = await _insert_task(db, _marked_text(new_marker(), 1_000, seed=74), deployment=_deployment(stack))

    # Independent calls run side by side: each CLI run is a fresh interpreter.
    (code, out, err), (code2, out2, err2) = await asyncio.gather(
        _cli(stack, "pause", first), _cli(stack, "cancel", second)
    )
    assert code == 0 and json.loads(out)["status"] == "PAUSED", err
    assert code2 == 0 and json.loads(out2)["status"] == "CANCELLED", err2

    refused = await asyncio.gather(
        _cli(stack, "pause", first),  # already paused
        _cli(stack, "pause", first, owner="bob"),  # not bob's
        _cli(stack, "resume", second),  # cancelled for good
    )
    # The status as the CLI says it ("gateway answered 409: ..."): a task id may hold "404" itself.
    assert [(code, "answered 409" in err, "answered 404" in err) for code, _, err in refused] == [
        (2, True, False),
        (2, False, True),
        (2, True, False),
    ], refused

    code, out, err = await _cli(stack, "resume", first)
    assert code == 0, err
    assert json.loads(out)["status"] == "PROCESSING" and json.loads(out)["redriven_events"] == 1
    async with stack.client() as alice:
        assert (await wait_for_task(alice, first, stack, timeout=60))["status"] == "COMPLETED"
        assert (await get_task(alice, second))["status"] == "CANCELLED"
    assert await db.fetchval("SELECT status FROM documents WHERE task_id = $1", second) == "CANCELLED"


async def test_periodic_reconcile_finishes_a_stuck_task(
    make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer
) -> None:
    """A document left in CHUNKING with no event: the maintenance loop alone re-drives it (no API call)."""
    marker = new_marker()
    # Idle longer than this stack's 2 s: its deployment's maintenance loop re-drives it.
    prefix = f"test-{uuid.uuid4().hex[:8]}."  # the deployment whose maintenance is to re-drive it
    task_id, doc_id = await _insert_task(
        db, _marked_text(marker, 1_200, seed=75), deployment=prefix, doc_status="CHUNKING", idle_s=10
    )
    # In-process: the re-drive and the work it starts go over the bus of this stack alone.
    quick = make_stack.in_process(
        ("chunker", "summarizer", "merger"),
        DOCSUM_TOPIC_PREFIX=prefix,
        DOCSUM_RECONCILE_IDLE_S="2",
        DOCSUM_MAINTENANCE_INTERVAL_S="1",
    )
    try:

        async def completed() -> bool:
            return await db.fetchval("SELECT status FROM tasks WHERE id = $1", task_id) == "COMPLETED"

        await eventually(completed, timeout=90, message=f"task {task_id} to be reconciled and completed", stack=quick)
    finally:
        quick.stop_all()
    row = await db.fetchrow("SELECT summary, redrives FROM tasks WHERE id = $1", task_id)
    assert row["summary"] and row["redrives"] >= 1
    assert await db.fetchval("SELECT status FROM documents WHERE id = $1", doc_id) == "COMPLETED"
    assert len(chunk_calls(llm, marker)) == 1 and paid_twice(calls(llm, marker)) == 0
