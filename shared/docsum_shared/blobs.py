"""Document bytes in PostgreSQL, stored once by sha256 whoever submits them (the gateway's uploads, the
documents other systems publish onto Kafka).

Writers of the same hash serialize on a transaction-scoped advisory lock per hash, so that a concurrent
upload and publication of the same bytes wait for each other instead of colliding on the primary key.
"""

from __future__ import annotations

import hashlib

import asyncpg

# The (class, hash) key space of advisory locks, apart from the single-key locks other services take.
BLOB_LOCK_CLASS = 0x626C6F62  # "blob"


async def lock_blobs(conn: asyncpg.Connection, hashes: list[str]) -> None:
    """Take the lock of each hash (in order, so two writers never deadlock), in the caller's transaction;
    two hashes sharing a lock key only wait for each other."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock($2, hashtext(h)) FROM (SELECT unnest($1::text[]) AS h ORDER BY 1) s",
        sorted(set(hashes)),
        BLOB_LOCK_CLASS,
    )


async def store_blob(conn: asyncpg.Connection, data: bytes) -> str:
    """Store `data` unless its hash is stored already, in the caller's transaction; returns the sha256."""
    sha256 = hashlib.sha256(data).hexdigest()
    await lock_blobs(conn, [sha256])
    await conn.execute(
        "INSERT INTO blobs (sha256, data, size_bytes) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
        sha256,
        data,
        len(data),
    )
    return sha256
