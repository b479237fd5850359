"""The per-owner limit on new tasks (DOCSUM_TASKS_PER_MINUTE), one for every way a task is created: the
gateway's POST /v1/tasks and a producer's first message of a task on Kafka. Counted in PostgreSQL
(table task_rate_limits), so every gateway and parser replica shares it.

The same gate counts an owner's re-drives (DOCSUM_REDRIVES_PER_MINUTE, table redrive_gates): `book`
takes the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import asyncpg


@dataclass(frozen=True)
class Admission:
    allowed: bool
    tat: float  # the owner's theoretical arrival time to store (unchanged when refused)
    retry_after_s: int  # when refused: whole seconds until a request would be allowed; else 0


def admit_task(tat: float | None, now: float, per_minute: int) -> Admission:
    """The generic cell rate algorithm (as for the LLM calls in docsum_shared.ratelimit), refusing
    instead of waiting: each task pushes the owner's theoretical arrival time (TAT) on by 60/rate
    seconds, and a task is refused while the TAT runs more than a minute ahead of now. An owner who
    was quiet for a minute may thus create `per_minute` tasks at once (the burst), and after that one
    every 60/rate seconds: over any stretch of time, at most the burst plus the rate.
    """
    interval = 60.0 / per_minute
    start = max(tat if tat is not None else now, now)
    tolerance = 60.0 - interval  # how far ahead of now the TAT may be before this task is booked
    if start - now > tolerance + 1e-9:
        return Admission(False, start, max(1, math.ceil(start - now - tolerance)))
    return Admission(True, start + interval, 0)


# The tables an owner's rate is counted in: each has `owner text PRIMARY KEY` and `tat float8 NOT NULL`.
RateTable = Literal["task_rate_limits", "redrive_gates"]


async def book(conn: asyncpg.Connection, table: RateTable, owner: str, per_minute: int) -> Admission:
    """Book one arrival for `owner` in `table`, on the database's clock, with the owner's row locked while
    the decision is made. Call it inside a transaction: the booking commits (or rolls back) with it, so a
    caller that books and then does what it booked in the same transaction counts exactly what was done."""
    if table not in get_args(RateTable):  # the name goes into the SQL: only the known tables
        raise ValueError(f"no rate is counted in {table!r}")
    await conn.execute(f"INSERT INTO {table} (owner, tat) VALUES ($1, 0) ON CONFLICT (owner) DO NOTHING", owner)
    row = await conn.fetchrow(
        f"SELECT tat, extract(epoch FROM clock_timestamp())::float8 AS now FROM {table} WHERE owner = $1 FOR UPDATE",
        owner,
    )
    decision = admit_task(row["tat"], row["now"], per_minute)
    if decision.allowed:
        await conn.execute(f"UPDATE {table} SET tat = $2 WHERE owner = $1", owner, decision.tat)
    return decision


async def book_task(conn: asyncpg.Connection, owner: str, per_minute: int) -> Admission:
    """Book one task creation for `owner` (see `book`)."""
    return await book(conn, "task_rate_limits", owner, per_minute)
