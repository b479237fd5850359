"""Whole tasks through the five stages on the real database: in-process (what is tested is what docsum
answers and stores, not processes or the broker), but for the replay, which re-publishes a task's events
on the real broker and waits for the services' consumer groups to catch up."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from docsum_cli.main import as_json
from tests.documents import Block, english_prose, make_docx, make_encrypted_pdf, make_pdf, truncate
from tests.inprocess import InProcessStack
from tests.integration.conftest import Stack
from tests.integration.helpers import chunks_of, submit, task_finished, txt, wait_for_task

pytestmark = pytest.mark.integration


def _large_docx() -> bytes:
    blocks: list[Block] = []
    for section in range(12):
        blocks.append(("heading", 1, f"Part {section + 1}"))
        for paragraph in english_prose(9_500, seed=100 + section).split("\n\n"):
            blocks.append(("paragraph", paragraph))
    return make_docx(blocks)


async def test_three_documents_complete(pipeline: InProcessStack, db: asyncpg.Pool) -> None:
    files = [
        txt("notes.txt", english_prose(3_000, seed=1)),
        ("files", ("report.pdf", make_pdf([english_prose(2_500, seed=s) for s in range(2, 7)]), "application/pdf")),
        ("files", ("book.docx", _large_docx(), "application/octet-stream")),
    ]
    async with pipeline.client() as client:
        task_id = await submit(client, files, title="three")
        task = await wait_for_task(client, task_id, pipeline)

    assert task["status"] == "COMPLETED", task
    assert task["summary"]
    by_name = {d["filename"]: d for d in task["documents"]}
    assert {d["status"] for d in by_name.values()} == {"COMPLETED"}
    assert all(d["summary"] for d in by_name.values())
    assert by_name["notes.txt"]["size_level"] == "SMALL"
    assert by_name["report.pdf"]["size_level"] == "MEDIUM"
    assert by_name["book.docx"]["size_level"] == "LARGE"
    assert by_name["book.docx"]["text_chars"] > 100_000
    book = by_name["book.docx"]["chunks"]
    assert book["total"] > 40 and book["done"] == book["total"]
    # Every chunk summarized exactly once into the cache, and no chunk left unfinished.
    pending = sum(c["status"] != "COMPLETED" for c in await chunks_of(db, task_id))
    assert pending == 0


async def test_bad_files_fail_alone(pipeline: InProcessStack) -> None:
    good = english_prose(1_500, seed=9).encode()
    pdf = make_pdf([english_prose(1_200, seed=10), english_prose(1_200, seed=11)])
    files = [
        ("files", ("secret.pdf", make_encrypted_pdf("top secret text"), "application/pdf")),
        ("files", ("broken.pdf", truncate(pdf, 0.5), "application/pdf")),
        txt("empty.txt", b""),
        txt("good.txt", good),
    ]
    async with pipeline.client() as client:
        task = await wait_for_task(client, await submit(client, files), pipeline)

    assert task["status"] == "COMPLETED_WITH_ERRORS"
    by_name = {d["filename"]: d for d in task["documents"]}
    assert by_name["good.txt"]["status"] == "COMPLETED" and by_name["good.txt"]["summary"]
    assert task["summary"] == by_name["good.txt"]["summary"]
    for name, words in {"secret.pdf": "encrypted", "broken.pdf": "damaged", "empty.txt": "empty"}.items():
        assert by_name[name]["status"] == "FAILED"
        assert words in by_name[name]["error"].lower(), by_name[name]["error"]
    # The result goes out on task-finished too: what `docsum summarize --json` prints, errors included.
    published, *again = await task_finished(pipeline.env, task["task_id"], pipeline)
    assert published == as_json(task) and all(other == published for other in again)


async def test_owner_isolation_and_auth(pipeline: InProcessStack) -> None:
    async with pipeline.client("alice") as alice, pipeline.client("bob") as bob:
        task_id = await submit(alice, [txt("a.txt", b"Hello there. A short note.")])
        assert (await bob.get(f"/v1/tasks/{task_id}")).status_code == 404
        assert task_id not in [t["task_id"] for t in (await bob.get("/v1/tasks")).json()]
        assert task_id in [t["task_id"] for t in (await alice.get("/v1/tasks")).json()]
        anonymous = alice.headers.copy()
        del anonymous["Authorization"]
        assert (
            await alice.get(f"/v1/tasks/{task_id}", headers={"Authorization": "Bearer wrong-key-000000000"})
        ).status_code == 401
        await wait_for_task(alice, task_id, pipeline)


async def test_request_limits(pipeline: InProcessStack) -> None:
    async with pipeline.client() as client:
        no_files = await client.post("/v1/tasks", data={"title": "nothing"})
        assert no_files.status_code == 400
        too_big = await client.post(
            "/v1/tasks", files=[("files", ("big.txt", b"a" * (5 * 1024 * 1024 + 1), "text/plain"))]
        )
        assert too_big.status_code == 413
        too_many = await client.post(
            "/v1/tasks", files=[("files", (f"{i}.txt", b"x", "text/plain")) for i in range(26)]
        )
        assert too_many.status_code == 413


async def test_replay_changes_nothing(stack: Stack, db: asyncpg.Pool, llm) -> None:
    """Re-publishing every event of a finished task changes no row and makes no LLM call."""
    from tests.integration.replay import republish_task_events, snapshot, wait_until_consumed

    files = [
        txt("replay.txt", english_prose(20_000, seed=21)),
        txt("replay-small.txt", english_prose(2_000, seed=22)),
    ]
    async with stack.client() as client:
        task_id = await submit(client, files)
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED"
    await wait_until_consumed(stack.env)
    before, calls_before = await snapshot(db, task_id), llm.llm.count()

    republished = await republish_task_events(stack.env, task_id)
    assert republished >= 2 + 10  # submitted ×2, parsed ×2, chunks and their summaries...
    # Caught up, and for a second no new event: a straggling re-emit (if any) has landed before comparing.
    await wait_until_consumed(stack.env, quiet_s=1.0)

    assert await snapshot(db, task_id) == before
    assert llm.llm.count() == calls_before


async def test_progress_streams_over_a_websocket(pipeline: InProcessStack, llm) -> None:
    import json

    import websockets

    llm.llm.configure(latency_s=0.2)  # slow enough to connect while the task runs
    files = [txt("stream.txt", english_prose(24_000, seed=31))]
    ws_url = pipeline.gateway_url.replace("http://", "ws://")
    async with pipeline.client() as client:
        task_id = await submit(client, files)
    headers = {"Authorization": f"Bearer {pipeline.keys['alice']}"}
    messages = []
    async with asyncio.timeout(120):
        async with websockets.connect(f"{ws_url}/v1/tasks/{task_id}/events", additional_headers=headers) as ws:
            async for raw in ws:  # the server closes the socket once the task is final
                messages.append(json.loads(raw))
    llm.llm.configure(latency_s=0.0)
    assert messages[0]["task_id"] == task_id and messages[0]["status"] == "PROCESSING"
    kinds = [m.get("kind") for m in messages[1:]]
    assert "chunk-summarized" in kinds and "document-done" in kinds
    assert kinds[-1] == "task-done" and messages[-1]["status"] == "COMPLETED" and messages[-1]["percent"] == 100
    assert [m["seq"] for m in messages[1:]] == list(range(1, len(messages)))  # numbered, no gap

    bob = f"{ws_url}/v1/tasks/{task_id}/events?token={pipeline.keys['bob']}"
    with pytest.raises(websockets.exceptions.WebSocketException):
        async with websockets.connect(bob) as ws:
            await ws.recv()
