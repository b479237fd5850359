"""The summarizer's SQL, including the lease that keeps one chunk in one process's hands."""

from __future__ import annotations

import contextlib
import enum
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from docsum_llm.openai.prompts import PROMPT_VERSION
from docsum_shared import metrics
from docsum_shared.cited import to_json
from docsum_shared.options import TaskOptions
from docsum_shared.positions import window
from docsum_shared.states import DOCUMENT_FINAL, TASK_TAKES_WORK, ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.together import Together

from .batches.policy import LIVE, ChunkLine, LineStatus
from .policy import Answer, StoredChunk
from .schedule import Priority, Rank, Waiting

UNFINISHED_TASK = list(TASK_TAKES_WORK)
UNFINISHED_CHUNK = [ChunkStatus.PENDING, ChunkStatus.SUMMARIZING]
# How often chunk progress refreshes its task's last_active_at: one hot row, not one write per chunk;
# well within reconcile's idle period, so a task making progress never looks idle.
ACTIVITY_EVERY_S = 5.0


def work_to_do_sql(deployment: str) -> str:
    """How many chunks of `deployment` want a summarizer's slot: waiting for their turn (not admitted yet),
    or admitted and not finished, of documents and tasks that take work. Kafka's lag no longer counts the
    waiting ones (they are announced only once admitted), so this is what KEDA scales the summarizer on
    (deploy/generate.py). A statement with its values written in: KEDA's PostgreSQL trigger takes a query,
    not parameters. Each branch reads one of the chunks' partial indexes (migration 0030)."""

    def listed(values: Sequence[str]) -> str:
        return ", ".join(_literal(v) for v in sorted(values))

    return (
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
        f" WHERE ((c.admitted_at IS NULL AND c.status = {_literal(ChunkStatus.PENDING)})"
        f" OR (c.admitted_at IS NOT NULL AND c.status IN ({listed(UNFINISHED_CHUNK)})))"
        f" AND t.status IN ({listed(UNFINISHED_TASK)}) AND d.status NOT IN ({listed(list(DOCUMENT_FINAL))})"
        f" AND t.deployment = {_literal(deployment)}"
    )


def _literal(value: str) -> str:
    """`value` as an SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


# One more final chunk on its document, in the statement that made it final (`moved`): exactly once.
_COUNT_FINAL = (
    "UPDATE documents d SET {column} = {column} + 1, truncated_parts = truncated_parts + {truncated},"
    " pending_token_estimate = greatest(0, pending_token_estimate - coalesce(moved.token_estimate, 0))"
    " FROM moved WHERE d.id = moved.document_id RETURNING 1"
)
_COUNT_FAILED = _COUNT_FINAL.format(column="chunks_failed", truncated="0")


class Claim(enum.Enum):
    TAKEN = "taken"  # the lease is ours: call the LLM
    HELD = "held"  # another live process holds it: wait
    # waiting for its next round (the round scheduler announces it when due), or for its slot in the fair
    # order (admission.py announces it when admitted)
    DEFERRED = "deferred"
    BATCHED = "batched"  # its line waits for the provider's batch: the batch driver announces it when answered
    UNAVAILABLE = "unavailable"  # final already, or the task no longer wants it


@dataclass(frozen=True)
class Claimed:
    """A claim's outcome, and the chunk as leased when it was TAKEN."""

    outcome: Claim
    chunk: StoredChunk | None = None


@dataclass(frozen=True)
class DueRound:
    """A chunk whose next round is due: what its announcement says, and the `retry_at` it was due at."""

    task_id: str
    document_id: str
    chunk_id: str
    chunk_index: int
    retry_at: Any


class ChunkRepository:
    def __init__(self, pool: asyncpg.Pool, *, reconcile_idle_s: float = 60.0, deployment: str = "") -> None:
        self.activity_every_s = min(ACTIVITY_EVERY_S, reconcile_idle_s / 4)
        self.pool = pool
        self.deployment = deployment  # whose chunks' next rounds this process announces (Settings.deployment)
        self._claim = Together(self._claim_rows)
        self._complete = Together(self._complete_rows)

    async def load(self, chunk_id: str) -> StoredChunk | None:
        row = await self.pool.fetchrow(
            "SELECT c.status, c.text, c.context_before, c.context_after, c.failures,"
            " d.status AS document_status, t.status AS task_status, t.options, t.owner, c.fair_tier, c.fair_start,"
            f" {_LINE}, {_WINDOW}"
            " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
            " WHERE c.id = $1",
            chunk_id,
        )
        return None if row is None else _stored(row)

    async def claim(self, chunk_id: str, holder: str, ttl_s: float) -> Claimed:
        """Take the chunk's lease if it is free, expired or already ours (a takeover counts as an
        interruption), and its task and document still want it; the chunk as leased when taken. The
        claims made at about the same time go as one statement (together.py)."""
        return await self._claim((chunk_id, holder, ttl_s))

    async def _claim_rows(self, calls: list[tuple[str, str, float]]) -> list[Claimed]:
        ids, holders, ttls = (list(column) for column in zip(*calls, strict=True))
        rows = await self.pool.fetch(
            _CLAIM, ids, holders, ttls, ChunkStatus.SUMMARIZING, UNFINISHED_TASK, ChunkStatus.PENDING,
            sorted(DOCUMENT_FINAL), LIVE,
        )  # fmt: skip
        taken = {row["id"] for row in rows if row["taken"]}
        claimed: list[Claimed] = []
        for row in rows:  # in the order of the calls
            if row["taken"]:
                if row["taken_over"]:  # its task is recovering (marked in the same statement)
                    metrics.LEASE_TAKEOVERS.inc()
                claimed.append(Claimed(Claim.TAKEN, _stored(row)))
            elif row["was"] == ChunkStatus.SUMMARIZING or row["id"] in taken:  # held: by another, or this round
                claimed.append(Claimed(Claim.HELD))
            elif row["was"] == ChunkStatus.PENDING and row["batched"]:
                claimed.append(Claimed(Claim.BATCHED))
            else:
                claimed.append(Claimed(Claim.DEFERRED if row["deferred"] else Claim.UNAVAILABLE))
        return claimed

    async def renew(self, chunk_id: str, holder: str, ttl_s: float) -> None:
        """Extend the lease; a call still running is its task's progress too (at most every few seconds
        per task), so reconcile does not re-drive a task whose one slow call is still being answered."""
        async with self.pool.acquire() as conn, conn.transaction():
            renewed = await conn.fetchval(
                "UPDATE chunks SET lease_expires_at = now() + make_interval(secs => $3)"
                " WHERE id = $1 AND lease_owner = $2 AND status = $4 RETURNING document_id",
                chunk_id, holder, ttl_s, ChunkStatus.SUMMARIZING,
            )  # fmt: skip
            if renewed is not None:
                await conn.execute(
                    "UPDATE tasks SET last_active_at = now()"
                    " WHERE id = (SELECT task_id FROM documents WHERE id = $1)"
                    " AND last_active_at < now() - make_interval(secs => $2)",
                    renewed,
                    self.activity_every_s,
                )

    async def release(self, chunk_id: str, holder: str, *, retry_in_s: float | None = None) -> None:
        """Hand the chunk back (shutting down mid-call: the next owner need not wait for expiry); with
        `retry_in_s`, it waits that long for its next round, in this row rather than in any consumer."""
        await self.pool.execute(
            "UPDATE chunks SET status = $3, lease_owner = NULL, lease_expires_at = NULL,"
            " retry_at = CASE WHEN $5::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => $5) END"
            " WHERE id = $1 AND lease_owner = $2 AND status = $4",
            chunk_id, holder, ChunkStatus.PENDING, ChunkStatus.SUMMARIZING, retry_in_s,
        )  # fmt: skip

    async def queue_line(
        self,
        chunk_id: str,
        holder: str,
        task_id: str,
        owner: str,
        custom_id: str,
        request: dict[str, Any],
        *,
        endpoint: str,
    ) -> bool:
        """The leased chunk's request queued as a line of its task's next batch at `endpoint` (a dropped
        line queued again), and the chunk handed back, waiting for the batch: both or neither. False when
        the lease was no longer ours (nothing queued)."""
        async with self.pool.acquire() as conn, conn.transaction():
            released = await conn.fetchval(
                "UPDATE chunks SET status = $3, lease_owner = NULL, lease_expires_at = NULL, retry_at = NULL"
                " WHERE id = $1 AND lease_owner = $2 AND status = $4 RETURNING 1",
                chunk_id, holder, ChunkStatus.PENDING, ChunkStatus.SUMMARIZING,
            )  # fmt: skip
            if released is None:
                return False
            await conn.execute(
                "INSERT INTO batch_lines (chunk_id, task_id, owner, custom_id, request, status, endpoint)"
                " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $8)"
                " ON CONFLICT (chunk_id) DO UPDATE SET custom_id = $4, request = $5::jsonb, status = $6,"
                "   endpoint = $8, batch_id = NULL, announce = false, error = NULL, created_at = now(),"
                "   updated_at = now()"
                " WHERE batch_lines.status = $7",
                chunk_id, task_id, owner, custom_id, json.dumps(request), LineStatus.QUEUED, LineStatus.DROPPED,
                endpoint,
            )  # fmt: skip
            return True

    async def due_rounds(self, limit: int) -> list[DueRound]:
        """The deployment's chunks whose next round is due (announce them, then `announced`: a crash
        between the two announces them again, which is harmless). Another deployment's are its own
        scheduler's: announced on these topics, they would be summarized by this deployment's summarizers."""
        rows = await self.pool.fetch(
            "SELECT d.task_id, c.document_id, c.id AS chunk_id, c.chunk_index, c.retry_at"
            " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
            " WHERE c.retry_at <= now() AND t.deployment = $2 ORDER BY c.retry_at LIMIT $1",
            limit, self.deployment,
        )  # fmt: skip
        return [DueRound(**dict(r)) for r in rows]

    async def announced(self, due: list[DueRound]) -> None:
        """Those chunks were announced: off the waiting list (unless deferred again meanwhile)."""
        await self.pool.executemany(
            "UPDATE chunks SET retry_at = NULL WHERE id = $1 AND retry_at = $2",
            [(r.chunk_id, r.retry_at) for r in due],
        )

    async def complete(self, chunk_id: str, task_id: str, answer: Answer, *, weight: float = 1.0) -> bool:
        """The chunk COMPLETED with its summary and its sentences, counted once on its document (the same
        statement, so exactly once), its owner's share corrected from the estimate charged to what the
        answer cost (`answer.served`, in tokens; the counter is in tokens / `weight`), and its task active
        (at most every few seconds: one hot row, not a write per chunk). False if it was final already
        (or gone). The completions made at about the same time go as one statement (together.py)."""
        sentences = None if answer.sentences is None else to_json(answer.sentences)
        return await self._complete(
            (chunk_id, task_id, answer.text, answer.model, answer.truncated, sentences, answer.served, weight)
        )

    async def _complete_rows(
        self, calls: list[tuple[str, str, str, str, bool, str | None, int | None, float]]
    ) -> list[bool]:
        ids, task_ids, texts, models, truncated, sentences, served, weights = (
            list(column) for column in zip(*calls, strict=True)
        )
        moved = await self.pool.fetch(
            _COMPLETE, ids, task_ids, texts, models, truncated, sentences, ChunkStatus.COMPLETED, PROMPT_VERSION,
            UNFINISHED_CHUNK, self.activity_every_s, served, weights,
        )  # fmt: skip
        final = {row["id"] for row in moved}
        out: list[bool] = []
        for chunk_id in ids:  # a chunk completed twice in one round is final once, by the first
            out.append(chunk_id in final)
            final.discard(chunk_id)
        return out

    async def fail(self, chunk_id: str, error: str) -> bool:
        """The chunk FAILED with its error, counted once on its document; False if it was final already."""
        moved = await self.pool.fetchval(
            "WITH moved AS (UPDATE chunks SET status = $3, error = $2, lease_owner = NULL, lease_expires_at = NULL,"
            "   retry_at = NULL, updated_at = now()"
            "   WHERE id = $1 AND status = ANY($4::text[]) RETURNING document_id, token_estimate),"
            f" counted AS ({_COUNT_FAILED})"
            " SELECT count(*) FROM counted",
            chunk_id, error, ChunkStatus.FAILED, UNFINISHED_CHUNK,
        )  # fmt: skip
        return bool(moved)

    async def record_failure(self, chunk_id: str, error: str, *, retry_now: bool) -> None:
        """A failed attempt: its error and one more failure on the row; with `retry_now` one more
        attempt too, the try that follows at once (a claim counts its own)."""
        await self.pool.execute(
            "UPDATE chunks SET error = $2, failures = failures + 1, attempts = attempts + $3::int"
            " WHERE id = $1 AND status = $4",
            chunk_id, error, int(retry_now), ChunkStatus.SUMMARIZING,
        )  # fmt: skip


@dataclass(frozen=True)
class Admitted:
    """A chunk given its slot: what its announcement says, and what its owner was charged for it."""

    task_id: str
    document_id: str
    chunk_id: str
    chunk_index: int
    charged: float
    trace_id: str | None = None  # the envelope's of the event it was cut for
    traceparent: str | None = None  # the trace it was cut in (telemetry.carried)


def _admitted(row: asyncpg.Record) -> Admitted:
    return Admitted(
        row["task_id"], row["document_id"], row["id"], row["chunk_index"], row["charged"], row["trace_id"],
        row["traceparent"],
    )  # fmt: skip


@dataclass(frozen=True)
class Holding:
    """Per owner: its chunks holding slots, the lowest start tag of those ranked (ShareView.started), and
    the tokens they were charged."""

    running: dict[str, int]
    started: dict[str, float]
    in_hand: dict[str, float]


@dataclass(frozen=True)
class ShareView:
    """What the admission decides from: the slots in use per owner, the work waiting per task, the
    owners' counters."""

    running: dict[str, int]
    waiting: list[Waiting]
    counters: dict[str, float]
    # Per owner holding slots: the lowest start tag of its ranked chunks holding them (those the
    # summarizers call first, as they serve what they hold lowest rank first), and the tokens they were
    # charged at admission (its counter is ahead of where they started by that much).
    started: dict[str, float] = field(default_factory=dict)
    in_hand: dict[str, float] = field(default_factory=dict)


class AdmissionTurn:
    """One admission of `deployment`'s work, in one transaction under its admission lock: read, admit
    and charge, all or nothing (a crash in between admits and charges nothing). Every statement reads and
    writes only the tasks of `deployment` and its owners' counters: other deployments sharing the
    database have their own topics, summarizers and slots."""

    def __init__(
        self, conn: asyncpg.Connection, *, deployment: str, hold_s: float, default_tokens: int, answer_tokens: int
    ) -> None:
        self._conn = conn
        self.deployment = deployment
        self.hold_s, self.default_tokens, self.answer_tokens = hold_s, default_tokens, answer_tokens

    async def holding(self) -> Holding:
        """The slots in use per owner: admitted chunks under a live lease, or admitted within `hold_s`
        and not leased yet (their announcement on its way), of tasks that take work; the lowest rank of
        each owner's, and what they were charged. A chunk waiting for its next round or for the
        provider's batch holds no slot."""
        rows = await self._conn.fetch(
            "SELECT t.owner, count(*) AS n, min(c.fair_start) AS started, sum(c.charged)::float8 AS charged"
            " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
            " WHERE c.admitted_at IS NOT NULL AND c.status = ANY($1::text[]) AND t.deployment = $8"
            " AND t.status = ANY($2::text[]) AND d.status <> ALL($3::text[])"
            " AND (c.status = $4 AND c.lease_expires_at > now()"
            "   OR c.status = $5 AND c.retry_at IS NULL AND c.admitted_at > now() - make_interval(secs => $6)"
            "   AND NOT EXISTS (SELECT 1 FROM batch_lines b WHERE b.chunk_id = c.id AND b.status = ANY($7::text[])))"
            " GROUP BY t.owner",
            UNFINISHED_CHUNK, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), ChunkStatus.SUMMARIZING, ChunkStatus.PENDING,
            self.hold_s, LIVE, self.deployment,
        )  # fmt: skip
        return Holding(
            {r["owner"]: r["n"] for r in rows},
            {r["owner"]: r["started"] for r in rows if r["started"] is not None},
            {r["owner"]: r["charged"] or 0.0 for r in rows},
        )

    async def waiting(self) -> list[Waiting]:
        """The chunks waiting for admission, per task: how many, their estimated tokens, the oldest's wait."""
        # Counted per document first, from the waiting chunks' own index: their documents and tasks are
        # then looked up once each, not once a chunk (1.5 ms a call with 424 chunks waiting, most of it
        # those lookups, run at every admission).
        rows = await self._conn.fetch(
            "WITH c AS (SELECT document_id, count(*) AS items,"
            "   sum(coalesce(token_estimate, $4::int) + $5::int) AS tokens, min(ready_at) AS oldest"
            "   FROM chunks WHERE admitted_at IS NULL AND status = $1 GROUP BY document_id)"
            f" SELECT d.task_id, t.owner, {_PRIORITY} AS priority, sum(c.items)::bigint AS items,"
            " sum(c.tokens)::bigint AS tokens, extract(epoch FROM now() - min(c.oldest))::float8 AS oldest_s"
            " FROM c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
            " WHERE t.status = ANY($2::text[]) AND d.status <> ALL($3::text[]) AND t.deployment = $6"
            " GROUP BY d.task_id, t.owner, 3",
            ChunkStatus.PENDING, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), self.default_tokens, self.answer_tokens,
            self.deployment,
        )  # fmt: skip
        return [
            Waiting(r["task_id"], r["owner"], Priority(r["priority"]), r["items"], r["tokens"], r["oldest_s"])
            for r in rows
        ]

    async def live_inflight(self, live_s: float) -> list[int]:
        """The calls in flight (DOCSUM_LLM_MAX_INFLIGHT) of each summarizer of the deployment seen within
        `live_s`: the processes the admitted chunks are for."""
        rows = await self._conn.fetch(
            "SELECT llm_max_inflight FROM summarizer_replicas"
            " WHERE deployment = $1 AND seen_at > now() - make_interval(secs => $2)",
            self.deployment, live_s,
        )  # fmt: skip
        return [r["llm_max_inflight"] for r in rows]

    async def counters(self, owners: list[str]) -> dict[str, float]:
        rows = await self._conn.fetch(
            "SELECT owner, counter FROM owner_shares WHERE deployment = $1 AND owner = ANY($2::text[])",
            self.deployment, owners,
        )  # fmt: skip
        return {r["owner"]: r["counter"] for r in rows}

    async def admit(self, owner: str, priority: Priority, n: int, ranks: list[Rank]) -> list[Admitted]:
        """`owner`'s `n` oldest chunks waiting at `priority` admitted: announced from now on (marked so:
        re-drives leave them to this announcement), each charged its estimate and given its rank, the
        oldest the first of `ranks` (one a chunk, lowest first)."""
        rows = await self._conn.fetch(
            "WITH locked AS (SELECT c.id, c.ready_at FROM chunks c JOIN documents d ON d.id = c.document_id"
            "   JOIN tasks t ON t.id = d.task_id"
            f"  WHERE c.admitted_at IS NULL AND c.status = $1 AND t.owner = $2 AND {_PRIORITY} = $3"
            "   AND t.status = ANY($5::text[]) AND d.status <> ALL($6::text[]) AND t.deployment = $9"
            "   ORDER BY c.ready_at, c.id LIMIT $4 FOR UPDATE OF c SKIP LOCKED),"
            # Numbered apart: a locking SELECT cannot number its rows (no window function with FOR UPDATE).
            " picked AS (SELECT id, row_number() OVER (ORDER BY ready_at, id) AS i FROM locked)"
            " UPDATE chunks c SET admitted_at = now(), announced_at = now(),"
            "   charged = coalesce(c.token_estimate, $7::int) + $8::int,"
            "   fair_tier = ($10::smallint[])[picked.i], fair_start = ($11::float8[])[picked.i]"
            " FROM picked, documents d WHERE c.id = picked.id AND d.id = c.document_id AND c.admitted_at IS NULL"
            " RETURNING d.task_id, c.document_id, c.id, c.chunk_index, c.charged, c.trace_id, c.traceparent",
            ChunkStatus.PENDING, owner, priority, n, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), self.default_tokens,
            self.answer_tokens, self.deployment, [r.tier for r in ranks], [r.start for r in ranks],
        )  # fmt: skip
        return [_admitted(r) for r in rows]

    async def admit_oldest(self, n: int) -> list[tuple[str, Admitted]]:
        """The `n` chunks waiting longest admitted, whoever's and at whatever priority (first in, first
        out), each charged its estimate; with each its owner."""
        rows = await self._conn.fetch(
            "WITH picked AS (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
            "   JOIN tasks t ON t.id = d.task_id"
            "   WHERE c.admitted_at IS NULL AND c.status = $1"
            "   AND t.status = ANY($3::text[]) AND d.status <> ALL($4::text[]) AND t.deployment = $7"
            "   ORDER BY c.ready_at, c.id LIMIT $2 FOR UPDATE OF c SKIP LOCKED)"
            " UPDATE chunks c SET admitted_at = now(), announced_at = now(),"
            "   charged = coalesce(c.token_estimate, $5::int) + $6::int"
            " FROM picked, documents d JOIN tasks t ON t.id = d.task_id"
            " WHERE c.id = picked.id AND d.id = c.document_id AND c.admitted_at IS NULL"
            " RETURNING t.owner, d.task_id, c.document_id, c.id, c.chunk_index, c.charged, c.trace_id, c.traceparent",
            ChunkStatus.PENDING, n, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), self.default_tokens, self.answer_tokens,
            self.deployment,
        )  # fmt: skip
        return [(r["owner"], _admitted(r)) for r in rows]

    async def unclaimed(self) -> list[Admitted]:
        """Admitted chunks no summarizer has leased for `hold_s` (their announcement lost: a crash between
        the admission's commit and its publish, or a message dead-lettered), of tasks that take work:
        marked admitted again now, to be announced again (a duplicate is harmless: the lease decides)."""
        rows = await self._conn.fetch(
            "UPDATE chunks c SET admitted_at = now(), announced_at = now()"
            " FROM documents d JOIN tasks t ON t.id = d.task_id"
            " WHERE d.id = c.document_id AND c.admitted_at < now() - make_interval(secs => $1)"
            " AND c.status = $2 AND c.retry_at IS NULL AND c.lease_owner IS NULL"
            " AND t.status = ANY($3::text[]) AND d.status <> ALL($4::text[]) AND t.deployment = $6"
            " AND NOT EXISTS (SELECT 1 FROM batch_lines b WHERE b.chunk_id = c.id AND b.status = ANY($5::text[]))"
            " RETURNING d.task_id, c.document_id, c.id, c.chunk_index, c.charged, c.trace_id, c.traceparent",
            self.hold_s, ChunkStatus.PENDING, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), LIVE, self.deployment,
        )  # fmt: skip
        return [_admitted(r) for r in rows]

    async def charge(self, owner: str, *, at_least: float, virtual_tokens: float) -> None:
        """`owner`'s counter in this deployment lifted to `at_least` (back from idle), then advanced by
        `virtual_tokens`: as an increment, so that the corrections other replicas make meanwhile are kept."""
        await self._conn.execute(
            "INSERT INTO owner_shares (deployment, owner, counter, lifted)"
            " VALUES ($4, $1, $2::float8 + $3::float8, $2::float8)"
            " ON CONFLICT (deployment, owner) DO UPDATE"
            " SET counter = greatest(owner_shares.counter, $2::float8) + $3::float8,"
            " lifted = owner_shares.lifted + greatest(0, $2::float8 - owner_shares.counter), updated_at = now()",
            owner, at_least, virtual_tokens, self.deployment,
        )  # fmt: skip

    async def touch_waiting(self, every_s: float) -> None:
        """Tasks with chunks waiting for their turn are not idle: reconcile and expiry leave them to the
        admission (which, if it stops, stops marking them). At most every `every_s` per task."""
        await self._conn.execute(
            "UPDATE tasks SET last_active_at = now() WHERE id IN (SELECT DISTINCT d.task_id FROM chunks c"
            "   JOIN documents d ON d.id = c.document_id WHERE c.admitted_at IS NULL AND c.status = $1)"
            " AND status = ANY($2::text[]) AND last_active_at < now() - make_interval(secs => $3)"
            " AND deployment = $4",
            ChunkStatus.PENDING, UNFINISHED_TASK, every_s, self.deployment,
        )  # fmt: skip


class Admissions:
    """The admission's transactions of `deployment` (its topic prefix: Settings.deployment); one process
    of the deployment at a time admits (an advisory lock per deployment), whichever replica."""

    def __init__(
        self, pool: asyncpg.Pool, *, deployment: str, hold_s: float, default_tokens: int, answer_tokens: int
    ) -> None:
        self.pool = pool
        self.deployment = deployment
        self.hold_s, self.default_tokens, self.answer_tokens = hold_s, default_tokens, answer_tokens

    async def ready_by_priority(self) -> dict[Priority, int]:
        """The chunks of the deployment waiting for admission, of tasks that take work, per priority."""
        rows = await self.pool.fetch(
            f"SELECT {_PRIORITY} AS priority, count(*) AS n"
            " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
            " WHERE c.admitted_at IS NULL AND c.status = $1 AND t.status = ANY($2::text[])"
            " AND d.status <> ALL($3::text[]) AND t.deployment = $4 GROUP BY 1",
            ChunkStatus.PENDING, UNFINISHED_TASK, sorted(DOCUMENT_FINAL), self.deployment,
        )  # fmt: skip
        return {Priority(r["priority"]): r["n"] for r in rows}

    async def alive(self, holder: str, llm_max_inflight: int, *, forget_s: float) -> None:
        """`holder` (a summarizer process of the deployment) is alive with `llm_max_inflight` calls at
        once; the rows of the deployment not refreshed for `forget_s` (processes that died) deleted."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO summarizer_replicas (deployment, holder, llm_max_inflight) VALUES ($1, $2, $3)"
                " ON CONFLICT (deployment, holder) DO UPDATE SET llm_max_inflight = $3, seen_at = now()",
                self.deployment, holder, llm_max_inflight,
            )  # fmt: skip
            await conn.execute(
                "DELETE FROM summarizer_replicas WHERE deployment = $1"
                " AND seen_at < now() - make_interval(secs => $2)",
                self.deployment, forget_s,
            )  # fmt: skip

    async def gone(self, holder: str) -> None:
        """`holder` stopped: its calls no longer count in the window."""
        await self.pool.execute(
            "DELETE FROM summarizer_replicas WHERE deployment = $1 AND holder = $2", self.deployment, holder
        )

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[AdmissionTurn | None]:
        """This process's turn to admit its deployment's work (None: another replica of the deployment
        holds it); committed when the block ends well. Deployments sharing the database admit each their
        own at the same time."""
        async with self.pool.acquire() as conn, conn.transaction():
            lock = f"{ADMISSION_LOCK} {self.deployment}"
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock(hashtext($1))", lock):
                yield None
                return
            yield AdmissionTurn(
                conn,
                deployment=self.deployment,
                hold_s=self.hold_s,
                default_tokens=self.default_tokens,
                answer_tokens=self.answer_tokens,
            )


# Followed by the deployment: the lock of its admission (two deployments whose names hash alike only
# take turns, which changes no admission).
ADMISSION_LOCK = "docsum summarizer admission"
# A task's priority, as its options say (normal when they do not).
_PRIORITY = "coalesce(t.options->>'priority', 'normal')"


def _stored(row: asyncpg.Record) -> StoredChunk:
    return StoredChunk(
        status=ChunkStatus(row["status"]),
        text=row["text"],
        context_before=row["context_before"],
        context_after=row["context_after"],
        document_status=DocumentStatus(row["document_status"]),
        task_status=TaskStatus(row["task_status"]),
        options=TaskOptions.from_stored(row["options"]),
        failures=row["failures"],
        owner=row["owner"],
        line=None if row["line_status"] is None else ChunkLine(LineStatus(row["line_status"]), row["line_key"]),
        start_char=row["start_char"],
        positions=None
        if row["position_unit"] is None
        else window(row["position_unit"], row["units_before"], tuple(row["unit_starts"] or ())),
        rank=None if row["fair_start"] is None else Rank(row["fair_tier"], row["fair_start"]),
    )


# The chunk's batch line, if it has one (batch mode).
_LINE = (
    "(SELECT status FROM batch_lines WHERE chunk_id = c.id) AS line_status,"
    " (SELECT custom_id FROM batch_lines WHERE chunk_id = c.id) AS line_key"
)

# Where the chunk starts in its document's text, and the document's unit starts around the chunk: how
# many start at or before it, and those inside it, as the chunker stored them with the chunk; for a row
# cut before it did, counted from the document's unit starts (never the whole list: a long text has many
# lines).
_WINDOW = (
    "c.start_char, (SELECT position_unit FROM document_texts WHERE document_id = c.document_id) AS position_unit,"
    " coalesce(c.units_before, (SELECT count(*) FROM document_texts x, unnest(x.position_starts) u"
    "   WHERE x.document_id = c.document_id AND u <= c.start_char)) AS units_before,"
    " CASE WHEN c.units_before IS NOT NULL THEN c.unit_starts"
    "   ELSE (SELECT array_agg(u ORDER BY u) FROM document_texts x, unnest(x.position_starts) u"
    "   WHERE x.document_id = c.document_id AND u > c.start_char AND u < c.end_char) END AS unit_starts"
)


# Claims, one a row of the arrays $1 (chunk), $2 (holder), $3 (lease seconds): each row of the result,
# in the same order, says whether its claim was taken (the chunk as leased), and else what held the
# chunk. Rows are locked in id order (two replicas claiming the same chunks wait for each other, never
# deadlock); a chunk claimed twice in one round is taken once. A takeover marks its task recovering.
_CLAIM = (
    "WITH w AS (SELECT * FROM unnest($1::text[], $2::text[], $3::float8[]) WITH ORDINALITY AS w(id, holder, ttl, n)),"
    " old AS MATERIALIZED (SELECT id, status AS was, lease_owner AS held_by FROM chunks"
    "   WHERE id IN (SELECT id FROM w) ORDER BY id FOR UPDATE),"
    " taken AS (UPDATE chunks c SET status = $4, attempts = c.attempts + 1,"
    "   interruptions = c.interruptions + (c.status = $4 AND c.lease_owner IS DISTINCT FROM w.holder)::int,"
    "   lease_owner = w.holder, lease_expires_at = now() + make_interval(secs => w.ttl), updated_at = now(),"
    "   announced_at = NULL"
    "   FROM w, old, documents d JOIN tasks t ON t.id = d.task_id"
    "   WHERE c.id = w.id AND old.id = c.id AND d.id = c.document_id"
    "   AND t.status = ANY($5::text[]) AND d.status <> ALL($7::text[])"  # not paused or ended meanwhile
    "   AND NOT EXISTS (SELECT 1 FROM batch_lines b WHERE b.chunk_id = c.id AND b.status = ANY($8::text[]))"
    "   AND c.admitted_at IS NOT NULL"  # given its slot in the fair order (admission.py)
    "   AND (c.status = $6 AND (c.retry_at IS NULL OR c.retry_at <= now()) OR (c.status = $4"
    "     AND (c.lease_owner = w.holder OR c.lease_expires_at IS NULL OR c.lease_expires_at < now())))"
    "   RETURNING w.n, c.id, d.task_id, (old.was = $4 AND old.held_by IS DISTINCT FROM w.holder) AS taken_over,"
    "     c.status, c.text, c.context_before, c.context_after, c.failures,"
    "     d.status AS document_status, t.status AS task_status, t.options, t.owner, c.fair_tier, c.fair_start,"
    f"    {_LINE}, {_WINDOW}),"
    # An announcement taken up, whatever came of it (one of a held task is dropped): the next re-drive
    # announces the chunk again if it still needs it (migration 0028). A chunk taken is cleared by its
    # own update: one statement must not update a row twice.
    " consumed AS (UPDATE chunks c SET announced_at = NULL FROM old"
    "   WHERE c.id = old.id AND c.announced_at IS NOT NULL AND c.id NOT IN (SELECT id FROM taken)),"
    " recovering AS (UPDATE tasks SET recovering_since = coalesce(recovering_since, now())"
    "   WHERE id IN (SELECT task_id FROM taken WHERE taken_over))"
    " SELECT w.n, w.id, taken.n IS NOT NULL AS taken, taken.taken_over, taken.status, taken.text,"
    "   taken.context_before, taken.context_after, taken.failures, taken.document_status, taken.task_status,"
    "   taken.options, taken.owner, taken.line_status, taken.line_key, taken.start_char, taken.position_unit,"
    "   taken.units_before, taken.unit_starts, taken.fair_tier, taken.fair_start,"
    "   f.status AS was, (f.retry_at > now() OR f.status = $6 AND f.admitted_at IS NULL) AS deferred,"
    "   EXISTS (SELECT 1 FROM batch_lines b WHERE b.chunk_id = w.id AND b.status = ANY($8::text[])) AS batched"
    " FROM w LEFT JOIN taken ON taken.n = w.n LEFT JOIN chunks f ON f.id = w.id ORDER BY w.n"
)

# Completions, one a row of the arrays $1 (chunk), $2 (task), $3 (summary), $4 (model), $5 (cut at its
# bound), $6 (sentences): the chunks that became COMPLETED, counted on their documents.
_COMPLETE = (
    # A chunk completed twice in one round: its first completion only (an UPDATE joined to two rows of
    # one chunk takes either, which PostgreSQL does not say).
    "WITH w AS (SELECT DISTINCT ON (id) * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[],"
    "   $6::jsonb[], $11::float8[], $12::float8[])"
    "   WITH ORDINALITY AS w(id, task_id, summary, model, truncated, sentences, served, weight, n) ORDER BY id, n),"
    # What each chunk was charged before this statement (the statement's snapshot), for the correction.
    " was AS (SELECT id, charged FROM chunks WHERE id IN (SELECT id FROM w)),"
    " moved AS (UPDATE chunks c SET status = $7, summary = w.summary, summary_model = w.model, error = NULL,"
    "   summary_truncated = w.truncated, summary_prompt_version = $8, lease_owner = NULL, lease_expires_at = NULL,"
    "   retry_at = NULL, updated_at = now(), summary_sentences = w.sentences,"
    "   charged = coalesce(w.served, c.charged)"
    "   FROM w WHERE c.id = w.id AND c.status = ANY($9::text[])"
    "   RETURNING c.id, c.document_id, c.token_estimate, w.truncated, w.task_id, w.served, w.weight),"
    # The owners' shares corrected by what the answers cost against what was charged at admission, in
    # the statement that made them final: exactly once. A counter never goes below 0.
    " corrected AS (UPDATE owner_shares s SET counter = greatest(0, s.counter + x.delta), updated_at = now()"
    "   FROM (SELECT t.deployment, t.owner, sum((m.served - was.charged) / m.weight) AS delta"
    "     FROM moved m JOIN was ON was.id = m.id JOIN tasks t ON t.id = m.task_id"
    "     WHERE m.served IS NOT NULL GROUP BY t.deployment, t.owner) x"
    "   WHERE s.deployment = x.deployment AND s.owner = x.owner AND x.delta <> 0),"
    " counted AS (UPDATE documents d SET chunks_completed = chunks_completed + m.n,"
    "   truncated_parts = truncated_parts + m.truncated,"
    "   pending_token_estimate = greatest(0, pending_token_estimate - m.tokens)"
    "   FROM (SELECT document_id, count(*) AS n, count(*) FILTER (WHERE truncated) AS truncated,"
    "     sum(coalesce(token_estimate, 0)) AS tokens FROM moved GROUP BY document_id) m"
    "   WHERE d.id = m.document_id),"
    " active AS (UPDATE tasks SET last_active_at = now()"
    "   WHERE id IN (SELECT task_id FROM w) AND last_active_at < now() - make_interval(secs => $10))"
    " SELECT id FROM moved"
)
