"""Postgres access: the connection pool and the versioned migrations, applied once under a lock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import asyncpg

from .retry import keep_running, retry_until, until_deadline

log = logging.getLogger(__name__)

# Notified in the chunker's transaction that stores a document's chunks: the summarizers' admission
# wakes at its commit.
CHUNKS_STORED = "docsum_chunks_stored"
# Notified in the transaction that writes webhook deliveries to the outbox (and by a resend): the gateways'
# sending loop wakes at its commit.
WEBHOOKS_DUE = "docsum_webhooks_due"

# Any number would do; it only has to be the same for every process that migrates this database.
_MIGRATION_LOCK_ID = 0x646F6373756D  # "docsum"


async def connect_pool(database_url: str, *, max_size: int = 10, wait_s: float = 60.0) -> asyncpg.Pool:
    """Open a pool, waiting for the database to come up (it may be restarting) for up to `wait_s`."""

    async def connect() -> asyncpg.Pool:
        return await asyncpg.create_pool(database_url, min_size=1, max_size=max_size, reset=_keep_session)

    def waiting(exc: Exception) -> None:
        log.warning("database not reachable yet (%s); retrying", exc)

    return await retry_until(connect, until_deadline(wait_s, waiting))


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection is given back to the pool with, beyond asyncpg's own rollback of a transaction
    left open: nothing. asyncpg's default sends `RESET ALL; UNLISTEN *; CLOSE ALL; ...` on every release,
    a round trip per query; no docsum code leaves session state on a pooled connection (no SET, no
    LISTEN — the progress streams listen on a connection of their own —, no held cursor, and session
    advisory locks are unlocked in `finally`)."""


async def listen(database_url: str, channel: str, notified: Callable[[str], Any], what: str) -> None:
    """Call `notified(payload)` for each notification on `channel`, until cancelled: LISTEN on a connection
    of its own (a pooled one is given back without UNLISTEN), again after the database restarts. A
    notification sent while no connection listens is lost: each listener also looks on its own."""

    async def once() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.add_listener(channel, lambda _conn, _pid, _channel, payload: notified(payload))
            while not conn.is_closed():
                await asyncio.sleep(5.0)
                await conn.execute("SELECT 1")  # notices a dead connection
        finally:
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 2)

    await keep_running(what, once)


def _migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in resources.files("docsum_shared.migrations").iterdir():
        match = re.fullmatch(r"(\d+)_.*\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found)


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply the migrations not applied yet; concurrent callers wait for each other. Returns the new ones."""
    applied: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_ID)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for version, name, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
                log.info("applied migration %s", name)
                applied.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_ID)
    return applied
