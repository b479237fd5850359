"""Uploads stream: the gateway's memory stays small under many concurrent uploads.

The gateway spools each file to a temporary file (a small part of it in memory), hashes it as it
arrives and copies it into PostgreSQL in blocks, so 100 uploads of 1 MiB at once cost a few read
buffers each, not several copies of every file.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.integration.conftest import StackFactory

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
