"""Chunk token estimates (migration 0005): stored by the chunker, backfilled in SQL, summed by the gateway.

The pipeline runs in-process: what is tested is what the chunker stores and the gateway sums, not
processes or the broker.
"""

from __future__ import annotations

import random
import uuid

import asyncpg
import pytest

from docsum_shared.db import _migrations, migrate
from docsum_shared.lifecycle import recount_documents
from docsum_shared.readmodel import queries
from docsum_shared.text import estimate_tokens_upper
from tests.documents import chinese_prose, english_prose
from tests.inprocess import InProcessStack
from tests.integration.helpers import wait_for_task

pytestmark = pytest.mark.integration

VERSION = 5  # the migration that adds chunks.token_estimate

# Both ends of every range of the CJK class, the characters just outside them, and other non-ASCII.
_EDGES = [
    0x3400, 0x33FF, 0x4DBF, 0x4DC0, 0x4E00, 0x9FFF, 0xA000, 0xF8FF, 0xF900, 0xFAFF, 0xFB00, 0x3005, 0x3007,
    0x1FFFF, 0x20000, 0x2FA1F, 0x2FA20, 0x3000, 0x303F, 0x3040, 0x309F, 0x30FF, 0x3100, 0x31EF, 0x31F0, 0x31FF,
    0xFF65, 0xFF66, 0xFF9F, 0xFFA0, 0xABFF, 0xAC00, 0xD7AF, 0xD7B0, 0x10FF, 0x1100, 0x11FF, 0x1200, 0x312F,
    0x3130, 0x318F, 0x3190, 0xFEFF, 0xFF00, 0xFFEF, 0xFFF0, 0x2014, 0x201C, 0x2026, 0xE9, 0x416, 0x1F600, 0x0A,
]  # fmt: skip


def _samples() -> list[str]:
    rng = random.Random(5)
    texts = ["", "a", "x" * 16, "x" * 17, "x" * 3200, chinese_prose(600, seed=1), english_prose(900, seed=2)]
    texts += ["a" * n for n in range(1, 400)]
    texts += [chr(c) for c in _EDGES]
    for _ in range(300):
        texts.append(
            "".join(chr(rng.choice(_EDGES)) if rng.random() < 0.3 else chr(rng.randint(0x20, 0x7E)) for _ in range(200))
        )
    return texts


async def test_sql_estimate_is_the_python_estimate(db: asyncpg.Pool) -> None:
    await migrate(db)
    texts = _samples()
    rows = await db.fetch(
        "SELECT token_estimate_upper(s) AS n FROM unnest($1::text[]) WITH ORDINALITY AS u (s, i) ORDER BY i", texts
    )
    assert [r["n"] for r in rows] == [estimate_tokens_upper(t) for t in texts]


async def test_migration_backfills_existing_chunks(infra: dict[str, str]) -> None:
    """A schema at the previous version, with chunks, then the migration: every row has its estimate."""
    schema = f"m{VERSION}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(infra["DATABASE_URL"])
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    pool = await asyncpg.create_pool(
        infra["DATABASE_URL"], min_size=1, max_size=2, server_settings={"search_path": schema}
    )
    try:
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version, name, sql in _migrations():
                if version < VERSION:
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
            await conn.execute("INSERT INTO blobs (sha256, data, size_bytes) VALUES ('b', 'x', 1)")
            await conn.execute("INSERT INTO tasks (id, owner) VALUES ('t', 'alice')")
            await conn.execute(
                "INSERT INTO documents (id, task_id, filename, blob_sha256, size_bytes)"
                " VALUES ('d', 't', 'd.txt', 'b', 1)"
            )
            chunks = [
                (english_prose(2_000, seed=3), "", english_prose(300, seed=4)),
                (chinese_prose(1_000, seed=5), chinese_prose(150, seed=6), "“after” — …"),
                ("", "", ""),
            ]
            await conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, context_before,"
                " context_after) VALUES ($1, 'd', $2, 0, 1, $3, $4, $5)",
                [(f"c{i}", i, text, before, after) for i, (text, before, after) in enumerate(chunks)],
            )
        assert f"{VERSION:04d}_chunk_token_estimates.sql" in await migrate(pool)
        stored = await pool.fetch("SELECT token_estimate FROM chunks ORDER BY chunk_index")
        assert [r["token_estimate"] for r in stored] == [estimate_tokens_upper(b + t + a) for t, b, a in chunks]
    finally:
        await pool.close()
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


async def test_chunker_stores_estimates_and_the_gateway_sums_them(pipeline: InProcessStack, db: asyncpg.Pool) -> None:
    files = [
        ("files", ("en.txt", english_prose(20_000, seed=41).encode(), "text/plain")),
        ("files", ("zh.txt", chinese_prose(8_000, seed=42).encode(), "text/plain")),
    ]
    async with pipeline.client() as client:
        created = (await client.post("/v1/tasks", files=files)).json()
        task = await wait_for_task(client, created["task_id"], pipeline)
        assert task["status"] == "COMPLETED", task
        assert task["estimate"]["remaining_chunks"] == 0 and task["estimate"]["prompt_tokens"] == 0

        task_id = created["task_id"]
        chunks = await db.fetch(
            "SELECT c.id, c.text, c.context_before, c.context_after, c.token_estimate FROM chunks c"
            " JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1",
            task_id,
        )
        assert len(chunks) > 2
        expected = {
            c["id"]: estimate_tokens_upper(c["context_before"] + c["text"] + c["context_after"]) for c in chunks
        }
        assert {c["id"]: c["token_estimate"] for c in chunks} == expected

        # Back to pending (as a retry does): the documents are counted again, the remaining work is the
        # sum of what is stored, and a row without a stored estimate (an older chunker's) is estimated
        # the same way.
        ids = list(expected)
        documents = [r["id"] for r in await db.fetch("SELECT id FROM documents WHERE task_id = $1", task_id)]
        try:
            await db.execute("UPDATE chunks SET status = 'PENDING' WHERE id = ANY($1)", ids)
            await db.execute("UPDATE chunks SET token_estimate = NULL WHERE id = $1", ids[0])
            async with db.acquire() as conn:
                await recount_documents(conn, documents)
            remaining = await queries.remaining_work(db, task_id)
            assert (remaining["chunks"], remaining["prompt_tokens"]) == (len(ids), sum(expected.values()))
            shown = (await client.get(f"/v1/tasks/{task_id}")).json()["estimate"]
            assert shown["remaining_chunks"] == len(ids)
            assert shown["prompt_tokens"] == sum(expected.values())
        finally:
            await db.executemany(
                "UPDATE chunks SET status = 'COMPLETED', token_estimate = $2 WHERE id = $1", list(expected.items())
            )
            async with db.acquire() as conn:
                await recount_documents(conn, documents)
