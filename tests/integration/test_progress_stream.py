"""A task's progress is a log: read over SSE or a WebSocket, from any point, from any gateway replica.

A client that drops mid-task and reconnects with Last-Event-ID (to another replica, even) gets, put
together, exactly the stream a client that never dropped gets: no gap, no duplicate. That test runs two
gateway processes on Kafka (one replica serves what the other's recorder wrote); the CLI's runs the
pipeline in-process (what is tested is what the CLI prints from the stream, not processes or the broker).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets

from tests.documents import english_prose
from tests.fake_llm import free_port
from tests.inprocess import InProcessStack
from tests.integration.conftest import Stack
from tests.integration.helpers import eventually, read_sse, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


async def test_a_dropped_stream_resumes_on_another_replica_with_no_gap_and_no_repeat(stack: Stack, llm) -> None:
    port = free_port()
    stack.start("gateway-2", DOCSUM_GATEWAY_PORT=str(port))
    second = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {stack.keys['alice']}"}
    try:
        await eventually(lambda: _answers(second), timeout=60, message="the second gateway", stack=stack)
        llm.llm.configure(latency_s=0.3)  # slow enough to drop and come back mid-task
        async with stack.client() as client:
            task_id = await submit(client, [txt("log.txt", english_prose(20_000, seed=7)), txt("b.txt", "Short one.")])

            snapshot, first = await read_sse(stack.gateway_url, task_id, auth, stop_after=4)
            assert snapshot["task_id"] == task_id and "progress_seq" in snapshot
            assert [e["seq"] for e in first] == [1, 2, 3, 4] and first[0]["kind"] == "task-started"
            # Reconnect to the other replica from the last number seen, as EventSource does.
            _, rest = await read_sse(second, task_id, auth, after=first[-1]["seq"])
            llm.llm.configure(latency_s=0.0)
            done = await wait_for_task(client, task_id, stack)
            assert done["status"] == "COMPLETED"

            _, whole = await read_sse(stack.gateway_url, task_id, auth)  # the uninterrupted stream, read again
            assert first + rest == whole
            assert [e["seq"] for e in whole] == list(range(1, len(whole) + 1))
            kinds = [e["kind"] for e in whole]
            assert kinds[-1] == "task-done" and whole[-1]["percent"] == 100.0
            assert kinds.count("chunk-summarized") == sum(d["chunks"]["total"] for d in done["documents"])
            assert kinds.count("document-done") == 2 and kinds.count("task-started") == 1
            assert len({(e["kind"], e.get("document_id"), e.get("chunk_index")) for e in whole}) == len(whole)
            percents = [e["percent"] for e in whole]
            assert percents == sorted(percents)  # the bar never goes back
            assert all("eta_s" in e and "usage" in e for e in whole)

            # The WebSocket serves the same log, from ?after=N, from either replica.
            ws_url = second.replace("http://", "ws://") + f"/v1/tasks/{task_id}/events?after=3"
            async with websockets.connect(ws_url, additional_headers=auth) as ws:
                messages = [json.loads(m) async for m in ws]
            assert messages[0]["task_id"] == task_id and messages[0]["progress_seq"] == len(whole)
            assert messages[1:] == whole[3:]

            # Owners only: another owner's task is a 404, as a missing one; no credentials a 401.
            bob = {"Authorization": f"Bearer {stack.keys['bob']}"}
            async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=10) as anon:
                assert (await anon.get(f"/v1/tasks/{task_id}/events", headers=bob)).status_code == 404
                assert (await anon.get(f"/v1/tasks/{task_id}/events")).status_code == 401
                ticket = (await client.post(f"/v1/tasks/{task_id}/ticket")).json()["ticket"]
                sse = {"Accept": "text/event-stream"}
                assert (await anon.get(f"/v1/tasks/{task_id}/events", headers={**bob, **sse})).status_code == 404
                plain = await anon.get(f"/v1/tasks/{task_id}/events", headers={**auth, "Accept": "application/json"})
                assert plain.status_code == 406  # an event stream, for whoever accepts one
                url = f"/v1/tasks/{task_id}/events?ticket={ticket}&after=2"
                async with anon.stream("GET", url, headers=sse) as response:
                    assert response.status_code == 200
                    body = (await response.aread()).decode()
                assert body.count("event: progress") == len(whole) - 2
                again = await anon.get(f"/v1/tasks/{task_id}/events?ticket={ticket}", headers=sse)
                assert again.status_code == 401  # a ticket is good for one connection
    finally:
        llm.llm.configure(latency_s=0.0)
        stack.stop("gateway-2")


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"{url}/healthz")).status_code == 200
    except httpx.HTTPError:
        await asyncio.sleep(0.2)
        return False


async def test_the_cli_follows_the_stream_and_prints_the_result(pipeline: InProcessStack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    from docsum_cli.main import printed_json

    paper = tmp_path / "paper.txt"
    paper.write_text(english_prose(12_000, seed=5))
    env = {**os.environ, "DOCSUM_API_KEY": pipeline.keys["alice"], "DOCSUM_GATEWAY_URL": pipeline.gateway_url}
    run = [sys.executable, "-m", "docsum_cli.main", "summarize", str(paper)]
    done = await asyncio.to_thread(subprocess.run, run, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # Not a terminal: one plain line per change of state, from the stream, ending with the document done.
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("paper.txt: COMPLETED") and "\x1b[" not in done.stderr
    assert "COMPLETED" in done.stdout  # the summaries, as before

    printed = await asyncio.to_thread(
        subprocess.run, [*run, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert printed.returncode == 0 and printed.stderr == ""
    result = json.loads(printed.stdout)
    async with pipeline.client() as client:
        view = (await client.get(f"/v1/tasks/{result['task_id']}")).json()
    assert result == printed_json(view) and result["status"] == "COMPLETED"
