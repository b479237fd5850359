"""Re-drive: from Postgres state alone, the next event every unfinished piece of a task needs.

Used by resume, retry, reconcile and start-up recovery. It never depends on Kafka retention or on
consumer offsets, and publishing its events twice is harmless: every handler is idempotent.

Harmless is not free: each event is a message a service reads. So a re-drive leaves alone whatever is
moving — a chunk under a live lease, a chunk whose announcement by an earlier re-drive is still on its
way (`chunks.announced_at`, cleared by the summarizer's claim when it takes the announcement up), and for
reconcile a task or document active within its idle time — and a task is claimed in PostgreSQL before
its events are counted (`prepare_redrive`): of any number of re-drives racing for one task, on any
replica, one re-drives it and the others find it active.

Nor is memory free: a backlog of a million idle chunks is a million events. A claimed re-drive holds
only their count; it reads its chunks page by page (keyset on the chunk index) as it publishes, and
builds the next batch only once the one before is acknowledged (`RedriveEvents.batches`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from . import metrics, outbox, telemetry
from .events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
)
from .handlers import Publish, Sender
from .levels import SizeLevel, size_level
from .settings import Settings
from .states import CHUNK_FINAL, DOCUMENT_FINAL, LINE_LIVE, TASK_TAKES_WORK, ChunkStatus, DocumentStatus

log = logging.getLogger(__name__)
# Resume, retry and reconcile: the work a task still owes, from the state stored in PostgreSQL.
REDRIVES = Sender(
    "the re-drives", emits=(DocumentSubmitted, DocumentParsed, ChunkCreated, ChunkSummarized, DocumentMerged)
)


@dataclass(frozen=True)
class ChunkTally:
    """A SUMMARIZING document's chunks as counted for a re-drive (their rows are read page by page when
    it publishes): how many are unfinished, how many of those it announces, and the last one."""

    unfinished: int
    to_announce: int
    last: ChunkToRedrive | None


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
    chunks: ChunkTally | None = None  # SUMMARIZING, as read from PostgreSQL (`plan` takes the rows instead)


@dataclass(frozen=True)
class ChunkToRedrive:
    id: str
    index: int
    status: ChunkStatus
    leased: bool = False  # a summarizer holds a live lease on it: its call is running
    # PENDING, announced by a re-drive less than `redrive_announced_s` ago, and no summarizer has taken
    # that announcement up yet: it is on its way (queued behind other work), announcing it again adds a
    # message and nothing else.
    announced: bool = False


def plan(
    task_id: str,
    owner: str,
    documents: list[DocumentRow],
    chunks: dict[str, list[ChunkToRedrive]],
    expected_documents: int | None = None,
) -> list[Event]:
    """The events that move every unfinished document of the task one step on, from its rows in memory
    (a re-drive reads them page by page instead: `RedriveEvents`). `expected_documents`: the number of
    documents the task will have (another system's task, whose documents arrive one by one); until that
    many exist, the task is not finished whatever state they are in. An active document, a leased chunk
    and a chunk whose announcement is on its way get nothing: they are moving already."""
    events: list[Event] = []
    for doc in documents:
        if doc.active:
            continue
        if doc.status is DocumentStatus.SUMMARIZING:
            rows = chunks.get(doc.id, [])
            if rows and all(c.status in CHUNK_FINAL for c in rows):
                events.append(merge_step(task_id, doc.id, rows[-1]))
            else:
                events.extend(chunk_steps(task_id, doc.id, rows))
        elif (event := document_step(task_id, owner, doc)) is not None:
            events.append(event)
    if (merged := task_step(task_id, documents, expected_documents)) is not None:
        events.append(merged)
    return events


def document_step(task_id: str, owner: str, doc: DocumentRow) -> Event | None:
    """The next event of a document that is not summarizing (one of those moves chunk by chunk)."""
    if doc.status in (DocumentStatus.PENDING, DocumentStatus.PARSING):
        if doc.blob_sha256 is None or doc.size_bytes is None:
            return None  # no bytes to parse: its producer publishes it again (after `docsum retry`)
        return DocumentSubmitted(
            task_id=task_id, document_id=doc.id, owner=owner, filename=doc.filename,
            content_type=doc.content_type, blob_sha256=doc.blob_sha256, size_bytes=doc.size_bytes,
        )  # fmt: skip
    if doc.status is DocumentStatus.CHUNKING:
        text_chars = doc.text_chars or 0
        # The parser stores the level with the CHUNKING status in one update; the fallback (default
        # thresholds) only keeps a row without one moving.
        level = doc.size_level or size_level(text_chars)
        return DocumentParsed(task_id=task_id, document_id=doc.id, text_chars=text_chars, size_level=level)
    return None


def chunk_steps(task_id: str, document_id: str, chunks: Iterable[ChunkToRedrive]) -> Iterator[ChunkCreated]:
    """An announcement of each unfinished chunk that is neither leased nor announced already, in order."""
    for c in chunks:
        if c.status not in CHUNK_FINAL and not c.leased and not c.announced:
            yield ChunkCreated(task_id=task_id, document_id=document_id, chunk_id=c.id, chunk_index=c.index)


def merge_step(task_id: str, document_id: str, last: ChunkToRedrive) -> ChunkSummarized:
    """Every chunk of the document is final: only its merge is missing."""
    return ChunkSummarized(task_id=task_id, document_id=document_id, chunk_id=last.id, chunk_index=last.index)


def task_step(task_id: str, documents: Sequence[DocumentRow], expected_documents: int | None) -> DocumentMerged | None:
    """Every document exists and is final: only the task merge is missing."""
    complete = len(documents) >= (expected_documents or 1)
    if not complete or not all(d.status in DOCUMENT_FINAL for d in documents):
        return None
    last_doc = documents[-1]
    outcome = DocumentOutcome.COMPLETED if last_doc.status is DocumentStatus.COMPLETED else DocumentOutcome.FAILED
    return DocumentMerged(task_id=task_id, document_id=last_doc.id, outcome=outcome)


def summarizing_done(doc: DocumentRow) -> bool:
    """A summarizing document whose chunks are all final (and exist): its merge is what it needs."""
    tally = doc.chunks
    return tally is not None and tally.last is not None and tally.unfinished == 0


def events_of(task_id: str, owner: str, doc: DocumentRow) -> int:
    """How many events a re-drive publishes for the document (read with its chunks counted)."""
    if doc.active:
        return 0
    if doc.status is DocumentStatus.SUMMARIZING:
        if summarizing_done(doc):
            return 1
        return doc.chunks.to_announce if doc.chunks is not None else 0
    return int(document_step(task_id, owner, doc) is not None)


@dataclass(frozen=True)
class RedriveEvents:
    """What a claimed re-drive publishes: counted when it was claimed (`len`), read from PostgreSQL and
    built a batch at a time when it is published (`batches`), so that the events in memory never
    outnumber one batch, whatever the backlog (a million idle chunks are a million events)."""

    pool: asyncpg.Pool
    task_id: str
    owner: str
    expected_documents: int | None
    idle_s: float | None
    announced_s: float
    trace_id: str | None
    counted: int

    def __len__(self) -> int:
        return self.counted

    async def batches(self, size: int) -> AsyncIterator[list[Event]]:
        """The events, `size` at a time, each batch built only once the one before was taken."""
        batch: list[Event] = []
        async for event in self._events(size):
            batch.append(event if self.trace_id is None else event.model_copy(update={"trace_id": self.trace_id}))
            if len(batch) >= size:
                yield batch
                batch = []  # the batch yielded is the caller's alone from here
        if batch:
            yield batch

    async def _events(self, page: int) -> AsyncIterator[Event]:
        documents = await _documents(self.pool, self.task_id, self.idle_s, self.announced_s)
        for doc in documents:
            if doc.active:
                continue
            if doc.status is DocumentStatus.SUMMARIZING:
                if summarizing_done(doc) and doc.chunks is not None and doc.chunks.last is not None:
                    yield merge_step(self.task_id, doc.id, doc.chunks.last)
                    continue
                after = -1
                while rows := await _chunk_page(self.pool, doc.id, after, page, self.announced_s):
                    for announcement in chunk_steps(self.task_id, doc.id, rows):
                        yield announcement
                    after = rows[-1].index
            elif (event := document_step(self.task_id, self.owner, doc)) is not None:
                yield event
        if (merged := task_step(self.task_id, documents, self.expected_documents)) is not None:
            yield merged

    async def announce(self, batch: Sequence[Event]) -> datetime | None:
        """Mark the batch's chunks announced, just before they are: a later re-drive leaves them alone
        while their announcement is on its way. The time marked (None: no chunk in the batch)."""
        ids = [e.chunk_id for e in batch if isinstance(e, ChunkCreated)]
        if not ids:
            return None
        return await self.pool.fetchval(_ANNOUNCED, ids, ChunkStatus.PENDING)

    async def unannounce(self, batch: Sequence[Event], marked: datetime) -> None:
        """The batch was not published after all: its chunks' marks of `marked` are taken back."""
        ids = [e.chunk_id for e in batch if isinstance(e, ChunkCreated)]
        await self.pool.execute(
            "UPDATE chunks SET announced_at = NULL WHERE id = ANY($1::text[]) AND announced_at = $2", ids, marked
        )


# A re-drive's mark on the chunks it announces (a summarizer's claim clears it when it takes an
# announcement up, or drops it because the task is held: see the summarizer's repository).
_ANNOUNCED = (
    "WITH marked AS (UPDATE chunks SET announced_at = now() WHERE id = ANY($1::text[]) AND status = $2 RETURNING 1)"
    " SELECT now()"
)


@dataclass(frozen=True)
class Redrive:
    """A task claimed for a re-drive and the events it needs, counted but not yet built. `context`: the
    re-drive's own trace (its events carry its id), to publish them in."""

    task_id: str
    events: RedriveEvents
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
    """Claim the task and count what its unfinished work needs; None if it was not claimed (gone, or
    for a reconcile: finished, or active within `idle_s` — another re-drive may just have taken it).
    Nothing is built yet: its events are read and built batch by batch when it is published.

    `idle_s` (reconcile): documents active within it are left alone too. `bounded` (the merger's
    reconcile): a document found where the previous re-drive left it, `redrive_limit` times in a row, is
    FAILED with its last error instead of being re-driven again.
    """
    task = await pool.fetchrow(_CLAIM_TASK, task_id, idle_s, bounded, list(TASK_TAKES_WORK))
    if task is None:
        return None
    if bounded:
        await fail_stalled(pool, task_id, settings.redrive_limit)
    owner, expected = task["owner"], task["expected_documents"]
    documents = await _documents(pool, task_id, idle_s, settings.redrive_announced_s)
    merge = task_step(task_id, documents, expected)
    counted = sum(events_of(task_id, owner, d) for d in documents) + int(merge is not None)
    # A re-drive starts a trace of its own (linked to what asked for it): its events' trace id is the new one.
    with telemetry.root_span("redrive", {"task_id": task_id}) as trace_id:
        context = contextvars.copy_context()
    # The merger's reconcile is a recovery (the work was stuck); a resume, a retry or an owner's
    # reconcile is the owner's wish.
    metrics.REDRIVES.labels("reconcile" if bounded else "requested").inc()
    events = RedriveEvents(pool, task_id, owner, expected, idle_s, settings.redrive_announced_s, trace_id, counted)
    return Redrive(task_id, events, context)


# The task's documents in order, each SUMMARIZING one (not active) with its chunks counted: unfinished,
# to announce (neither leased nor announced within $5 seconds), and its last.
_DOCUMENTS = """
SELECT d.id, d.status, d.filename, d.content_type, d.blob_sha256, d.size_bytes, d.text_chars, d.size_level,
       ($2::float8 IS NOT NULL AND d.updated_at > now() - make_interval(secs => $2)) AS active,
       n.unfinished, n.to_announce, l.id AS last_id, l.chunk_index AS last_index, l.status AS last_status
  FROM documents d
  LEFT JOIN LATERAL (
      SELECT count(*) AS unfinished,
             count(*) FILTER (WHERE NOT coalesce(c.status = $4 AND c.lease_expires_at > now(), false)
                                AND NOT coalesce(c.status = $6 AND c.announced_at > now() - make_interval(secs => $5),
                                                 false)) AS to_announce
        FROM chunks c WHERE c.document_id = d.id AND c.status <> ALL($7::text[])
  ) n ON d.status = $3
  LEFT JOIN LATERAL (
      SELECT c.id, c.chunk_index, c.status FROM chunks c WHERE c.document_id = d.id ORDER BY c.chunk_index DESC LIMIT 1
  ) l ON d.status = $3
 WHERE d.task_id = $1 ORDER BY d.position
"""


async def _documents(pool: asyncpg.Pool, task_id: str, idle_s: float | None, announced_s: float) -> list[DocumentRow]:
    rows = await pool.fetch(
        _DOCUMENTS, task_id, idle_s, DocumentStatus.SUMMARIZING, ChunkStatus.SUMMARIZING, announced_s,
        ChunkStatus.PENDING, list(CHUNK_FINAL),
    )  # fmt: skip
    documents: list[DocumentRow] = []
    for r in rows:
        tally = None
        if r["last_id"] is not None:
            last = ChunkToRedrive(r["last_id"], r["last_index"], ChunkStatus(r["last_status"]))
            tally = ChunkTally(r["unfinished"], r["to_announce"], last)
        documents.append(
            DocumentRow(
                id=r["id"], status=DocumentStatus(r["status"]), filename=r["filename"],
                content_type=r["content_type"], blob_sha256=r["blob_sha256"], size_bytes=r["size_bytes"],
                text_chars=r["text_chars"], size_level=SizeLevel(r["size_level"]) if r["size_level"] else None,
                active=r["active"], chunks=tally,
            )
        )  # fmt: skip
    return documents


# One page of a document's chunks to announce, after chunk `$2` in order (keyset: each page is one
# short query on the (document_id, chunk_index) index, and no transaction stays open while it publishes).
_CHUNK_PAGE = """
SELECT c.id, c.chunk_index, c.status FROM chunks c
 WHERE c.document_id = $1 AND c.chunk_index > $2 AND c.status <> ALL($4::text[])
   AND NOT coalesce(c.status = $5 AND c.lease_expires_at > now(), false)
   AND NOT coalesce(c.status = $6 AND c.announced_at > now() - make_interval(secs => $7), false)
 ORDER BY c.chunk_index LIMIT $3
"""


async def _chunk_page(
    pool: asyncpg.Pool, document_id: str, after: int, size: int, announced_s: float
) -> list[ChunkToRedrive]:
    rows = await pool.fetch(
        _CHUNK_PAGE, document_id, after, size, list(CHUNK_FINAL), ChunkStatus.SUMMARIZING, ChunkStatus.PENDING,
        announced_s,
    )  # fmt: skip
    return [ChunkToRedrive(r["id"], r["chunk_index"], ChunkStatus(r["status"])) for r in rows]


def batches(events: Sequence[Event], size: int) -> list[Sequence[Event]]:
    """The events in slices of at most `size`, in order."""
    return [events[i : i + size] for i in range(0, len(events), size)]


async def publish_redrives(
    publish: Publish,
    settings: Settings,
    redrives: Sequence[Redrive],
    between_batches: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Publish the re-drives' events in batches of `redrive_batch_events`, each read from PostgreSQL and
    built only once the batch before it was acknowledged (the events in memory, the producer's buffer
    and the loop's time stay bounded whatever the backlog), each in its re-drive's trace; each batch's
    chunks are marked announced as it goes. `between_batches` runs after each batch. Returns how many
    were published."""
    published = 0
    for redrive in redrives:
        async for batch in redrive.events.batches(settings.redrive_batch_events):
            marked = await redrive.events.announce(batch)
            try:
                # In the re-drive's context: its trace, in the events' traceparent headers.
                await asyncio.create_task(publish(batch, sender=REDRIVES), context=redrive.context.copy())
            except BaseException:
                if marked is not None:  # not announced after all: the next re-drive announces them
                    await asyncio.shield(redrive.events.unannounce(batch, marked))
                raise
            published += len(batch)
            del batch  # gone before the next one is built
            if between_batches is not None:
                await between_batches()
    return published


async def redrive_task(
    pool: asyncpg.Pool,
    publish: Publish,
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
    return await publish_redrives(publish, settings, [redrive])


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
            await outbox.enqueue_document_failed(conn, row["id"])
    for row in failed:
        log.warning("document %s of task %s failed: %s", row["id"], task_id, row["error"])
    return [r["id"] for r in failed]
