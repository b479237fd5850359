"""The webhooks' SQL: an owner's endpoints, their deliveries' log, and the outbox's claims and attempts.

Every read and change of an endpoint names its owner and deployment (a `Scope`): another owner's endpoint,
or one registered through another deployment sharing the database, is no endpoint at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from docsum_shared.db import WEBHOOKS_DUE
from docsum_shared.scope import Scope

from .policy import Outcome

_ENDPOINT = "id, url, events, all_tasks, created_at"


def _owned(n: int, alias: str = "") -> str:
    """The scope's live endpoints, its deployment and owner the parameters $n and $n+1 (`alias`: "e." when
    the endpoints' table is named so)."""
    return f"{alias}deployment = ${n} AND {alias}owner = ${n + 1} AND {alias}disabled_at IS NULL"


@dataclass(frozen=True)
class Endpoint:
    id: str
    url: str
    events: list[str]
    all_tasks: bool
    created_at: datetime


@dataclass(frozen=True)
class Attempt:
    attempt: int
    at: datetime
    status: int | None
    error: str | None


@dataclass(frozen=True)
class Delivery:
    id: str  # the webhook-id, the same on every attempt
    event_type: str
    task_id: str | None
    attempts: int
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
    log: list[Attempt]


@dataclass(frozen=True)
class Due:
    """A delivery claimed for one attempt: where it goes, with what, signed by which secret."""

    id: str
    owner: str
    url: str
    secret: str
    payload: str
    attempt: int
    created_at: datetime


def _endpoint(row: asyncpg.Record) -> Endpoint:
    return Endpoint(row["id"], row["url"], list(row["events"]), row["all_tasks"], row["created_at"])


async def create_endpoint(
    pool: asyncpg.Pool, scope: Scope, endpoint_id: str, url: str, events: list[str], all_tasks: bool, secret: str
) -> Endpoint:
    row = await pool.fetchrow(
        "INSERT INTO webhook_endpoints (id, deployment, owner, url, events, all_tasks, secret)"
        f" VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_ENDPOINT}",
        endpoint_id, scope.deployment, scope.owner, url, events, all_tasks, secret,
    )  # fmt: skip
    return _endpoint(row)


async def list_endpoints(pool: asyncpg.Pool, scope: Scope) -> list[Endpoint]:
    rows = await pool.fetch(
        f"SELECT {_ENDPOINT} FROM webhook_endpoints WHERE {_owned(1)} ORDER BY created_at, id",
        scope.deployment, scope.owner,
    )  # fmt: skip
    return [_endpoint(r) for r in rows]


async def disable_endpoint(pool: asyncpg.Pool, scope: Scope, endpoint_id: str) -> Endpoint | None:
    """The endpoint disabled, and its deliveries not sent any more; None: the owner has no such endpoint."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            f"UPDATE webhook_endpoints SET disabled_at = now() WHERE id = $1 AND {_owned(2)}"
            f" RETURNING {_ENDPOINT}",
            endpoint_id, scope.deployment, scope.owner,
        )  # fmt: skip
        if row is not None:
            await conn.execute(
                "UPDATE webhook_deliveries SET next_attempt_at = NULL, last_error = 'the endpoint was deleted'"
                " WHERE endpoint_id = $1 AND next_attempt_at IS NOT NULL",
                endpoint_id,
            )
    return _endpoint(row) if row is not None else None


async def rotate_secret(pool: asyncpg.Pool, scope: Scope, endpoint_id: str, secret: str) -> Endpoint | None:
    """The endpoint signs with `secret` from its next attempt on; None: the owner has no such endpoint."""
    row = await pool.fetchrow(
        f"UPDATE webhook_endpoints SET secret = $2 WHERE id = $1 AND {_owned(3)}"
        f" RETURNING {_ENDPOINT}",
        endpoint_id, secret, scope.deployment, scope.owner,
    )  # fmt: skip
    return _endpoint(row) if row is not None else None


async def owned_endpoint(pool: asyncpg.Pool, scope: Scope, endpoint_id: str) -> bool:
    found = await pool.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = $1 AND {_owned(2)})",
        endpoint_id, scope.deployment, scope.owner,
    )  # fmt: skip
    return bool(found)


_DELIVERY = (
    "d.id, d.event_type, d.task_id, d.attempts, d.next_attempt_at, d.last_status, d.last_error, d.delivered_at,"
    " d.created_at, (SELECT coalesce(json_agg(json_build_array(a.attempt, a.at, a.status, a.error)"
    "  ORDER BY a.attempt), '[]') FROM webhook_attempts a WHERE a.delivery_id = d.id)::text AS log"
)


def _delivery(row: asyncpg.Record) -> Delivery:
    log = [Attempt(a[0], datetime.fromisoformat(a[1]), a[2], a[3]) for a in json.loads(row["log"])]
    return Delivery(
        row["id"], row["event_type"], row["task_id"], row["attempts"], row["next_attempt_at"], row["last_status"],
        row["last_error"], row["delivered_at"], row["created_at"], log,
    )  # fmt: skip


async def deliveries(pool: asyncpg.Pool, scope: Scope, endpoint_id: str, limit: int) -> list[Delivery] | None:
    """The endpoint's latest deliveries, newest first, each with its attempts; None: no such endpoint."""
    if not await owned_endpoint(pool, scope, endpoint_id):
        return None
    rows = await pool.fetch(
        f"SELECT {_DELIVERY} FROM webhook_deliveries d WHERE d.endpoint_id = $1"
        " ORDER BY d.created_at DESC, d.id LIMIT $2",
        endpoint_id, limit,
    )  # fmt: skip
    return [_delivery(r) for r in rows]


async def resend(pool: asyncpg.Pool, scope: Scope, endpoint_id: str, delivery_id: str) -> Delivery | None:
    """The delivery due again now (with its webhook-id and body), whether it was delivered, failing or
    given up; None: the owner's endpoint has no such delivery."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "UPDATE webhook_deliveries d SET next_attempt_at = now() FROM webhook_endpoints e"
            " WHERE d.id = $1 AND d.endpoint_id = $2 AND e.id = d.endpoint_id"
            f" AND {_owned(3, 'e.')} RETURNING {_DELIVERY}",
            delivery_id, endpoint_id, scope.deployment, scope.owner,
        )  # fmt: skip
        if row is not None:  # the senders wake at the commit
            await conn.execute("SELECT pg_notify($1, '')", WEBHOOKS_DUE)
    return _delivery(row) if row is not None else None


async def claim_due(pool: asyncpg.Pool, deployment: str, limit: int, lease_s: float) -> list[Due]:
    """Up to `limit` of the deployment's due deliveries, each claimed for one attempt: its next attempt
    moved `lease_s` on, so a sender killed before it records the attempt leaves it due again then, for any
    replica. SKIP LOCKED: replicas claiming at once take different rows. A deleted endpoint's are not
    claimed, even one an attempt in flight when it was deleted made due again."""
    rows = await pool.fetch(
        "WITH due AS (SELECT d.id FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id"
        "  WHERE d.next_attempt_at <= now() AND e.deployment = $3 AND e.disabled_at IS NULL"
        "  ORDER BY d.next_attempt_at LIMIT $1 FOR UPDATE OF d SKIP LOCKED)"
        " UPDATE webhook_deliveries d SET attempts = d.attempts + 1,"
        "  next_attempt_at = now() + make_interval(secs => $2)"
        " FROM due, webhook_endpoints e WHERE d.id = due.id AND e.id = d.endpoint_id"
        " RETURNING d.id, e.owner, e.url, e.secret, d.payload::text AS payload, d.attempts, d.created_at",
        limit, lease_s, deployment,
    )  # fmt: skip
    return [Due(r["id"], r["owner"], r["url"], r["secret"], r["payload"], r["attempts"], r["created_at"]) for r in rows]


async def record_attempt(pool: asyncpg.Pool, due: Due, outcome: Outcome, next_at: datetime | None) -> None:
    """The attempt's outcome, and the delivery done, due again at `next_at`, or given up (None). Only the
    claim of this very attempt writes it: a slower sender whose claim was taken over writes its log line
    only."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO webhook_attempts (delivery_id, attempt, status, error) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (delivery_id, attempt) DO NOTHING",
            due.id, due.attempt, outcome.status, outcome.error,
        )  # fmt: skip
        await conn.execute(
            "UPDATE webhook_deliveries SET last_status = $3, last_error = $4,"
            " delivered_at = CASE WHEN $4::text IS NULL THEN now() ELSE delivered_at END,"
            " next_attempt_at = CASE WHEN $4::text IS NULL THEN NULL ELSE $5::timestamptz END"
            " WHERE id = $1 AND attempts = $2",
            due.id, due.attempt, outcome.status, outcome.error, next_at,
        )  # fmt: skip


async def now(pool: asyncpg.Pool) -> datetime:
    """The database's clock: the one next_attempt_at is compared with."""
    value: datetime = await pool.fetchval("SELECT now()")
    return value


async def prune_deliveries(pool: asyncpg.Pool, retain_s: float, at_most: int = 1000) -> int:
    """Delete up to `at_most` deliveries done (delivered or given up) over `retain_s` ago, with their
    attempts; how many. One still due is never deleted, however old."""
    deleted = await pool.fetchval(
        "WITH gone AS (DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries"
        "  WHERE next_attempt_at IS NULL AND coalesce(delivered_at, created_at) < now() - make_interval(secs => $1)"
        "  LIMIT $2) RETURNING 1)"
        " SELECT count(*) FROM gone",
        retain_s, at_most,
    )  # fmt: skip
    return int(deleted or 0)
