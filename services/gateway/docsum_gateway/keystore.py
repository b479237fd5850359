"""The SQL of the stored API keys and of the per-owner task rate limit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from docsum_shared import taskrate

from .security import hash_matches, new_key, split_key

_KEY_COLUMNS = "id AS key_id, owner, name, created_at, last_used_at, revoked_at"


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    owner: str
    name: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


async def create_key(pool: asyncpg.Pool, owner: str, name: str | None) -> tuple[KeyRecord, str]:
    """A new key for `owner`: its record and the key itself (which is not stored)."""
    made = new_key()
    row = await pool.fetchrow(
        f"INSERT INTO api_keys (id, owner, name, key_hash) VALUES ($1, $2, $3, $4) RETURNING {_KEY_COLUMNS}",
        made.key_id,
        owner,
        name,
        made.key_hash,
    )
    return KeyRecord(**dict(row)), made.key


async def list_keys(pool: asyncpg.Pool, owner: str | None, include_revoked: bool) -> list[KeyRecord]:
    rows = await pool.fetch(
        f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE ($1::text IS NULL OR owner = $1)"
        " AND ($2 OR revoked_at IS NULL) ORDER BY created_at, id",
        owner,
        include_revoked,
    )
    return [KeyRecord(**dict(r)) for r in rows]


async def revoke_key(pool: asyncpg.Pool, key_id: str) -> KeyRecord | None:
    """Revoke the key (a revoked one keeps its first revocation time); None if there is no such key."""
    row = await pool.fetchrow(
        f"UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING {_KEY_COLUMNS}",
        key_id,
    )
    return KeyRecord(**dict(row)) if row else None


async def owner_of_key(pool: asyncpg.Pool, presented: str) -> str | None:
    """The owner of a stored, unrevoked key, looked up on every request (no cache: a revoked key is
    refused from the next request on). The id finds the row; the secret's hash is compared in
    constant time. Marks the key used, at most once a minute."""
    parts = split_key(presented)
    if parts is None:
        return None
    key_id, secret = parts
    row = await pool.fetchrow(
        "SELECT owner, key_hash, last_used_at IS NULL OR last_used_at < now() - interval '1 minute' AS stale"
        " FROM api_keys WHERE id = $1 AND revoked_at IS NULL",
        key_id,
    )
    if not hash_matches(row["key_hash"] if row else None, secret) or row is None:
        return None
    if row["stale"]:
        await pool.execute("UPDATE api_keys SET last_used_at = now() WHERE id = $1", key_id)
    return str(row["owner"])


async def has_live_key(pool: asyncpg.Pool, owner: str) -> bool:
    """Whether `owner` still has an unrevoked stored key (a WebSocket ticket dies with its owner's keys)."""
    return bool(
        await pool.fetchval("SELECT EXISTS (SELECT 1 FROM api_keys WHERE owner = $1 AND revoked_at IS NULL)", owner)
    )


async def live_key_ids(pool: asyncpg.Pool, key_ids: list[str]) -> set[str]:
    """Those of the stored keys that are not revoked (the open streams' keys, checked in one query)."""
    rows = await pool.fetch("SELECT id FROM api_keys WHERE id = ANY($1::text[]) AND revoked_at IS NULL", key_ids)
    return {r["id"] for r in rows}


async def use_ticket(pool: asyncpg.Pool, nonce: str, expires: int) -> bool:
    """Record a ticket's nonce: True the first time, on any replica, before or after any restart;
    False ever after. The nonces of expired tickets go on the way (an expired ticket is refused for
    its age, so its nonce need not be kept; a minute of grace covers clocks that disagree)."""
    return bool(
        await pool.fetchval(
            "WITH expired AS (DELETE FROM stream_ticket_nonces WHERE expires_at < now() - interval '1 minute')"
            " INSERT INTO stream_ticket_nonces (nonce, expires_at) VALUES ($1, to_timestamp($2))"
            " ON CONFLICT (nonce) DO NOTHING RETURNING true",
            nonce,
            float(expires),
        )
    )


async def admit_task(pool: asyncpg.Pool, owner: str, per_minute: int) -> taskrate.Admission:
    """Book one task creation for `owner` against the limit shared by every gateway replica: the row
    is locked while the decision is made, on the database's clock."""
    async with pool.acquire() as conn, conn.transaction():
        return await taskrate.book_task(conn, owner, per_minute)
