"""Re-drive: from Postgres state alone, the next event every unfinished piece of a task needs.

Used by resume, retry, reconcile and start-up recovery. It never depends on Kafka retention or on
consumer offsets, and publishing its events twice is harmless: every handler is idempotent.
"""

from __future__ import annotations

import logging
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
from .kafka import publish
from .levels import SizeLevel, size_level
from .settings import Settings
from .states import CHUNK_FINAL, DOCUMENT_FINAL, ChunkStatus, DocumentStatus

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class ChunkRow:
    id: str
    index: int
    status: ChunkStatus


def plan(
    task_id: str,
    owner: str,
    documents: list[DocumentRow],
    chunks: dict[str, list[ChunkRow]],
    expected_documents: int | None = None,
) -> list[Event]:
    """The events that move every unfinished document of the task one step on. `expected_documents`: the
    number of documents the task will have (another system's task, whose documents arrive one by one);
    until that many exist, the task is not finished whatever state they are in."""
    events: list[Event] = []
    for doc in documents:
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
            for c in unfinished:
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


async def redrive_task(
    pool: asyncpg.Pool, producer: AIOKafkaProducer, settings: Settings, task_id: str, *, bounded: bool = False
) -> int:
    """Publish what the task's unfinished work needs; returns how many events were published.

    `bounded` (reconcile): a document found where the previous re-drive left it, `redrive_limit`
    times in a row, is FAILED with its last error instead of being re-driven again.
    """
    task = await pool.fetchrow("SELECT owner, expected_documents FROM tasks WHERE id = $1", task_id)
    if task is None:
        return 0
    if bounded:
        await fail_stalled(pool, task_id, settings.redrive_limit)
    doc_rows = await pool.fetch(
        "SELECT id, status, filename, content_type, blob_sha256, size_bytes, text_chars, size_level"
        " FROM documents WHERE task_id = $1 ORDER BY position",
        task_id,
    )
    documents = [
        DocumentRow(
            **{
                **dict(r),
                "status": DocumentStatus(r["status"]),
                "size_level": SizeLevel(r["size_level"]) if r["size_level"] else None,
            }
        )
        for r in doc_rows
    ]
    chunk_rows = await pool.fetch(
        "SELECT c.document_id, c.id, c.chunk_index, c.status FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.task_id = $1 AND d.status = $2 ORDER BY c.document_id, c.chunk_index",
        task_id,
        DocumentStatus.SUMMARIZING,
    )
    chunks: dict[str, list[ChunkRow]] = {}
    for r in chunk_rows:
        chunks.setdefault(r["document_id"], []).append(ChunkRow(r["id"], r["chunk_index"], ChunkStatus(r["status"])))
    # A re-drive starts a trace of its own (linked to what asked for it): its events' trace id is the new one.
    with telemetry.root_span("redrive", {"task_id": task_id}) as trace_id:
        events = plan(task_id, task["owner"], documents, chunks, task["expected_documents"])
        if trace_id is not None:
            events = [event.model_copy(update={"trace_id": trace_id}) for event in events]
        await publish(producer, settings, events)
    # A reconcile re-drive is a recovery (the work was stuck); a resume or a retry is the owner's wish.
    await pool.execute(
        "UPDATE tasks SET redrives = redrives + 1, last_active_at = now(),"
        " recovering_since = CASE WHEN $2 THEN coalesce(recovering_since, now()) ELSE recovering_since END"
        " WHERE id = $1",
        task_id,
        bounded,
    )
    metrics.REDRIVES.labels("reconcile" if bounded else "requested").inc()
    return len(events)


# A document's progress, as a re-drive sees it: its status, its chunks done and failed, its merge
# nodes, and the LLM calls of its whole task (a document waiting in a queue behind its task's other
# work is not stuck). A live lease anywhere in the task is progress in itself (a call is running).
_MARK_STALLED = """
WITH progress AS (
    SELECT d.id,
           concat_ws('|', d.status,
                     count(c.id) FILTER (WHERE c.status = $2),
                     count(c.id) FILTER (WHERE c.status = $3),
                     (SELECT count(*) FROM merge_nodes m WHERE m.scope_id = d.id),
                     (SELECT count(*) FROM llm_calls l WHERE l.task_id = $1)) AS mark,
           EXISTS (SELECT 1 FROM chunks lc JOIN documents ld ON ld.id = lc.document_id
                   WHERE ld.task_id = $1 AND lc.status = $4 AND lc.lease_expires_at > now()) AS leased
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
            _MARK_STALLED, task_id, ChunkStatus.COMPLETED, ChunkStatus.FAILED, ChunkStatus.SUMMARIZING, final
        )
        stalled = [r["id"] for r in rows if r["stalled_redrives"] >= limit]
        if not stalled:
            return []
        failed = await conn.fetch(_FAIL_STALLED, stalled, final, DocumentStatus.FAILED)
    for row in failed:
        log.warning("document %s of task %s failed: %s", row["id"], task_id, row["error"])
    return [r["id"] for r in failed]
