"""The parser's repository contract against PostgreSQL: the same cases as its fake passes."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from docsum_parser.repository import DocumentRepository
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.repositories.parser import ParserRepositoryContract, new_id

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(scope="module")
async def pool(repository_db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    db = repository_db
    yield db


class TestDocumentRepository(ParserRepositoryContract):
    @pytest.fixture(autouse=True)
    def _on(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.repo = DocumentRepository(pool)

    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, expected_documents: int | None = None
    ) -> str:
        task_id = new_id("task")
        await self.pool.execute(
            "INSERT INTO tasks (id, owner, status, expected_documents) VALUES ($1, $2, $3, $4)",
            task_id,
            owner,
            status,
            expected_documents,
        )
        return task_id

    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.PENDING, data: bytes | None = None
    ) -> str:
        document_id = new_id("doc")
        sha256 = hashlib.sha256(data).hexdigest() if data is not None else None
        if data is not None:
            await self.pool.execute(
                "INSERT INTO blobs (sha256, data, size_bytes) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
                sha256,
                data,
                len(data),
            )
        await self.pool.execute(
            "INSERT INTO documents (id, task_id, filename, blob_sha256, size_bytes, status)"
            " VALUES ($1, $2, 'a.txt', $3, $4, $5)",
            document_id, task_id, sha256, len(data) if data is not None else None, status,
        )  # fmt: skip
        return document_id

    async def given_reset(self, document_id: str) -> None:
        await self.pool.execute(
            "UPDATE documents SET status = $2, error = NULL WHERE id = $1", document_id, DocumentStatus.PENDING
        )

    async def text_of(self, document_id: str) -> str | None:
        return await self.pool.fetchval("SELECT text FROM document_texts WHERE document_id = $1", document_id)

    async def reading_of(self, document_id: str) -> str | None:
        return await self.pool.fetchval("SELECT reading FROM documents WHERE id = $1", document_id)

    async def positions_of(self, document_id: str) -> Positions | None:
        row = await self.pool.fetchrow(
            "SELECT position_unit, position_starts FROM document_texts WHERE document_id = $1", document_id
        )
        if row is None or row["position_unit"] is None:
            return None
        return Positions(row["position_unit"], tuple(row["position_starts"]))
