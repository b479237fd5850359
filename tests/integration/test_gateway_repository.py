"""The gateway's repository contract, run against PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest

from docsum_gateway.repository import RedriveGates, TaskRepository
from docsum_shared.options import TaskOptions
from tests.repositories.gateway import GatewayRepositoryContract, RedriveGatesContract, StoredDocument, StoredTask

pytestmark = pytest.mark.integration


class TestTaskRepository(GatewayRepositoryContract):
    @pytest.fixture(autouse=True)
    async def _repo(self, repository_db: asyncpg.Pool) -> None:
        db = repository_db
        self.db = db
        self.repo = TaskRepository(db)

    async def stored_task(self, task_id: str) -> StoredTask | None:
        row = await self.db.fetchrow("SELECT owner, title, status, options FROM tasks WHERE id = $1", task_id)
        if row is None:
            return None
        return StoredTask(row["owner"], row["title"], row["status"], TaskOptions.from_stored(row["options"]))

    async def stored_documents(self, task_id: str) -> list[StoredDocument]:
        rows = await self.db.fetch(
            "SELECT id, position, filename, content_type, blob_sha256, size_bytes, status FROM documents"
            " WHERE task_id = $1 ORDER BY position",
            task_id,
        )
        return [StoredDocument(*r.values()) for r in rows]

    async def stored_blob(self, sha256: str) -> bytes | None:
        return await self.db.fetchval("SELECT data FROM blobs WHERE sha256 = $1", sha256)

    async def tasks_of(self, owner: str) -> list[str]:
        return [r["id"] for r in await self.db.fetch("SELECT id FROM tasks WHERE owner = $1", owner)]


class TestRedriveGates(RedriveGatesContract):
    @pytest.fixture(autouse=True)
    async def _gates(self, repository_db: asyncpg.Pool) -> None:
        self.db = repository_db
        self.gates = RedriveGates(repository_db)

    async def stored_tat(self, owner: str) -> float | None:
        return await self.db.fetchval("SELECT tat FROM redrive_gates WHERE owner = $1", owner)
