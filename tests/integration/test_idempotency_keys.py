"""Idempotency-Key on POST /v1/tasks, against the real gateway and PostgreSQL: a client whose answers are
lost retries and gets one task per submission; a key reused for another request, or sent again while the
first is being stored, is refused; keys are each owner's own; a gateway killed with a keyed submission in
flight, or after storing it, leaves a key that any replica answers right."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from docsum_cli.client import Gateway
from docsum_gateway.repository import KEY_LOCK_CLASS
from docsum_shared.blobs import lock_blobs
from docsum_shared.db import _migrations
from tests.fake_llm import free_port
from tests.inprocess import InProcessStack
from tests.integration.conftest import StackFactory, create_database, drop_database
from tests.integration.helpers import eventually, new_marker, txt
from tests.lossy_proxy import LossyProxy

pytestmark = pytest.mark.integration

SUBMISSIONS = 200


def _key() -> str:
    return f'"{uuid.uuid4()}"'


async def _tasks_titled(db: asyncpg.Pool, prefix: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT id, owner, title FROM tasks WHERE title LIKE $1 || '%' ORDER BY title", prefix)


async def test_a_client_whose_answers_are_lost_makes_one_task_per_submission(
    make_stack: StackFactory, db: asyncpg.Pool, tmp_path: Path
) -> None:
    """The CLI's client submits 200 times through a proxy that loses the first answer to every key: each
    submission is sent again with its key, and gets the answer the lost one had."""
    stack = make_stack.in_process(services=("gateway",))
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    seen: set[str] = set()

    def first_try(request: dict[str, str]) -> bool:
        key = request.get("idempotency-key", "")
        first = key not in seen or not key
        seen.add(key)
        return first

    marker = new_marker()
    document = tmp_path / "note.txt"
    document.write_text(f"{marker} The tide came in at dawn, and the boats went out with it.")
    async with LossyProxy(port, drop=first_try) as proxy:
        gateway = Gateway(proxy.url, key=stack.keys["alice"])
        gateway._http = httpx.Client(  # one request per connection, as the proxy reads them
            base_url=proxy.url,
            headers={"Authorization": f"Bearer {stack.keys['alice']}"},
            timeout=60,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        answers = [await asyncio.to_thread(gateway.submit, [document], f"{marker}-{i:03d}") for i in range(SUBMISSIONS)]

    stored = await _tasks_titled(db, marker)
    assert len(stored) == SUBMISSIONS  # exactly one task per submission, none for a retry
    assert [r["title"] for r in stored] == [f"{marker}-{i:03d}" for i in range(SUBMISSIONS)]
    assert {a["task_id"] for a in answers} == {r["id"] for r in stored}
    lost = [e for e in proxy.exchanges if e.dropped]
    replayed = [e for e in proxy.exchanges if not e.dropped]
    assert len(lost) == len(replayed) == SUBMISSIONS
    for first, again, answer in zip(lost, replayed, answers, strict=True):
        assert first.head["idempotency-key"] == again.head["idempotency-key"]  # the retry kept its key
        assert (first.status, again.status) == (201, 201)
        assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
        assert again.body == first.body and again.json() == answer  # the first answer, byte for byte
    assert len({e.head["idempotency-key"] for e in lost}) == SUBMISSIONS  # a fresh key per submission


async def test_a_key_sent_with_another_request_is_refused(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    stack = make_stack.in_process(services=("gateway",))
    marker, key = new_marker(), _key()
    async with stack.client() as client:
        files = [txt("a.txt", f"{marker} First words.")]
        first = await client.post("/v1/tasks", files=files, data={"title": marker}, headers={"Idempotency-Key": key})
        assert first.status_code == 201, first.text
        refusals = [
            await client.post("/v1/tasks", files=[txt("a.txt", f"{marker} Other words.")], data={"title": marker},
                              headers={"Idempotency-Key": key}),  # other bytes
            await client.post("/v1/tasks", files=files, data={"title": f"{marker} again"},
                              headers={"Idempotency-Key": key}),  # another field
            await client.post("/v1/tasks", files=files, data={"title": marker, "length": "brief"},
                              headers={"Idempotency-Key": key}),  # a field more
        ]  # fmt: skip
        for refused in refusals:
            assert refused.status_code == 422, refused.text
            (item,) = refused.json()["detail"]
            assert item["loc"] == ["header", "Idempotency-Key"] and item["type"] == "idempotency_key_reused"
            assert "different request" in item["msg"]
        again = await client.post("/v1/tasks", files=files, data={"title": marker}, headers={"Idempotency-Key": key})
        assert again.status_code == 201 and again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
        malformed = await client.post("/v1/tasks", files=files, headers={"Idempotency-Key": '"no end'})
        assert malformed.status_code == 422 and "closing quote" in malformed.text  # said, not a pattern
    assert len(await _tasks_titled(db, marker)) == 1


async def test_a_duplicate_sent_while_the_first_is_stored_gets_409(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    """The file's bytes are held by a writer of the same hash (docsum_shared.blobs' lock, as a concurrent
    upload of those bytes holds it), so whichever of two identical requests takes the key first waits in
    the middle of storing its task: the other is told to come back, and then gets the first one's answer."""
    stack = make_stack.in_process(services=("gateway",))
    marker, key = new_marker(), _key()
    content = f"{marker} Held in the middle of being stored.".encode()
    files = [txt("held.txt", content)]
    async with stack.client() as client, db.acquire() as holder:
        held = holder.transaction()
        await held.start()
        await lock_blobs(holder, [hashlib.sha256(content).hexdigest()])

        def send() -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(
                client.post("/v1/tasks", files=files, data={"title": marker}, headers={"Idempotency-Key": key})
            )

        both = {send(), send()}
        try:
            done, pending = await asyncio.wait(both, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1, "neither request answered while the other was being stored"
            (refused,) = [t.result() for t in done]
            assert refused.status_code == 409, refused.text
            assert refused.headers["Retry-After"] == "2"
            assert "being stored now" in refused.json()["detail"]
        finally:
            await held.rollback()
        (stored,) = [await t for t in pending]
        assert stored.status_code == 201, stored.text
        again = await client.post("/v1/tasks", files=files, data={"title": marker}, headers={"Idempotency-Key": key})
        assert again.status_code == 201 and again.json() == stored.json()
        assert again.headers["Idempotent-Replayed"] == "true"
    assert len(await _tasks_titled(db, marker)) == 1


async def test_keys_are_each_owners_own(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    stack = make_stack.in_process(services=("gateway",))
    marker, key = new_marker(), _key()
    answers = {}
    for owner in ("alice", "bob"):
        async with stack.client(owner) as client:
            answer = await client.post(
                "/v1/tasks", files=[txt("same.txt", f"{marker} Same bytes.")], data={"title": marker},
                headers={"Idempotency-Key": key},
            )  # fmt: skip
            assert answer.status_code == 201, answer.text
            assert "Idempotent-Replayed" not in answer.headers  # nothing of the other owner's is replayed
            answers[owner] = answer.json()["task_id"]
            again = await client.post(
                "/v1/tasks", files=[txt("same.txt", f"{marker} Same bytes.")], data={"title": marker},
                headers={"Idempotency-Key": key},
            )  # fmt: skip
            assert again.headers.get("Idempotent-Replayed") == "true"  # the owner's own key does replay
            assert again.json()["task_id"] == answers[owner]
    stored = await _tasks_titled(db, marker)
    assert sorted((r["owner"], r["id"]) for r in stored) == sorted((o, t) for o, t in answers.items())
    assert answers["alice"] != answers["bob"]


async def test_keys_are_each_deployments_own(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    """Two deployments share the database, alice has keys to both: the same key with the same request
    makes a task in each (never the other's answer, a task this gateway cannot read); with another
    request it is not refused; each deployment's own key still replays its own answer."""
    here, there = (make_stack.in_process(services=("gateway",)) for _ in range(2))
    assert here.env["DOCSUM_TOPIC_PREFIX"] != there.env["DOCSUM_TOPIC_PREFIX"]
    marker, key = new_marker(), _key()

    async def post(stack: InProcessStack, text: str) -> httpx.Response:
        async with stack.client() as client:
            return await client.post(
                "/v1/tasks", files=[txt("same.txt", text)], data={"title": marker}, headers={"Idempotency-Key": key}
            )

    first = await post(here, f"{marker} Same bytes.")
    assert first.status_code == 201, first.text
    elsewhere = await post(there, f"{marker} Same bytes.")
    assert elsewhere.status_code == 201, elsewhere.text
    assert "Idempotent-Replayed" not in elsewhere.headers  # nothing of the other deployment's is replayed
    assert elsewhere.json()["task_id"] != first.json()["task_id"]
    async with there.client() as client:
        assert (await client.get(f"/v1/tasks/{elsewhere.json()['task_id']}")).status_code == 200
    other_request = await post(there, f"{marker} Other bytes.")
    assert other_request.status_code == 422, other_request.text  # the key is there's own now: reused there
    for stack, answer in ((here, first), (there, elsewhere)):
        again = await post(stack, f"{marker} Same bytes.")
        assert again.headers.get("Idempotent-Replayed") == "true" and again.json() == answer.json()
    stored = await db.fetch("SELECT id, deployment FROM tasks WHERE title = $1", marker)
    assert sorted((r["deployment"], r["id"]) for r in stored) == sorted(
        [
            (here.env["DOCSUM_TOPIC_PREFIX"], first.json()["task_id"]),
            (there.env["DOCSUM_TOPIC_PREFIX"], elsewhere.json()["task_id"]),
        ]
    )


async def test_keys_stored_before_belong_to_their_tasks_deployment(infra: dict[str, str]) -> None:
    """Migration 0037 on a database whose keys were each owner's: a key keeps replaying in the deployment
    whose task it names (the default one for a task of none), and only there."""
    url = await create_database(infra["DATABASE_URL"], "docsum_keys")
    try:
        conn = await asyncpg.connect(url)
        try:
            for version, _name, sql in _migrations():
                if version < 37:
                    await conn.execute(sql)
            for task_id, deployment in (("t-default", ""), ("t-there", "there.")):
                await conn.execute(
                    "INSERT INTO tasks (id, owner, title, status, options, deployment)"
                    " VALUES ($1, 'alice', 'k', 'PROCESSING', '{}', $2)",
                    task_id, deployment,
                )  # fmt: skip
                await conn.execute(
                    "INSERT INTO idempotency_keys (owner, key, fingerprint, task_id, status_code, response, expires_at)"
                    " VALUES ('alice', $1, 'f', $2, 201, '{}', now() + interval '1 day')",
                    f"key-{task_id}", task_id,
                )  # fmt: skip
            (migration,) = [sql for version, _name, sql in _migrations() if version == 37]
            await conn.execute(migration)
            rows = await conn.fetch("SELECT deployment, owner, key FROM idempotency_keys ORDER BY key")
            assert [tuple(r) for r in rows] == [
                ("", "alice", "key-t-default"),
                ("there.", "alice", "key-t-there"),
            ]
            primary = await conn.fetchval(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'idempotency_keys_pkey'"
            )
            assert primary == "PRIMARY KEY (deployment, owner, key)"
        finally:
            await conn.close()
    finally:
        await drop_database(url)


async def test_an_expired_key_is_pruned_and_free_again(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    stack = make_stack.in_process(services=("gateway",), DOCSUM_IDEMPOTENCY_KEY_TTL_S="1")
    marker, key = new_marker(), _key()
    keyed = "SELECT count(*) FROM idempotency_keys k JOIN tasks t ON t.id = k.task_id WHERE t.title = $1"
    async with stack.client() as client:
        first = await client.post(
            "/v1/tasks", files=[txt("a.txt", marker)], data={"title": marker}, headers={"Idempotency-Key": key}
        )
        assert first.status_code == 201
        assert await db.fetchval(keyed, marker) == 1  # stored with the task, before the answer

        async def pruned() -> bool:
            return await db.fetchval(keyed, marker) == 0

        await eventually(pruned, timeout=60, message="the expired key pruned", stack=stack)
        later = await client.post(
            "/v1/tasks", files=[txt("a.txt", marker)], data={"title": marker}, headers={"Idempotency-Key": key}
        )
        assert later.status_code == 201 and "Idempotent-Replayed" not in later.headers
        assert later.json()["task_id"] != first.json()["task_id"]
    assert len(await _tasks_titled(db, marker)) == 2


async def test_a_killed_gateway_leaves_a_key_any_replica_answers(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    """Two gateway processes. The first is killed (SIGKILL) with a keyed submission in the middle of its
    transaction: nothing of it stays, and the retry, on the second replica, makes the task. That answer is
    lost on its way back and the second replica is killed too: the retry on the first, restarted, gets the
    stored answer."""
    stack = make_stack(services=("gateway",))
    second_port = free_port()
    stack.start("gateway-2", DOCSUM_GATEWAY_PORT=str(second_port))
    second_url = f"http://127.0.0.1:{second_port}"
    await eventually(lambda: _healthy(second_url), timeout=90, message="the second gateway", stack=stack)
    marker, key = new_marker(), _key()
    deployment = stack.env["DOCSUM_TOPIC_PREFIX"]
    content = f"{marker} Stored by whichever replica lives.".encode()
    auth = {"Authorization": f"Bearer {stack.keys['alice']}", "Idempotency-Key": key}

    async def post(url: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as client:
            return await client.post("/v1/tasks", files=[txt("k.txt", content)], data={"title": marker})

    async with db.acquire() as holder:
        held = holder.transaction()
        await held.start()
        await lock_blobs(holder, [hashlib.sha256(content).hexdigest()])
        in_flight = asyncio.create_task(post(stack.gateway_url))
        try:
            await eventually(
                lambda: _key_locked(db, deployment, "alice", key), timeout=60, message="the key taken", stack=stack
            )
            os.kill(stack.processes["gateway"].pid, signal.SIGKILL)  # mid-transaction: the task not stored yet
            stack.processes.pop("gateway").wait()
        finally:
            await held.rollback()
        with pytest.raises(httpx.HTTPError):
            await in_flight
    await eventually(lambda: _key_free(db, deployment, "alice", key), timeout=60, message="the killed transaction gone")
    assert await _tasks_titled(db, marker) == []

    async with LossyProxy(second_port, drop=lambda request: True) as proxy:
        with pytest.raises(httpx.HTTPError):
            await post(proxy.url)
    (lost,) = proxy.exchanges
    assert lost.status == 201 and "idempotent-replayed" not in lost.headers
    stack.kill("gateway-2")
    stack.start("gateway")
    stack.wait_ready()

    replayed = await post(stack.gateway_url)
    assert replayed.status_code == 201 and replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == lost.body
    (task,) = await _tasks_titled(db, marker)
    assert task["id"] == replayed.json()["task_id"]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


_KEY_LOCKS = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND classid = $1::bigint::oid"
    " AND objid = ((hashtext($2 || chr(31) || $3 || chr(31) || $4)::bigint + 4294967296) % 4294967296)::oid"
)


async def _key_locked(db: asyncpg.Pool, deployment: str, owner: str, key: str) -> bool:
    return await db.fetchval(_KEY_LOCKS, KEY_LOCK_CLASS, deployment, owner, key.strip('"')) > 0


async def _key_free(db: asyncpg.Pool, deployment: str, owner: str, key: str) -> bool:
    return await db.fetchval(_KEY_LOCKS, KEY_LOCK_CLASS, deployment, owner, key.strip('"')) == 0
