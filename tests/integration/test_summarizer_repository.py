"""The summarizer's repository contract against PostgreSQL (tests/repositories/summarizer.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from docsum_shared.cited import from_json
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions, chunk_window, position_of
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.policy import LineStatus
from docsum_summarizer.repository import ChunkRepository
from tests.repositories.summarizer import ChunkFacts, DocumentCounts, SummarizerRepositoryContract

pytestmark = pytest.mark.integration


class TestChunkRepositoryOnPostgres(SummarizerRepositoryContract):
    pool: asyncpg.Pool
    tasks: list[str]

    @pytest.fixture(autouse=True)
    async def _on(self, repository_db: asyncpg.Pool) -> AsyncIterator[None]:
        self.pool, self.repo, self.tasks = repository_db, ChunkRepository(repository_db), []
        yield

    async def given_task(self, task_id: str, status: TaskStatus, owner: str, options: TaskOptions) -> None:
        await self.pool.execute(
            "INSERT INTO tasks (id, owner, status, options) VALUES ($1, $2, $3, $4::jsonb)",
            task_id,
            owner,
            status,
            options.model_dump_json(),
        )
        self.tasks.append(task_id)

    async def given_document(self, document_id: str, task_id: str, status: DocumentStatus) -> None:
        await self.pool.execute(
            "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'd.txt', $3)",
            document_id,
            task_id,
            status,
        )

    async def given_chunk(
        self, chunk_id: str, document_id: str, index: int, status: ChunkStatus, text: str, failures: int, start: int = 0
    ) -> None:
        await self.pool.execute(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, failures,"
            " admitted_at) VALUES ($1, $2, $3, $8::int, $8::int + $4::int, $5, $6, $7, now())",
            chunk_id, document_id, index, len(text), text, status, failures, start,
        )  # fmt: skip

    async def given_text(self, document_id: str, text: str, positions: Positions | None) -> None:
        await self.pool.execute(
            "INSERT INTO document_texts (document_id, text, position_unit, position_starts) VALUES ($1, $2, $3, $4)",
            document_id,
            text,
            None if positions is None else positions.unit,
            None if positions is None else list(positions.starts),
        )

    async def task_now(self, task_id: str, status: TaskStatus) -> None:
        await self.pool.execute("UPDATE tasks SET status = $2 WHERE id = $1", task_id, status)

    async def lease_runs_out(self, chunk_id: str) -> None:
        await self.pool.execute(
            "UPDATE chunks SET lease_expires_at = now() - interval '1 second' WHERE id = $1", chunk_id
        )

    async def admitted(self, chunk_id: str, admitted: bool) -> None:
        await self.pool.execute(
            "UPDATE chunks SET admitted_at = CASE WHEN $2 THEN now() END WHERE id = $1", chunk_id, admitted
        )

    async def given_line(self, chunk_id: str, status: LineStatus, custom_id: str) -> None:
        await self.pool.execute(
            "INSERT INTO batch_lines (chunk_id, task_id, owner, custom_id, request, status)"
            " SELECT c.id, d.task_id, t.owner, $2, '{}'::jsonb, $3"
            " FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id WHERE c.id = $1",
            chunk_id,
            custom_id,
            status,
        )

    async def line_request(self, chunk_id: str) -> dict[str, Any] | None:
        stored = await self.pool.fetchval("SELECT request FROM batch_lines WHERE chunk_id = $1", chunk_id)
        return None if stored is None else dict(json.loads(stored) if isinstance(stored, str) else stored)

    async def facts(self, chunk_id: str) -> ChunkFacts:
        row = await self.pool.fetchrow(
            "SELECT summary, summary_model, summary_truncated, error, attempts, interruptions, lease_owner,"
            " summary_sentences::text FROM chunks WHERE id = $1",
            chunk_id,
        )
        assert row is not None
        return ChunkFacts(
            row["summary"],
            row["summary_model"],
            row["summary_truncated"],
            row["error"],
            row["attempts"],
            row["interruptions"],
            row["lease_owner"],
            None if row["summary_sentences"] is None else from_json(row["summary_sentences"]),
        )

    async def counts(self, document_id: str) -> DocumentCounts:
        row = await self.pool.fetchrow(
            "SELECT chunks_completed, chunks_failed, truncated_parts FROM documents WHERE id = $1", document_id
        )
        assert row is not None
        return DocumentCounts(row["chunks_completed"], row["chunks_failed"], row["truncated_parts"])

    async def recovering(self, task_id: str) -> bool:
        return bool(await self.pool.fetchval("SELECT recovering_since IS NOT NULL FROM tasks WHERE id = $1", task_id))

    async def test_a_chunk_stored_with_its_window_is_read_with_it_not_counted_again(self) -> None:
        """The chunker stores where each chunk lies among its document's units (positions.chunk_window):
        load and claim read that window, and count it from the document's unit starts only for a row
        cut before it did."""
        text = "".join(chr(ord("a") + i % 26) for i in range(60))
        whole = Positions("page", (0, 12, 12, 30, 45, 60))
        task_id, document_id = _id("task"), _id("document")
        await self.given_task(task_id, TaskStatus.PROCESSING, "alice", TaskOptions())
        await self.given_document(document_id, task_id, DocumentStatus.SUMMARIZING)
        await self.given_text(document_id, text, whole)
        chunks: dict[str, tuple[int, int]] = {}
        for start, end in ((0, 12), (20, 50), (30, 60)):
            chunk_id = _id("chunk")
            chunks[chunk_id] = (start, end)
            before, inside = chunk_window(whole.starts, start, end)
            await self.given_chunk(chunk_id, document_id, start, ChunkStatus.PENDING, text[start:end], 0, start)
            await self.pool.execute(
                "UPDATE chunks SET units_before = $2, unit_starts = $3 WHERE id = $1", chunk_id, before, list(inside)
            )
        # The document's unit starts say otherwise now: only the stored windows give the right pages.
        await self.pool.execute("UPDATE document_texts SET position_starts = '{0}' WHERE document_id = $1", document_id)
        for chunk_id, (start, end) in chunks.items():
            claimed = (await self.repo.claim(chunk_id, "a", 60.0)).chunk
            for chunk in (await self.repo.load(chunk_id), claimed):
                assert chunk is not None and chunk.positions is not None
                pages = [position_of(chunk.positions, x) for x in range(start, end)]
                assert pages == [position_of(whole, x) for x in range(start, end)]


def _id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}"
