"""Progress streams cannot exhaust the gateway: clients that open streams and never read them cost a
bounded amount of memory, and streams beyond the caps are refused with a reason.

The memory bound is a capacity check: the gateway process's resident memory, read from /proc, under
40 SSE sockets that never read a byte past the status line, to a 100-document task whose log is
complete (every entry is there to be sent at once; the task is run by the pipeline in-process, the
gateway measured is a process of its own). The two memory bounds and the ticket across
replicas and restarts run the gateway as processes (one process's memory, two gateways, a restart);
the caps, revocation, positions and pruning run the pipeline in-process (what is tested is what the
settings and the gateway's answers do, not processes or the broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from docsum_gateway.progress.recorder import repository
from tests.fake_llm import free_port
from tests.inprocess import InProcessStack
from tests.integration.conftest import AnyStack, StackFactory
from tests.integration.helpers import eventually, submit, txt, wait_for_task

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
STALLED_SOCKETS = 40
DOCUMENTS = 100
GROWTH_BOUND = 100 * MiB
SSE = {"Accept": "text/event-stream"}
ADMIN = "admin-" + secrets.token_urlsafe(24)


def _rss(pid: int) -> int:
    """The process's resident memory in bytes (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _stalled_at_gateway(port: int, client_ports: set[int]) -> int:
    """How many of the gateway's connections to `client_ports` have bytes in their send queue (tx_queue in
    /proc/net/tcp): those the client stopped reading, their stream having sent past what it took."""
    stalled = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, tx_queue = fields[1], fields[2], fields[4].split(":")[0]
        if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) in client_ports:
            stalled += int(tx_queue, 16) > 0
    return stalled


async def _stalled_sse(port: int, task_id: str, key: str) -> socket.socket:
    """An SSE connection that reads the status line, then never reads again (a tiny receive buffer, so
    the client's kernel holds little of what the gateway sends)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = (
        f"GET /v1/tasks/{task_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    )
    await loop.sock_sendall(sock, request.encode())
    head = await asyncio.wait_for(loop.sock_recv(sock, 16), 30)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


async def test_forty_sse_sockets_that_never_read_grow_the_gateway_by_less_than_100_mb(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    # The task (and so its log) is made by the pipeline in-process; the gateway measured is a process of
    # its own that serves it from the same database, to the same owner, in the same deployment.
    pipeline = make_stack.in_process(DOCSUM_MAX_FILES_PER_TASK=str(DOCUMENTS))
    async with pipeline.client() as client:
        note = "Note {}. The tide came in at dawn and left by noon."
        files = [txt(f"note-{i:03d}.txt", note.format(i)) for i in range(DOCUMENTS)]
        task_id = await submit(client, files)
        done = await wait_for_task(client, task_id, pipeline, timeout=300)
        assert done["status"] == "COMPLETED" and len(done["documents"]) == DOCUMENTS
    stack = make_stack(
        services=("gateway",),
        DOCSUM_TOPIC_PREFIX=pipeline.env["DOCSUM_TOPIC_PREFIX"],
        # Room for every socket of the test: the caps have their own test below.
        DOCSUM_PROGRESS_STREAMS_PER_OWNER=str(STALLED_SOCKETS + 10),
        DOCSUM_PROGRESS_STREAMS_MAX=str(STALLED_SOCKETS + 10),
    )
    async with stack.client() as client:
        # The whole log, read once as a client that reads: the baseline includes a served stream.
        async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers={"Accept": "text/event-stream"}) as r:
            body = (await r.aread()).decode()
        assert body.count("event: progress") >= DOCUMENTS * 4
    # An entry tells what changed, not the whole task: the log grows with the steps, not steps x documents.
    entries, size = await db.fetchrow(
        "SELECT count(*), sum(octet_length(body::text)) FROM progress_log WHERE task_id = $1", task_id
    )
    print(f"progress log: {entries} entries, {size} bytes")
    assert size / entries < 2048, (entries, size)
    # A stream reads the log a bounded number of bytes at a time (one entry at least), in order.
    read: list[int] = []
    after = 0
    while batch := await repository.entries_after(db, task_id, after, 4096):
        assert len(batch) == 1 or sum(len(e.text.encode()) for e in batch) <= 4096
        read.extend(e.seq for e in batch)
        after = batch[-1].seq
    assert read == list(range(1, entries + 1))

    pid = stack.processes["gateway"].pid
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    before = _rss(pid)
    sockets = [await _stalled_sse(port, task_id, stack.keys["alice"]) for _ in range(STALLED_SOCKETS)]
    try:
        peak = before
        # The window the streams get to pile up what they cannot send: each fills its socket's buffers
        # within a second (the log is ~270 KB, read 4 KB at a time), seen as bytes waiting in the send
        # queue of each of the gateway's 40 connections; from the moment all 40 are, 3 s of margin (12 s
        # at most in all).
        client_ports = {sock.getsockname()[1] for sock in sockets}
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline and peak - before < GROWTH_BOUND:
            peak = max(peak, _rss(pid))
            if _stalled_at_gateway(port, client_ports) == STALLED_SOCKETS:
                deadline = min(deadline, time.monotonic() + 3)
            await asyncio.sleep(0.25)
        print(
            f"gateway RSS: {before / MiB:.0f} MiB before, {peak / MiB:.0f} MiB at most under {STALLED_SOCKETS} sockets"
            f" ({_stalled_at_gateway(port, client_ports)} of them stalled)"
        )
        assert peak - before < GROWTH_BOUND, f"grew by {(peak - before) / MiB:.0f} MiB"
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------------------------------
# Caps, revocation, tickets, positions, pruning: a gateway of its own (no pipeline: tasks stay open)


async def _open_sse(client: httpx.AsyncClient, task_id: str, headers: dict[str, str], exits: AsyncExitStack) -> int:
    """The status of a new SSE connection; a 200 stays open (unread) until `exits` closes it."""
    response = await exits.enter_async_context(client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers))
    if response.status_code != 200:
        await response.aread()
    return response.status_code


async def _refusal(client: httpx.AsyncClient, task_id: str, headers: dict[str, str]) -> httpx.Response:
    async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as response:
        await response.aread()
        return response


def _ws_url(stack: AnyStack, task_id: str, query: str = "") -> str:
    return stack.gateway_url.replace("http://", "ws://") + f"/v1/tasks/{task_id}/events{query}"


async def test_streams_beyond_the_caps_are_refused_with_a_reason(make_stack: StackFactory) -> None:
    stack = make_stack.in_process(
        services=("gateway",), DOCSUM_PROGRESS_STREAMS_PER_OWNER="2", DOCSUM_PROGRESS_STREAMS_MAX="3"
    )
    alice = {"Authorization": f"Bearer {stack.keys['alice']}", **SSE}
    bob = {"Authorization": f"Bearer {stack.keys['bob']}", **SSE}
    async with stack.client() as client, stack.client("bob") as bobs:
        task_id = await submit(client, [txt("a.txt", "Stays pending: no parser runs.")])
        bob_task = await submit(bobs, [txt("b.txt", "Bob's own.")])
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=httpx.Timeout(10, read=60)) as client:
        async with AsyncExitStack() as open_streams:
            assert [await _open_sse(client, task_id, alice, open_streams) for _ in range(2)] == [200, 200]
            refused = await _refusal(client, task_id, alice)
            assert refused.status_code == 429 and refused.headers["Retry-After"].isdigit()
            assert "progress streams open already" in refused.json()["detail"]
            async with websockets.connect(_ws_url(stack, task_id), additional_headers=alice) as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            assert "progress streams open already" in closed.value.rcvd.reason

            assert await _open_sse(client, bob_task, bob, open_streams) == 200
            full = await _refusal(client, bob_task, bob)  # bob is under his cap; the gateway is full
            assert full.status_code == 429 and "as many progress streams as it can" in full.json()["detail"]
        # Closed streams give their places back.
        async with AsyncExitStack() as again:

            async def reopened() -> bool:
                return await _open_sse(client, task_id, alice, again) == 200

            await eventually(reopened, timeout=30, message="a place freed by closed streams", stack=stack)


async def test_revoking_a_key_ends_the_streams_it_opened(make_stack: StackFactory) -> None:
    stack = make_stack.in_process(services=("gateway",), DOCSUM_ADMIN_KEY=ADMIN, DOCSUM_PROGRESS_POLL_S="0.2")
    operator = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=httpx.Timeout(30, read=60)) as client:
        made = (await client.post("/v1/keys", json={"owner": "carol"}, headers=operator)).json()
        carol = {"Authorization": f"Bearer {made['key']}"}
        task_id = (await client.post("/v1/tasks", files=[txt("c.txt", "Stays pending.")], headers=carol)).json()[
            "task_id"
        ]
        ticket = (await client.post(f"/v1/tasks/{task_id}/ticket", headers=carol)).json()["ticket"]
        sse_open, ws_open = asyncio.Event(), asyncio.Event()

        async def sse_until_end() -> str:
            async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers={**carol, **SSE}) as response:
                assert response.status_code == 200
                text = ""
                async for chunk in response.aiter_text():
                    text += chunk
                    if "event: snapshot" in text:
                        sse_open.set()
                return text

        async def ws_until_close() -> Any:
            async with websockets.connect(_ws_url(stack, task_id, f"?ticket={ticket}")) as ws:
                assert json.loads(await ws.recv())["task_id"] == task_id  # the snapshot
                ws_open.set()
                with pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await ws.recv()
                return closed.value.rcvd

        sse = asyncio.create_task(sse_until_end())
        ws = asyncio.create_task(ws_until_close())
        try:
            await asyncio.wait_for(asyncio.gather(sse_open.wait(), ws_open.wait()), 30)
            assert not sse.done() and not ws.done()  # the task is not over: they would run on
            assert (await client.delete(f"/v1/keys/{made['key_id']}", headers=operator)).is_success
            body = await asyncio.wait_for(sse, 30)
            closed = await asyncio.wait_for(ws, 30)
        finally:
            sse.cancel()
            ws.cancel()
    assert body.rstrip().endswith('"detail": "the API key this stream was opened with was revoked"}')
    assert closed is not None and closed.code == 1008 and "revoked" in closed.reason


async def test_a_ticket_opens_one_connection_across_replicas_and_restarts(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    stack = make_stack(services=("gateway",))
    port = free_port()
    second = f"http://127.0.0.1:{port}"
    stack.start("gateway-2", DOCSUM_GATEWAY_PORT=str(port))
    async with stack.client() as client:
        task_id = await submit(client, [txt("t.txt", "Stays pending.")])
        tickets = [(await client.post(f"/v1/tasks/{task_id}/ticket")).json()["ticket"] for _ in range(2)]

    async def answers() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as probe:
                return (await probe.get(f"{second}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    await eventually(answers, timeout=60, message="the second gateway", stack=stack)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as anon:
            url = f"/v1/tasks/{task_id}/events?ticket="
            async with anon.stream("GET", f"{stack.gateway_url}{url}{tickets[0]}", headers=SSE) as first:
                assert first.status_code == 200
            # The same ticket on another replica: refused, as on the first.
            assert (await anon.get(f"{second}{url}{tickets[0]}", headers=SSE)).status_code == 401
            # A ticket used on a WebSocket of one replica, then offered to a restarted one.
            ws = _ws_url(stack, task_id, f"?ticket={tickets[1]}")
            async with websockets.connect(ws) as connection:
                assert json.loads(await connection.recv())["task_id"] == task_id
        stack.stop("gateway")
        stack.start("gateway")
        stack.wait_ready()
        async with httpx.AsyncClient(timeout=10) as anon:
            again = await anon.get(f"{stack.gateway_url}/v1/tasks/{task_id}/events?ticket={tickets[1]}", headers=SSE)
            assert again.status_code == 401
        # Nonces are kept only while their ticket could be replayed.
        await db.execute(
            "INSERT INTO stream_ticket_nonces (nonce, expires_at) VALUES ('old-one', now() - interval '1 hour')"
        )
        async with stack.client() as client:
            fresh = (await client.post(f"/v1/tasks/{task_id}/ticket")).json()["ticket"]
        async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=httpx.Timeout(10, read=30)) as anon:
            async with anon.stream("GET", f"/v1/tasks/{task_id}/events?ticket={fresh}", headers=SSE) as opened:
                assert opened.status_code == 200
        assert await db.fetchval("SELECT count(*) FROM stream_ticket_nonces WHERE nonce = 'old-one'") == 0
    finally:
        stack.stop("gateway-2")


@pytest.mark.parametrize("position", ["²", "١٢", "1" * 19, "99999999999999999999", "-1", "1.0", "0x10"])
async def test_a_log_position_that_is_not_a_number_of_18_digits_is_refused(
    pipeline: InProcessStack, position: str
) -> None:
    alice = {"Authorization": f"Bearer {pipeline.keys['alice']}", **SSE}
    async with pipeline.client() as client:
        task_id = await _any_task(client)
        # A header's bytes are read as Latin-1: "²" arrives as itself.
        raw = position.encode("latin-1") if position.isascii() or position == "²" else position.encode()
        by_header = await _refusal(client, task_id, {**alice, "Last-Event-ID": raw})  # type: ignore[dict-item]
        assert by_header.status_code == 400 and "18 digits" in by_header.json()["detail"]
        async with client.stream("GET", f"/v1/tasks/{task_id}/events", params={"after": position}, headers=alice) as r:
            assert r.status_code == 400 and "18 digits" in (await r.aread()).decode()
    url = _ws_url(pipeline, task_id, "?" + str(httpx.QueryParams({"after": position})))
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:  # closed before the handshake: a 403
        async with websockets.connect(url, additional_headers=alice):
            pass
    assert refused.value.response.status_code == 403


async def test_eighteen_digits_are_a_position(pipeline: InProcessStack) -> None:
    alice = {"Authorization": f"Bearer {pipeline.keys['alice']}", **SSE}
    async with pipeline.client() as client:
        task_id = await _any_task(client)
        async with client.stream(
            "GET", f"/v1/tasks/{task_id}/events", headers={**alice, "Last-Event-ID": "9" * 18}
        ) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("event: snapshot"):
                    break


_TASKS: dict[str, str] = {}


async def _any_task(client: httpx.AsyncClient) -> str:
    """A task of alice's on the shared pipeline (one for every position tested)."""
    if "task" not in _TASKS:
        _TASKS["task"] = await submit(client, [txt("p.txt", "Positions. The tide came in at dawn.")])
    return _TASKS["task"]


async def test_the_log_of_a_task_that_ended_long_ago_is_pruned(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    stack = make_stack.in_process(services=("gateway",), DOCSUM_PROGRESS_RETAIN_S="1")
    async with stack.client() as client:
        task_id = await submit(client, [txt("old.txt", "Cancelled at once.")])
        logged = "SELECT count(*) FROM progress_log WHERE task_id = $1"
        await eventually(lambda: _positive(db, logged, task_id), timeout=60, message="entries logged", stack=stack)
        assert (await client.post(f"/v1/tasks/{task_id}/cancel")).status_code in (200, 202)

        async def pruned() -> bool:
            return await db.fetchval(logged, task_id) == 0

        await eventually(pruned, timeout=60, message="the ended task's log pruned", stack=stack)
        # Its stream ends at once: the snapshot tells all there is (the head keeps its number).
        async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=SSE) as response:
            body = (await asyncio.wait_for(response.aread(), 30)).decode()
        assert body.count("event: snapshot") == 1 and "event: progress" not in body
        assert json.loads(body.split("data: ", 1)[1].split("\n", 1)[0])["status"] == "CANCELLED"
        assert await db.fetchval("SELECT seq FROM progress_heads WHERE task_id = $1", task_id) > 0


async def _positive(db: asyncpg.Pool, query: str, *args: Any) -> bool:
    return bool(await db.fetchval(query, *args))


# --------------------------------------------------------------------------------------------------
# A WebSocket client sends nothing: one that does is closed, and one that leaves frees its stream even
# when nothing is being sent to it (a paused task)

BIG_MESSAGE = 16 * MiB  # uvicorn's default message limit
FLOODING_SOCKETS = 20


async def _paused_task(stack: AnyStack) -> str:
    async with stack.client() as client:
        task_id = await submit(client, [txt("paused.txt", "Paused at once: nothing is sent on its streams.")])
        assert (await client.post(f"/v1/tasks/{task_id}/pause")).status_code == 200
    return task_id


async def _stream(stack: AnyStack, task_id: str, exits: AsyncExitStack) -> ClientConnection | None:
    """A WebSocket past its snapshot (None: refused, closed with 1013); `exits` closes it."""
    alice = {"Authorization": f"Bearer {stack.keys['alice']}"}
    ws = await exits.enter_async_context(websockets.connect(_ws_url(stack, task_id), additional_headers=alice))
    try:
        first = await asyncio.wait_for(ws.recv(), 30)
    except ConnectionClosed as closed:
        assert closed.rcvd is not None and closed.rcvd.code == 1013, closed
        return None
    assert json.loads(first)["status"] == "PAUSED"
    return ws


async def _closing(ws: ClientConnection) -> Any:
    """The close frame the server sends, past the log's entries (within a bound: the old gateway never
    closed)."""

    async def until_closed() -> None:
        while True:
            await ws.recv()

    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(until_closed(), 30)
    return closed.value.rcvd


async def _opens(stack: AnyStack, task_id: str, exits: AsyncExitStack) -> ClientConnection:
    """A stream opened under the per-owner cap, once the places of those that ended are given back."""
    opened: list[ClientConnection] = []

    async def one() -> bool:
        ws = await _stream(stack, task_id, exits)
        if ws is not None:
            opened.append(ws)
        return ws is not None

    await eventually(one, timeout=30, interval=0.2, message="a place freed by a stream that ended", stack=stack)
    return opened[0]


async def test_a_websocket_client_that_sends_a_message_is_closed_and_frees_its_stream(
    make_stack: StackFactory,
) -> None:
    stack = make_stack.in_process(services=("gateway",), DOCSUM_PROGRESS_STREAMS_PER_OWNER="2")
    task_id = await _paused_task(stack)
    async with AsyncExitStack() as exits:
        big, small = await _stream(stack, task_id, exits), await _stream(stack, task_id, exits)
        assert big is not None and small is not None
        assert await _stream(stack, task_id, exits) is None  # the cap is full
        with contextlib.suppress(ConnectionClosed):
            await big.send(b"x" * MiB)
        assert (await _closing(big)).code == 1009  # over DOCSUM_WS_MAX_MESSAGE_BYTES: not even read
        await small.send("hello")
        closed = await _closing(small)
        assert closed.code == 1008 and "this stream only sends" in closed.reason
        # Both places are free again: two streams open under the cap of two.
        assert await _opens(stack, task_id, exits) and await _opens(stack, task_id, exits)


async def test_a_websocket_client_that_leaves_a_paused_task_frees_its_stream(make_stack: StackFactory) -> None:
    stack = make_stack.in_process(services=("gateway",), DOCSUM_PROGRESS_STREAMS_PER_OWNER="2")
    task_id = await _paused_task(stack)
    async with AsyncExitStack() as exits:
        polite, vanished = await _stream(stack, task_id, exits), await _stream(stack, task_id, exits)
        assert polite is not None and vanished is not None
        await polite.close()  # a closing handshake
        vanished.transport.abort()  # the connection just drops
        assert await _opens(stack, task_id, exits) and await _opens(stack, task_id, exits)


async def test_twenty_websockets_that_each_send_16_mib_grow_the_gateway_by_less_than_64_mb(
    make_stack: StackFactory,
) -> None:
    stack = make_stack(services=("gateway",))  # 20 streams per owner: one each
    task_id = await _paused_task(stack)
    pid = stack.processes["gateway"].pid
    message = b"x" * BIG_MESSAGE  # 16 KB on the wire where the server inflates compressed messages
    async with AsyncExitStack() as exits:
        opened = [await _stream(stack, task_id, exits) for _ in range(FLOODING_SOCKETS)]
        sockets = [ws for ws in opened if ws is not None]
        assert len(sockets) == FLOODING_SOCKETS
        before = _rss(pid)
        for ws in sockets:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(message)
        bound = 64 * MiB
        peak = before
        # Until every socket is closed (each message refused at its header), or the gateway has grown past
        # the bound (the old one inflated and kept every message: 20 x 16 MiB).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and peak - before < bound:
            peak = max(peak, _rss(pid))
            if all(ws.close_code is not None for ws in sockets):
                break
            await asyncio.sleep(0.2)
        print(f"\ngateway RSS: {before / MiB:.0f} MiB before, {peak / MiB:.0f} MiB at most after {FLOODING_SOCKETS}"
              f" WebSockets sent {BIG_MESSAGE // MiB} MiB each")  # fmt: skip
        assert peak - before < bound, f"grew by {(peak - before) / MiB:.0f} MiB"
        assert {ws.close_code for ws in sockets} == {1009}
