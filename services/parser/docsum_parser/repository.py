"""The parser's SQL: every write a guarded transition, so a redelivered event changes nothing."""

from __future__ import annotations

import asyncpg

from docsum_shared.levels import SizeLevel
from docsum_shared.states import DocumentStatus, TaskStatus

from .policy import NEEDS_PARSE, StoredDocument


class DocumentRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def load(self, document_id: str) -> StoredDocument | None:
        row = await self.pool.fetchrow(
            "SELECT d.status, d.text_chars, d.size_level, d.error, t.status AS task_status"
            " FROM documents d JOIN tasks t ON t.id = d.task_id WHERE d.id = $1",
            document_id,
        )
        if row is None:
            return None
        return StoredDocument(
            DocumentStatus(row["status"]),
            row["text_chars"],
            SizeLevel(row["size_level"]) if row["size_level"] else None,
            row["error"],
            TaskStatus(row["task_status"]),
        )

    async def load_bytes(self, sha256: str) -> bytes | None:
        return await self.pool.fetchval("SELECT data FROM blobs WHERE sha256 = $1", sha256)

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            moved = await conn.fetchval(
                "UPDATE documents SET status = $2, size_level = $3, text_chars = $4, updated_at = now()"
                " WHERE id = $1 AND status = ANY($5::text[]) RETURNING id",
                document_id,
                DocumentStatus.CHUNKING,
                size_level,
                len(text),
                list(NEEDS_PARSE),
            )
            if moved is not None:
                await conn.execute(
                    "INSERT INTO document_texts (document_id, text) VALUES ($1, $2)"
                    " ON CONFLICT (document_id) DO UPDATE SET text = EXCLUDED.text",
                    document_id,
                    text,
                )

    async def fail(self, document_id: str, error: str) -> None:
        await self.pool.execute(
            "UPDATE documents SET status = $2, error = $3, updated_at = now()"
            " WHERE id = $1 AND status = ANY($4::text[])",
            document_id,
            DocumentStatus.FAILED,
            error,
            list(NEEDS_PARSE),
        )
