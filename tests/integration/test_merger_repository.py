"""The merger's repository contract against PostgreSQL: the same cases as its fake passes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest
import pytest_asyncio

from docsum_merger.policy import DEFAULT_OPTIONS, ChunkState, Cited
from docsum_merger.repository import MergeRepository
from docsum_merger.settings import MergerSettings
from docsum_merger.tree import MergeNode
from docsum_shared.cited import from_json, to_json
from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from tests.repositories.merger import MergerRepositoryContract, new_id

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(scope="module")
async def pool(repository_db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    db = repository_db
    yield db


class TestMergeRepository(MergerRepositoryContract):
    @pytest.fixture(autouse=True)
    def _on(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.repo = MergeRepository(pool, MergerSettings(_env_file=None))

    async def given_task(
        self,
        *,
        status: TaskStatus = TaskStatus.PROCESSING,
        title: str | None = "batch",
        options: TaskOptions = DEFAULT_OPTIONS,
        owner: str = "owner",
        expected_documents: int | None = None,
        previous: str | None = None,
    ) -> str:
        task_id = new_id("task")
        if previous is not None:
            options = options.model_copy(update={"previous_task": previous})
        await self.pool.execute(
            "INSERT INTO tasks (id, owner, title, status, options, expected_documents, previous_task, last_active_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, now() - interval '1 hour')",
            task_id, owner, title, status, options.model_dump_json(), expected_documents, previous,
        )  # fmt: skip
        return task_id

    async def given_document(
        self,
        task_id: str,
        *,
        filename: str = "a.txt",
        position: int = 0,
        status: DocumentStatus = DocumentStatus.SUMMARIZING,
        chunks: list[ChunkState] | None = None,
        summary: str | None = None,
        sentences: Cited = None,
    ) -> str:
        document_id = new_id("doc")
        done = sum(c.status is ChunkStatus.COMPLETED for c in chunks or [])
        failed = sum(c.status is ChunkStatus.FAILED for c in chunks or [])
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO documents (id, task_id, position, filename, status, summary, chunk_total,"
                " chunks_completed, chunks_failed, summary_sentences) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                document_id, task_id, position, filename, status, summary,
                None if chunks is None else len(chunks), done, failed, _json(sentences),
            )  # fmt: skip
            await conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, summary, error,"
                " summary_sentences) VALUES ($1, $2, $3, 0, 1, 'x', $4, $5, $6, $7)",
                [
                    (
                        f"{document_id}-c{c.index}",
                        document_id,
                        c.index,
                        c.status,
                        c.summary,
                        c.error,
                        _json(c.sentences),
                    )
                    for c in chunks or []
                ],
            )
        return document_id

    async def stored_nodes(self, scope_id: str) -> list[MergeNode]:
        rows = await self.pool.fetch(
            "SELECT scope_id, level, position, inputs, cache_key, summary, sentences::text FROM merge_nodes"
            " WHERE scope_id = $1 ORDER BY level, position",
            scope_id,
        )
        return [MergeNode(r[0], r[1], r[2], r[3], r[4], r[5], None if r[6] is None else from_json(r[6])) for r in rows]

    async def task_sentences(self, task_id: str) -> Cited:
        data = await self.pool.fetchval("SELECT summary_sentences::text FROM tasks WHERE id = $1", task_id)
        return None if data is None else from_json(data)

    async def last_active(self, task_id: str) -> datetime:
        active: datetime = await self.pool.fetchval("SELECT last_active_at FROM tasks WHERE id = $1", task_id)
        return active


def _json(sentences: Cited) -> str | None:
    return None if sentences is None else to_json(sentences)
