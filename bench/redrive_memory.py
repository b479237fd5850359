"""The events a reconcile holds in memory over a backlog of idle chunks (100,000 by default).

Seeds the backlog straight into a database of its own on the project's PostgreSQL (idle tasks of one
owner, each one SUMMARIZING document of PENDING chunks), runs the gateway's `POST /v1/reconcile` as its
route does (`maintenance.reconcile`, then the publishing after the answer), with the publishing port
replaced by a counter: at each batch it counts the announcements alive in the process (gc) and the
batch's size. tracemalloc's peak is taken over the whole reconcile. Nothing goes to Kafka.

    .venv/bin/python bench/redrive_memory.py [--chunks 100000] [--tasks 10] [--batch 500]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docsum_gateway.routers import maintenance  # noqa: E402
from docsum_gateway.settings import GatewaySettings  # noqa: E402
from docsum_shared.db import migrate  # noqa: E402
from docsum_shared.events import ChunkCreated  # noqa: E402
from tests.integration.conftest import create_database, drop_database, start_infra  # noqa: E402


async def seed(pool: asyncpg.Pool, owner: str, tasks: int, per_task: int) -> None:
    for _ in range(tasks):
        task_id, doc_id = str(uuid.uuid4()), str(uuid.uuid4())
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO tasks (id, owner, title, status, last_active_at)"
                " VALUES ($1, $2, 'backlog', 'PROCESSING', now() - interval '1 hour')",
                task_id,
                owner,
            )
            await conn.execute(
                "INSERT INTO documents (id, task_id, filename, content_type, status, text_chars, size_level,"
                " chunk_total, updated_at) VALUES ($1, $2, 'big.txt', 'text/plain', 'SUMMARIZING', 1000000,"
                " 'LARGE', $3, now() - interval '1 hour')",
                doc_id,
                task_id,
                per_task,
            )
            await conn.copy_records_to_table(
                "chunks",
                records=[(f"{doc_id}:{i:06d}", doc_id, i, 0, 1, "x", "PENDING") for i in range(per_task)],
                columns=["id", "document_id", "chunk_index", "start_char", "end_char", "text", "status"],
            )


async def main(server_url: str, chunks: int, tasks: int, batch: int) -> None:
    url = await create_database(server_url, "docsum_redrive_memory")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    try:
        await migrate(pool)
        owner = "owner-backlog"
        await seed(pool, owner, tasks, chunks // tasks)
        sizes: list[int] = []
        alive: list[int] = []

        async def counting(events: Any, *, sender: Any) -> None:  # the Publish port the route is given
            sizes.append(len(events))
            alive.append(sum(1 for o in gc.get_objects() if type(o) is ChunkCreated))

        settings = GatewaySettings(_env_file=None, redrive_batch_events=batch, redrives_per_minute=0)
        gc.collect()
        tracemalloc.start()
        started = time.monotonic()
        answer = await maintenance.reconcile(owner, pool, counting, settings)
        await asyncio.gather(*maintenance._publishing)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"idle chunks {chunks} in {tasks} tasks, batch {batch}: counted {answer.redriven_events},"
            f" published {sum(sizes)} in {len(sizes)} batches (largest {max(sizes)});"
            f" announcements alive at a batch: most {max(alive)}, first {alive[0]};"
            f" tracemalloc peak {peak / 2**20:.1f} MiB; {elapsed:.1f} s"
        )
    finally:
        await pool.close()
        await drop_database(url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    infra = start_infra("docsum_redrive_memory")
    asyncio.run(main(infra["DATABASE_URL"], args.chunks, args.tasks, args.batch))
