"""The gateway's SQL: registering tasks and their documents (the read side is docsum_shared.readmodel), and
each owner's re-drive gate."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from docsum_shared import taskrate
from docsum_shared.blobs import BlobStore, NewBlob
from docsum_shared.options import TaskOptions
from docsum_shared.scope import Scope
from docsum_shared.states import DocumentStatus, TaskStatus

from .idempotency import InFlight, Stored
from .uploads import UploadedFile


@dataclass(frozen=True)
class NewDocument:
    id: str
    file: UploadedFile
    filename: str


def new_id() -> str:
    """Task and document ids: 122 random bits, so nobody can guess another's."""
    return str(uuid.uuid4())


def new_blobs(documents: list[NewDocument]) -> list[NewBlob]:
    """The documents' files as blobs to store, each read again from its spool when written."""
    return [NewBlob(d.file.sha256, d.file.size, d.file.spool.blocks) for d in documents]


class TaskRepository:
    """The tasks the gateway registers: each task its owner's, stored whole or not at all."""

    def __init__(self, pool: asyncpg.Pool, blobs: BlobStore | None = None) -> None:
        self.pool = pool
        self.blobs = blobs or BlobStore()

    async def create_task(
        self,
        owner: str,
        title: str | None,
        documents: list[NewDocument],
        options: TaskOptions,
        *,
        deployment: str = "",
        webhook_id: str | None = None,
    ) -> str:
        """A new task of `owner` (PROCESSING) in `deployment` (whose summarizers take its work) with its
        documents (PENDING, in the given order) and their bytes, in one transaction: a document id already
        stored refuses the whole task (asyncpg.UniqueViolationError), and nothing of it is stored. In an
        object store, the files' objects are written first."""
        task_id = new_id()
        await self.blobs.upload(self.pool, new_blobs(documents))
        async with self.pool.acquire() as conn, conn.transaction():
            await _insert_task(conn, self.blobs, task_id, owner, title, documents, options, deployment, webhook_id)
        return task_id

    async def create_task_once(
        self,
        scope: Scope,
        key: KeyedRequest,
        title: str | None,
        documents: list[NewDocument],
        options: TaskOptions,
        answer: Callable[[str], str],
        *,
        webhook_id: str | None = None,
    ) -> Created | Stored | InFlight:
        """`create_task` under an idempotency key of the scope's owner in its deployment: the key's stored row
        if it has a live one (the caller compares fingerprints), InFlight while another transaction holds the
        key, else the new task and its answer (`answer(task_id)`, the JSON text, status `key.status_code`),
        stored with the key in the task's own transaction: a key never names a task that is not stored, nor a
        stored task its answer. Another deployment's key of the same owner and string is another key: its
        answer names a task this deployment does not have."""
        owner, deployment = scope.owner, scope.deployment
        task_id = new_id()
        # Objects before the transaction: a replay finds its blobs' rows and writes nothing again.
        await self.blobs.upload(self.pool, new_blobs(documents))
        async with self.pool.acquire() as conn, conn.transaction():
            # Every request with the key, on any replica, takes the key's lock first: the one that gets it
            # decides, the others are told to come back (409) instead of queueing behind an upload's copy.
            # Two keys sharing a lock (hashtext is 32 bits) only ever see a 409 they did not need.
            if not await conn.fetchval(
                "SELECT pg_try_advisory_xact_lock($1, hashtext($2 || chr(31) || $3 || chr(31) || $4))",
                KEY_LOCK_CLASS, deployment, owner, key.key,
            ):  # fmt: skip
                return InFlight()
            row = await conn.fetchrow(
                "SELECT fingerprint, status_code, response FROM idempotency_keys"
                " WHERE deployment = $1 AND owner = $2 AND key = $3 AND expires_at > now()",
                deployment,
                owner,
                key.key,
            )
            if row is not None:
                return Stored(row["fingerprint"], row["status_code"], row["response"])
            await _insert_task(conn, self.blobs, task_id, owner, title, documents, options, deployment, webhook_id)
            body = answer(task_id)
            # An expired row not pruned yet is the only one the key can have here (the lock is held, a live
            # row was just looked for): it is replaced.
            stored = await conn.fetchval(
                "INSERT INTO idempotency_keys"
                " (deployment, owner, key, fingerprint, task_id, status_code, response, expires_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))"
                " ON CONFLICT (deployment, owner, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,"
                " task_id = EXCLUDED.task_id, status_code = EXCLUDED.status_code, response = EXCLUDED.response,"
                " created_at = now(), expires_at = EXCLUDED.expires_at"
                " WHERE idempotency_keys.expires_at <= now() RETURNING true",
                deployment, owner, key.key, key.fingerprint, task_id, key.status_code, body, key.ttl_s,
            )  # fmt: skip
            if not stored:
                raise RuntimeError(f"idempotency key of {owner} stored by another transaction under its lock")
        return Created(task_id, body)

    async def task_status(self, task_id: str) -> str | None:
        """The task's status (None: no such task)."""
        return await self.pool.fetchval("SELECT status FROM tasks WHERE id = $1", task_id)


# The (class, hash) key space of the idempotency keys' advisory locks, apart from the blobs' and the
# single-key locks.
KEY_LOCK_CLASS = 0x6B657973  # "keys"


@dataclass(frozen=True)
class KeyedRequest:
    key: str
    fingerprint: str
    ttl_s: float  # how long the key is kept
    status_code: int  # of the answer a new task gets


@dataclass(frozen=True)
class Created:
    task_id: str
    body: str  # the answer's JSON text


async def prune_idempotency_keys(pool: asyncpg.Pool, at_most: int = 1000) -> int:
    """Delete up to `at_most` keys past their expiry; how many went."""
    deleted = await pool.fetchval(
        "WITH gone AS (DELETE FROM idempotency_keys WHERE ctid IN"
        " (SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT $1) RETURNING 1)"
        " SELECT count(*) FROM gone",
        at_most,
    )
    return int(deleted or 0)


async def _insert_task(
    conn: asyncpg.Connection,
    blobs: BlobStore,
    task_id: str,
    owner: str,
    title: str | None,
    documents: list[NewDocument],
    options: TaskOptions,
    deployment: str,
    webhook_id: str | None = None,
) -> None:
    """The task (in `deployment`, told to the webhook endpoint `webhook_id` names as well), its documents and
    their bytes (each distinct file once, by sha256: docsum_shared.blobs), in the caller's transaction."""
    await blobs.store(conn, new_blobs(documents))
    await conn.execute(
        "INSERT INTO tasks (id, owner, title, status, options, deployment, webhook_id, previous_task)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        task_id, owner, title, TaskStatus.PROCESSING, options.model_dump_json(), deployment, webhook_id,
        options.previous_task,
    )  # fmt: skip
    await conn.executemany(
        "INSERT INTO documents (id, task_id, position, filename, content_type, blob_sha256, size_bytes, status)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        [
            (
                d.id,
                task_id,
                i,
                d.filename,
                d.file.content_type,
                d.file.sha256,
                d.file.size,
                DocumentStatus.PENDING,
            )
            for i, d in enumerate(documents)
        ],
    )


@dataclass(frozen=True)
class Gate:
    """An owner's claim on re-driving: `claimed_at` is its token (a stale holder cannot release a newer one)."""

    owner: str
    claimed_at: datetime


@dataclass(frozen=True)
class Running:
    """The gate is held: another re-drive of the owner runs, and its lease is live."""


# The owner's row, locked: whether another re-drive holds the gate and its lease is live.
_GATE_RUNNING = """
SELECT coalesce(running_until > clock_timestamp(), false) FROM redrive_gates WHERE owner = $1 FOR UPDATE
"""


class RedriveGates:
    """Each owner's re-drive gate (table redrive_gates): one re-drive at a time across every gateway
    replica, held under a lease its re-drive renews while it publishes, and at most `per_minute` claims a
    minute (docsum_shared.taskrate's gate)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def claim(self, owner: str, per_minute: int, lease_s: float) -> Gate | Running | taskrate.Admission:
        """The owner's gate, held for `lease_s`; else why not: Running, or the refused Admission when
        `per_minute` (0: no limit) is spent. A refusal changes nothing stored."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO redrive_gates (owner) VALUES ($1) ON CONFLICT (owner) DO NOTHING", owner)
            if await conn.fetchval(_GATE_RUNNING, owner):
                return Running()
            if per_minute:
                admission = await taskrate.book(conn, "redrive_gates", owner, per_minute)
                if not admission.allowed:
                    return admission
            claimed_at = await conn.fetchval(
                "UPDATE redrive_gates SET claimed_at = clock_timestamp(),"
                " running_until = clock_timestamp() + make_interval(secs => $2) WHERE owner = $1 RETURNING claimed_at",
                owner,
                lease_s,
            )
        return Gate(owner, claimed_at)

    async def renew(self, gate: Gate, lease_s: float) -> None:
        """Hold the gate `lease_s` from now, if it is still this claim's."""
        await self.pool.execute(
            "UPDATE redrive_gates SET running_until = clock_timestamp() + make_interval(secs => $3)"
            " WHERE owner = $1 AND claimed_at = $2",
            gate.owner,
            gate.claimed_at,
            lease_s,
        )

    async def release(self, gate: Gate) -> None:
        """Open the gate, if it is still this claim's."""
        await self.pool.execute(
            "UPDATE redrive_gates SET running_until = NULL WHERE owner = $1 AND claimed_at = $2",
            gate.owner,
            gate.claimed_at,
        )
