"""The parser's SQL: every write a guarded transition, so a redelivered event changes nothing."""

from __future__ import annotations

import asyncpg

from docsum_shared import lifecycle, outbox, taskrate
from docsum_shared.blobs import BlobStore, NewBlob
from docsum_shared.events import DocumentSubmitted
from docsum_shared.levels import SizeLevel
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus

from . import intake
from .policy import NEEDS_PARSE, StoredDocument, TextRefused
from .settings import ParserSettings


class DocumentRepository:
    def __init__(self, pool: asyncpg.Pool, blobs: BlobStore | None = None) -> None:
        self.pool = pool
        self.blobs = blobs or BlobStore()  # where document bytes are (DOCSUM_BLOB_STORE)

    async def load(self, document_id: str) -> StoredDocument | None:
        row = await self.pool.fetchrow(
            "SELECT d.status, d.text_chars, d.size_level, d.error, t.status AS task_status, t.owner, d.blob_sha256,"
            " d.task_id"
            " FROM documents d JOIN tasks t ON t.id = d.task_id WHERE d.id = $1",
            document_id,
        )
        if row is None:
            return None
        return StoredDocument(
            status=DocumentStatus(row["status"]),
            text_chars=row["text_chars"],
            size_level=SizeLevel(row["size_level"]) if row["size_level"] else None,
            error=row["error"],
            task_status=TaskStatus(row["task_status"]),
            owner=row["owner"],
            blob_sha256=row["blob_sha256"],
            task_id=row["task_id"],
        )

    async def load_bytes(self, sha256: str) -> bytes | None:
        return await self.blobs.read(self.pool, sha256)

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        """Store the text, with where its units start, and move the document on; TextRefused if the text
        cannot be stored."""
        try:
            await self._store_text(document_id, text, size_level, positions)
        except _REFUSED_TEXT as exc:
            raise TextRefused(type(exc).__name__) from exc

    async def _store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            moved = await conn.fetchval(
                "UPDATE documents SET status = $2, size_level = $3, text_chars = $4, reading = NULL, updated_at = now()"
                " WHERE id = $1 AND status = ANY($5::text[]) RETURNING id",
                document_id,
                DocumentStatus.CHUNKING,
                size_level,
                len(text),
                list(NEEDS_PARSE),
            )
            if moved is not None:
                await conn.execute(
                    "INSERT INTO document_texts (document_id, text, position_unit, position_starts)"
                    " VALUES ($1, $2, $3, $4::int[])"
                    " ON CONFLICT (document_id) DO UPDATE SET text = EXCLUDED.text,"
                    " position_unit = EXCLUDED.position_unit, position_starts = EXCLUDED.position_starts",
                    document_id,
                    text,
                    positions.unit,
                    list(positions.starts),
                )

    async def ocr_texts(self, document_id: str) -> dict[int, str]:
        """The text of each of the document's scanned pages read so far, by page (from 0)."""
        rows = await self.pool.fetch("SELECT page, text FROM document_ocr_pages WHERE document_id = $1", document_id)
        return {row["page"]: row["text"] for row in rows}

    async def reading(self, document_id: str, note: str) -> None:
        """What is being read now, shown in the task's view, while the document still needs its parse."""
        await self.pool.execute(
            "UPDATE documents SET reading = $2, updated_at = now() WHERE id = $1 AND status = ANY($3::text[])",
            document_id,
            note,
            list(NEEDS_PARSE),
        )

    async def store_ocr_page(self, document_id: str, page: int, text: str) -> str:
        """Store a scanned page's text as soon as it is read; a page already stored keeps its first reading,
        which is returned (a delivery of the same document elsewhere may have read it meanwhile)."""
        try:
            return await self.pool.fetchval(
                "WITH added AS (INSERT INTO document_ocr_pages (document_id, page, text) VALUES ($1, $2, $3)"
                " ON CONFLICT (document_id, page) DO NOTHING RETURNING text)"
                " SELECT text FROM added UNION ALL"
                " SELECT text FROM document_ocr_pages WHERE document_id = $1 AND page = $2 LIMIT 1",
                document_id,
                page,
                text,
            )
        except _REFUSED_TEXT as exc:
            raise TextRefused(type(exc).__name__) from exc

    async def fail(self, document_id: str, error: str) -> None:
        """The document FAILED with `error` while it needs its parse, and the webhook deliveries that owes."""
        await lifecycle.fail_document(self.pool, document_id, error, NEEDS_PARSE)

    # --- intake: documents other systems publish (inline or by URI) ---------------------------------

    async def find_document(self, document_id: str) -> intake.ExistingDocument | None:
        row = await self.pool.fetchrow(_EXISTING, document_id, list(NEEDS_PARSE))
        return _existing(row)

    async def load_intake_task(self, task_id: str) -> intake.StoredTask | None:
        async with self.pool.acquire() as conn:
            return await _intake_task(conn, task_id, lock=False)

    async def take_in(
        self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
    ) -> None:
        """Create the task on first sight and the document, with its bytes stored once by sha256, or FAILED
        with `error`; in one transaction under the task's row lock, which re-checks what intake decided
        before (a concurrent message of the same task may have come first). Poison rolls it all back. In an
        object store, the object is written first (refused afterwards, it is an orphan the sweep removes)."""
        options = event.options or TaskOptions()
        blob = NewBlob.of(data) if data is not None else None
        if blob is not None:
            await self.blobs.upload(self.pool, [blob])
        async with self.pool.acquire() as conn, conn.transaction():
            if options.previous_task is not None:
                # Judged by the message that makes the task, before it is made (the link's foreign key would
                # refuse an id no task has, in words that tell nothing); a later message finds it stored.
                found = await conn.fetchrow(
                    "SELECT (SELECT owner FROM tasks WHERE id = $2 AND deployment = $3) AS previous_owner,"
                    " EXISTS (SELECT 1 FROM tasks WHERE id = $1) AS stored",
                    event.task_id, options.previous_task, settings.deployment,
                )  # fmt: skip
                if not found["stored"]:
                    intake.check_previous(event, found["previous_owner"])
            created = await conn.fetchval(
                "INSERT INTO tasks (id, owner, title, status, options, expected_documents, deployment, previous_task)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING RETURNING true",
                event.task_id, event.owner, event.title, TaskStatus.PROCESSING, options.model_dump_json(),
                event.task_documents, settings.deployment, options.previous_task,
            )  # fmt: skip
            if created and settings.tasks_per_minute:
                # The task counts against its owner's limit, as one made through the gateway does; refused,
                # the whole transaction rolls back (no task, no booking) and the message waits its turn.
                admission = await taskrate.book_task(conn, event.owner, settings.tasks_per_minute)
                intake.check_admission(event, admission, settings)
            task = await _intake_task(conn, event.task_id, lock=True)
            existing = _existing(await conn.fetchrow(_EXISTING, event.document_id, list(NEEDS_PARSE)))
            intake.check_document(event, existing)
            intake.check_task(event, task, new_document=existing is None)
            if existing is not None and not existing.needs_bytes:
                return  # taken in meanwhile by another delivery
            assert task is not None
            if data is not None and (too_big := intake.task_bytes_error(task.total_bytes, len(data), settings)):
                data, error = None, too_big
            sha256 = None
            if data is not None and blob is not None:
                await self.blobs.store(conn, [blob])
                sha256 = blob.sha256
            size = len(data) if data is not None else None
            status = DocumentStatus.PENDING if data is not None else DocumentStatus.FAILED
            if existing is None:
                inserted = await conn.fetchval(
                    "INSERT INTO documents (id, task_id, position, filename, content_type, blob_sha256, size_bytes,"
                    " status, error, document_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                    " ON CONFLICT (id) DO NOTHING RETURNING id",
                    event.document_id, event.task_id, task.documents, event.filename, event.content_type, sha256,
                    size, status, error, event.document_key,
                )  # fmt: skip
                if inserted is None:  # the same id, just now, by a message of another task
                    intake.check_document(
                        event, _existing(await conn.fetchrow(_EXISTING, event.document_id, list(NEEDS_PARSE)))
                    )
            else:  # reset by `docsum retry`, published again: its bytes this time, or its failure again
                await conn.execute(
                    "UPDATE documents SET blob_sha256 = $2, size_bytes = $3, status = $4, error = $5,"
                    " updated_at = now() WHERE id = $1 AND blob_sha256 IS NULL AND status = ANY($6::text[])",
                    event.document_id, sha256, size, status, error, list(NEEDS_PARSE),
                )  # fmt: skip
            if status is DocumentStatus.FAILED:
                await outbox.enqueue_document_failed(conn, event.document_id)
            await conn.execute("UPDATE tasks SET last_active_at = now() WHERE id = $1", event.task_id)


# A text the database will not take: PostgreSQL's data exceptions (an untranslatable character), and
# asyncpg's own refusal to encode an argument (a lone surrogate), a DataError that is also a ValueError
# and an InterfaceError - which the consumer would otherwise retry as a connection fault, for ever.
_REFUSED_TEXT = (asyncpg.DataError, ValueError)

_EXISTING = (
    "SELECT d.task_id, t.owner, (d.blob_sha256 IS NULL AND d.status = ANY($2::text[])) AS needs_bytes"
    " FROM documents d JOIN tasks t ON t.id = d.task_id WHERE d.id = $1"
)


def _existing(row: asyncpg.Record | None) -> intake.ExistingDocument | None:
    if row is None:
        return None
    return intake.ExistingDocument(task_id=row["task_id"], owner=row["owner"], needs_bytes=row["needs_bytes"])


async def _intake_task(conn: asyncpg.Connection, task_id: str, *, lock: bool) -> intake.StoredTask | None:
    task = await conn.fetchrow(
        "SELECT owner, expected_documents FROM tasks WHERE id = $1" + (" FOR UPDATE" if lock else ""), task_id
    )
    if task is None:
        return None
    held = await conn.fetchrow(
        "SELECT count(*) AS documents, coalesce(sum(size_bytes), 0)::bigint AS total_bytes"
        " FROM documents WHERE task_id = $1",
        task_id,
    )
    return intake.StoredTask(
        owner=task["owner"],
        expected_documents=task["expected_documents"],
        documents=held["documents"],
        total_bytes=held["total_bytes"],
    )
