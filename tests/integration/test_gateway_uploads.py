"""Uploads stream: the gateway's memory stays small under many concurrent uploads.

The gateway spools each file to a temporary file (a small part of it in memory), hashes it as it
arrives and copies it into PostgreSQL in blocks, so 100 uploads of 1 MiB at once cost a few read
buffers each, not several copies of every file. That bound is the gateway process's own memory, so
its test runs the gateway as a process; the silent uploads' tests run it in-process (what is tested is
what the upload settings and the gateway's answers do, not processes or the broker).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.integration.conftest import StackFactory
from tests.integration.helpers import eventually

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
UPLOADS = 100


def vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


async def test_memory_under_100_concurrent_1mib_uploads(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    stack = make_stack(services=("gateway",), DOCSUM_MAX_FILE_BYTES=str(2 * MiB))
    pid = stack.processes["gateway"].pid
    limits = httpx.Limits(max_connections=UPLOADS, max_keepalive_connections=UPLOADS)
    headers = {"Authorization": f"Bearer {stack.keys['alice']}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=120, limits=limits) as client:
        # One small upload first: the code paths are warm and the pool is open before the baseline.
        warm = await client.post("/v1/tasks", files=[("files", ("warm.bin", os.urandom(1024)))])
        assert warm.status_code == 201, warm.text
        before = vm_hwm_kib(pid)
        bodies = [os.urandom(MiB) for _ in range(UPLOADS)]
        answers = await asyncio.gather(
            *(client.post("/v1/tasks", files=[("files", (f"u{i}.bin", body))]) for i, body in enumerate(bodies))
        )
    after = vm_hwm_kib(pid)
    assert [a.status_code for a in answers] == [201] * UPLOADS, [a.text for a in answers if a.status_code != 201]
    growth_mib = (after - before) / 1024
    print(f"\ngateway VmHWM: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB after {UPLOADS} concurrent"
          f" 1 MiB uploads (+{growth_mib:.1f} MiB)")  # fmt: skip
    task_ids = [a.json()["task_id"] for a in answers] + [warm.json()["task_id"]]
    await _forget(db, task_ids)
    # 100 MiB arrive at once; holding them (let alone copies of them) would cost 100+ MiB. A few read
    # buffers per upload is a few tens of MiB (measured: 21-34); the old gateway grew by 230.
    assert growth_mib < 64, f"the gateway's peak RSS grew by {growth_mib:.1f} MiB"


async def _forget(db: asyncpg.Pool, task_ids: list[str]) -> None:
    """Drop the test's tasks and their blobs (the session database is not dropped afterwards)."""
    async with db.acquire() as conn, conn.transaction():
        blobs = await conn.fetch("SELECT blob_sha256 FROM documents WHERE task_id = ANY($1::text[])", task_ids)
        await conn.execute("DELETE FROM tasks WHERE id = ANY($1::text[])", task_ids)
        await conn.execute(
            "DELETE FROM blobs b WHERE b.sha256 = ANY($1::text[])"
            " AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.blob_sha256 = b.sha256)",
            [r["blob_sha256"] for r in blobs],
        )


# --------------------------------------------------------------------------------------------------
# Silent uploads: what a request declares books nothing, and a body that stops arriving is dropped

ADMIN = "admin-" + secrets.token_urlsafe(24)
BOUNDARY = "s1lentb0undary"
PREAMBLE = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="quiet.bin"\r\n'
    "Content-Type: application/octet-stream\r\n\r\n"
).encode()


async def _start_upload(port: int, key: str, declared: int, first: bytes = b"") -> socket.socket:
    """A POST /v1/tasks that declares `declared` bytes, sends `first` of them, then nothing more. It asks
    for 100 Continue and waits for it: the gateway has started reading the body (and, before, booked
    what the request declares)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    head = (
        f"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {declared}\r\n"
        "Expect: 100-continue\r\n\r\n"
    )
    await loop.sock_sendall(sock, head.encode())
    answer = await asyncio.wait_for(loop.sock_recv(sock, 64), 30)
    assert answer.startswith(b"HTTP/1.1 100"), answer
    if first:
        await loop.sock_sendall(sock, first)
    return sock


async def _answer(sock: socket.socket) -> bytes:
    """What the gateway answers a request whose body stopped, to the end of the connection (within a
    bound: the old gateway waited for the body forever)."""
    loop = asyncio.get_running_loop()
    received = b""

    async def until_closed() -> None:
        nonlocal received
        while block := await loop.sock_recv(sock, 4096):
            received += block

    await asyncio.wait_for(until_closed(), 30)
    return received


async def test_silent_uploads_declaring_the_whole_budget_do_not_block_another_owners_upload(
    make_stack: StackFactory,
) -> None:
    stack = make_stack.in_process(
        services=("gateway",),
        DOCSUM_ADMIN_KEY=ADMIN,
        DOCSUM_UPLOAD_INFLIGHT_BYTES=str(16 * MiB),
        DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER=str(8 * MiB),
        DOCSUM_UPLOAD_IDLE_S="2",
    )
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=60) as client:
        made = await client.post("/v1/keys", json={"owner": "carol"}, headers={"Authorization": f"Bearer {ADMIN}"})
        carol = {"Authorization": f"Bearer {made.json()['key']}"}
        # Two owners, two requests each, declaring 4 MiB apiece: the gateway's 16 MiB, and sending nothing.
        silent = [await _start_upload(port, stack.keys[owner], 4 * MiB) for owner in ("alice", "alice", "bob", "bob")]
        try:
            small = await client.post("/v1/tasks", files=[("files", ("small.txt", b"x" * 60))], headers=carol)
            assert small.status_code == 201, small.text  # the old gateway: 503, the budget booked by silence
            # Each silent body is dropped after DOCSUM_UPLOAD_IDLE_S, with the reason.
            for sock in silent:
                answer = await _answer(sock)
                assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
                assert b"DOCSUM_UPLOAD_IDLE_S" in answer
        finally:
            for sock in silent:
                sock.close()


async def test_a_body_that_stops_arriving_is_dropped_and_gives_back_what_it_booked(make_stack: StackFactory) -> None:
    stack = make_stack.in_process(
        services=("gateway",), DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER=str(8 * MiB), DOCSUM_UPLOAD_IDLE_S="3"
    )
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    five = [("files", ("five.bin", os.urandom(5 * MiB)))]
    async with stack.client() as client:
        # 4 MiB of a file sent, then nothing: the gateway holds those 4 MiB of alice's 8.
        quiet = await _start_upload(port, stack.keys["alice"], 5 * MiB, PREAMBLE + b"q" * (4 * MiB))
        try:

            async def held() -> bool:
                answer = await client.post("/v1/tasks", files=five)  # 4 + 5 MiB: over alice's share
                return answer.status_code == 429

            await eventually(held, timeout=30, message="the silent upload's 4 MiB booked", stack=stack)
            answer = await _answer(quiet)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        finally:
            quiet.close()
        again = await client.post("/v1/tasks", files=five)
        assert again.status_code == 201, again.text  # the dropped upload's 4 MiB were given back
