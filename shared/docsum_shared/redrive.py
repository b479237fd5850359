"""Re-drive: from Postgres state alone, the next event every unfinished piece of a task needs.

Used by resume, retry, reconcile and start-up recovery. It never depends on Kafka retention or on
consumer offsets, and publishing its events twice is harmless: every handler is idempotent.

Harmless is not free: each event is a message a service reads. So a re-drive leaves alone whatever is
moving — a chunk under a live lease, and for reconcile a task or document active within its idle
time — and a task is claimed in PostgreSQL before its events are built (`prepare_redrive`): of any number
of re-drives racing for one task, on any replica, one re-drives it and the others find it active.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg
from aiokafka import AIOKafkaProducer

from . import metrics, telemetry
from .events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
)
from .handlers import Sender
from .kafka import publish
from .levels import SizeLevel, size_level
from .settings import Settings
from .states import CHUNK_FINAL, DOCUMENT_FINAL, LINE_LIVE, TASK_TAKES_WORK, ChunkStatus, DocumentStatus

log = logging.getLogger(__name__)
# Resume, retry and reconcile: the work a task still owes, from the state stored in PostgreSQL.
REDRIVES = Sender(
    "the re-drives", emits=(DocumentSubmitted, DocumentParsed, ChunkCreated, ChunkSummarized, DocumentMerged)
)


@dataclass(frozen=True)
class DocumentRow:
    id: str
    status: DocumentStatus
    filename: str
    content_type: str | None
    blob_sha256: str | None  # None: no bytes stored (another system's document that failed without them)
    size_bytes: int | None
    text_chars: int | None
    size_level: SizeLevel | None
    active: bool = False  # moved within the re-drive's idle time: it is being worked on, leave it


@dataclass(frozen=True)
class ChunkToRedrive:
    id: str
    index: int
    status: ChunkStatus
    leased: bool = False  # a summarizer holds a live lease on it: its call is running


def plan(
    task_id: str,
    owner: str,
    documents: list[DocumentRow],
    chunks: dict[str, list[ChunkToRedrive]],
    expected_documents: int | None = None,
) -> list[Event]:
    """The events that move every unfinished document of the task one step on. `expected_documents`: the
    number of documents the task will have (another system's task, whose documents arrive one by one);
    until that many exist, the task is not finished whatever state they are in. An active document and
    a leased chunk get nothing: they are moving already."""
    events: list[Event] = []
    for doc in documents:
        if doc.active:
            continue
        if doc.status in (DocumentStatus.PENDING, DocumentStatus.PARSING):
            if doc.blob_sha256 is None or doc.size_bytes is None:
                continue  # no bytes to parse: its producer publishes it again (after `docsum retry`)
            events.append(
                DocumentSubmitted(
                    task_id=task_id, document_id=doc.id, owner=owner, filename=doc.filename,
                    content_type=doc.content_type, blob_sha256=doc.blob_sha256, size_bytes=doc.size_bytes,
                )
            )  # fmt: skip
        elif doc.status is DocumentStatus.CHUNKING:
            text_chars = doc.text_chars or 0
            # The parser stores the level with the CHUNKING status in one update; the fallback (default
            # thresholds) only keeps a row without one moving.
            level = doc.size_level or size_level(text_chars)
            events.append(DocumentParsed(task_id=task_id, document_id=doc.id, text_chars=text_chars, size_level=level))
        elif doc.status is DocumentStatus.SUMMARIZING:
            rows = chunks.get(doc.id, [])
            unfinished = [c for c in rows if c.status not in CHUNK_FINAL]
            for c in (c for c in unfinished if not c.leased):
                events.append(ChunkCreated(task_id=task_id, document_id=doc.id, chunk_id=c.id, chunk_index=c.index))
            if rows and not unfinished:  # every chunk final: only the merge is missing
                last = rows[-1]
                events.append(
                    ChunkSummarized(task_id=task_id, document_id=doc.id, chunk_id=last.id, chunk_index=last.index)
                )
    complete = len(documents) >= (expected_documents or 1)
    if complete and all(d.status in DOCUMENT_FINAL for d in documents):  # only the task merge is missing
        last_doc = documents[-1]
        outcome = DocumentOutcome.COMPLETED if last_doc.status is DocumentStatus.COMPLETED else DocumentOutcome.FAILED
        events.append(DocumentMerged(task_id=task_id, document_id=last_doc.id, outcome=outcome))
    return events


@dataclass(frozen=True)
class Redrive:
    """A task claimed for a re-drive and the events it needs, built but not yet published. `context`:
    the re-drive's own trace (its events carry its id), to publish them in."""

    task_id: str
    events: list[Event]
    context: contextvars.Context


# The claim: a guarded transition of the task's row, so racing re-drives (replicas, the merger's
# reconcile, an owner's requests) take turns. A reconcile (`$2` not null) claims only an unfinished
# task nobody moved for `$2` seconds; a resume or retry (null) has just moved the task itself. The
# claim marks the task active, which is what makes the next reconcile leave it alone.
_CLAIM_TASK = """
UPDATE tasks SET redrives = redrives + 1, last_active_at = now(),
       recovering_since = CASE WHEN $3 THEN coalesce(recovering_since, now()) ELSE recovering_since END
 WHERE id = $1
   AND ($2::float8 IS NULL OR (status = ANY($4::text[]) AND last_active_at <= now() - make_interval(secs => $2)))
RETURNING owner, expected_documents
"""


async def prepare_redrive(
    pool: asyncpg.Pool, settings: Settings, task_id: str, *, idle_s: float | None = None, bounded: bool = False
) -> Redrive | None:
    """Claim the task and build what its unfinished work needs; None if it was not claimed (gone, or
    for a reconcile: finished, or active within `idle_s` — another re-drive may just have taken it).

    `idle_s` (reconcile): documents active within it are left alone too. `bounded` (the merger's
    reconcile): a document found where the previous re-drive left it, `redrive_limit` times in a row, is
    FAILED with its last error instead of being re-driven again.
    """
    task = await pool.fetchrow(_CLAIM_TASK, task_id, idle_s, bounded, list(TASK_TAKES_WORK))
    if task is None:
        return None
    if bounded:
        await fail_stalled(pool, task_id, settings.redrive_limit)
    documents = await _documents(pool, task_id, idle_s)
    chunks = await _chunks(pool, task_id)
    # A re-drive starts a trace of its own (linked to what asked for it): its events' trace id is the new one.
    with telemetry.root_span("redrive", {"task_id": task_id}) as trace_id:
        # Built in a worker thread: thousands of events would otherwise hold the event loop (and every
        # request the process serves) for as long as they take.
        events = await asyncio.to_thread(
            _traced_plan, trace_id, task_id, task["owner"], documents, chunks, task["expected_documents"]
        )
        context = contextvars.copy_context()
    # The merger's reconcile is a recovery (the work was stuck); a resume, a retry or an owner's
    # reconcile is the owner's wish.
    metrics.REDRIVES.labels("reconcile" if bounded else "requested").inc()
    return Redrive(task_id, events, context)


def _traced_plan(
    trace_id: str | None,
    task_id: str,
    owner: str,
    documents: list[DocumentRow],
    chunks: dict[str, list[ChunkToRedrive]],
    expected_documents: int | None,
) -> list[Event]:
    events = plan(task_id, owner, documents, chunks, expected_documents)
    return events if trace_id is None else [event.model_copy(update={"trace_id": trace_id}) for event in events]


async def _documents(pool: asyncpg.Pool, task_id: str, idle_s: float | None) -> list[DocumentRow]:
    rows = await pool.fetch(
        "SELECT id, status, filename, content_type, blob_sha256, size_bytes, text_chars, size_level,"
        " ($2::float8 IS NOT NULL AND updated_at > now() - make_interval(secs => $2)) AS active"
        " FROM documents WHERE task_id = $1 ORDER BY position",
        task_id,
        idle_s,
    )
    return [
        DocumentRow(
            **{
                **dict(r),
                "status": DocumentStatus(r["status"]),
                "size_level": SizeLevel(r["size_level"]) if r["size_level"] else None,
            }
        )
        for r in rows
    ]


async def _chunks(pool: asyncpg.Pool, task_id: str) -> dict[str, list[ChunkToRedrive]]:
    rows = await pool.fetch(
        "SELECT c.document_id, c.id, c.chunk_index, c.status,"
        " (c.status = $3 AND c.lease_expires_at > now()) AS leased"
        " FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.task_id = $1 AND d.status = $2 ORDER BY c.document_id, c.chunk_index",
        task_id,
        DocumentStatus.SUMMARIZING,
        ChunkStatus.SUMMARIZING,
    )
    chunks: dict[str, list[ChunkToRedrive]] = {}
    for r in rows:
        row = ChunkToRedrive(r["id"], r["chunk_index"], ChunkStatus(r["status"]), bool(r["leased"]))
        chunks.setdefault(r["document_id"], []).append(row)
    return chunks


def batches(events: Sequence[Event], size: int) -> list[Sequence[Event]]:
    """The events in slices of at most `size`, in order."""
    return [events[i : i + size] for i in range(0, len(events), size)]


async def publish_redrives(
    producer: AIOKafkaProducer,
    settings: Settings,
    redrives: Sequence[Redrive],
    between_batches: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Publish the re-drives' events in batches of `redrive_batch_events`, each acknowledged before the
    next is sent (the producer's buffer and the loop's time stay bounded whatever the backlog), each in
    its re-drive's trace; `between_batches` runs after each batch. Returns how many were published."""
    published = 0
    for redrive in redrives:
        for batch in batches(redrive.events, settings.redrive_batch_events):
            # In the re-drive's context: its trace, in the events' traceparent headers.
            await asyncio.create_task(
                publish(producer, settings, batch, sender=REDRIVES), context=redrive.context.copy()
            )
            published += len(batch)
            if between_batches is not None:
                await between_batches()
    return published


async def redrive_task(
    pool: asyncpg.Pool,
    producer: AIOKafkaProducer,
    settings: Settings,
    task_id: str,
    *,
    idle_s: float | None = None,
    bounded: bool = False,
) -> int:
    """Claim the task, then publish what its unfinished work needs; returns how many events were
    published (0 when it was not claimed). See `prepare_redrive` for `idle_s` and `bounded`."""
    redrive = await prepare_redrive(pool, settings, task_id, idle_s=idle_s, bounded=bounded)
    if redrive is None:
        return 0
    return await publish_redrives(producer, settings, [redrive])


# A document's progress, as a re-drive sees it: its status, its chunks done and failed, its merge
# nodes, and the LLM calls of its whole task (a document waiting in a queue behind its task's other
# work is not stuck). A live lease anywhere in the task is progress in itself (a call is running), and
# so is a line waiting for the provider's batch (batch mode).
_MARK_STALLED = """
WITH progress AS (
    SELECT d.id,
           concat_ws('|', d.status,
                     count(c.id) FILTER (WHERE c.status = $2),
                     count(c.id) FILTER (WHERE c.status = $3),
                     (SELECT count(*) FROM merge_nodes m WHERE m.scope_id = d.id),
                     (SELECT count(*) FROM llm_calls l WHERE l.task_id = $1)) AS mark,
           EXISTS (SELECT 1 FROM chunks lc JOIN documents ld ON ld.id = lc.document_id
                   WHERE ld.task_id = $1 AND lc.status = $4 AND lc.lease_expires_at > now())
           OR EXISTS (SELECT 1 FROM batch_lines bl
                      WHERE bl.task_id = $1 AND bl.status = ANY($6::text[])) AS leased
    FROM documents d LEFT JOIN chunks c ON c.document_id = d.id
    WHERE d.task_id = $1 AND d.status <> ALL($5::text[])
    GROUP BY d.id
)
UPDATE documents d
   SET stalled_redrives = CASE WHEN p.leased OR d.redrive_mark IS DISTINCT FROM p.mark THEN 0
                               ELSE d.stalled_redrives + 1 END,
       redrive_mark = p.mark
  FROM progress p
 WHERE d.id = p.id
RETURNING d.id, d.stalled_redrives
"""

_FAIL_STALLED = """
UPDATE documents d
   SET status = $3, updated_at = now(),
       error = concat('no progress after ', d.stalled_redrives, ' re-drives',
                      ': ' || coalesce((SELECT c.error FROM chunks c WHERE c.document_id = d.id AND c.error IS NOT NULL
                                        ORDER BY c.updated_at DESC LIMIT 1), d.error))
 WHERE d.id = ANY($1::text[]) AND d.status <> ALL($2::text[])
RETURNING d.id, d.error
"""


async def fail_stalled(pool: asyncpg.Pool, task_id: str, limit: int) -> list[str]:
    """Count one more re-drive of each unfinished document of the task (reset by any progress); FAIL
    those re-driven `limit` times without progress. Returns the ids failed."""
    final = list(DOCUMENT_FINAL)
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            _MARK_STALLED,
            task_id,
            ChunkStatus.COMPLETED,
            ChunkStatus.FAILED,
            ChunkStatus.SUMMARIZING,
            final,
            list(LINE_LIVE),
        )
        stalled = [r["id"] for r in rows if r["stalled_redrives"] >= limit]
        if not stalled:
            return []
        failed = await conn.fetch(_FAIL_STALLED, stalled, final, DocumentStatus.FAILED)
    for row in failed:
        log.warning("document %s of task %s failed: %s", row["id"], task_id, row["error"])
    return [r["id"] for r in failed]
