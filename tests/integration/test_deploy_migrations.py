"""The one-shot migration entry point that compose and the Kubernetes Job run (`python -m docsum_shared.migrations`)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources

import asyncpg
import pytest

from tests.integration.conftest import ROOT, create_database, drop_database

pytestmark = pytest.mark.integration


def _migrate(database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSUM_")}
    return subprocess.run(
        [sys.executable, "-m", "docsum_shared.migrations"],
        env={**env, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


async def test_migrates_an_empty_database_once_and_exits_0(infra: dict[str, str]) -> None:
    url = await create_database(infra["DATABASE_URL"], "docsum_migrate")
    try:
        files = sorted(e.name for e in resources.files("docsum_shared.migrations").iterdir() if e.name.endswith(".sql"))

        first = _migrate(url)
        assert first.returncode == 0, first.stderr
        assert f"({len(files)} migration(s) applied now)" in first.stderr
        conn = await asyncpg.connect(url)
        try:
            applied = [r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations ORDER BY version")]
            assert applied == files
            assert await conn.fetchval("SELECT to_regclass('tasks') IS NOT NULL")
            # Large values are compressed with lz4 (Debian's and the postgres image's servers have it).
            compressed = await conn.fetch(
                "SELECT attrelid::regclass::text AS t, attname, attcompression::text FROM pg_attribute"
                " WHERE attrelid IN ('blobs'::regclass, 'document_texts'::regclass, 'chunks'::regclass)"
                " AND attname IN ('data', 'text', 'position_starts', 'context_before', 'context_after')"
            )
            assert {(r["t"], r["attname"], r["attcompression"]) for r in compressed} == {
                ("blobs", "data", "l"),
                ("document_texts", "text", "l"),
                ("document_texts", "position_starts", "l"),
                ("chunks", "text", "l"),
                ("chunks", "context_before", "l"),
                ("chunks", "context_after", "l"),
            }
        finally:
            await conn.close()

        again = _migrate(url)
        assert again.returncode == 0, again.stderr
        assert "(0 migration(s) applied now)" in again.stderr
    finally:
        await drop_database(url)
