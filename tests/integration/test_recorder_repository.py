"""The progress recorder's repository contract, run against PostgreSQL."""

from __future__ import annotations

import json
import uuid

import asyncpg
import pytest

from docsum_gateway.progress.recorder.repository import ProgressLog
from docsum_gateway.settings import GatewaySettings
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from tests.repositories.recorder import RecorderRepositoryContract, Stored

pytestmark = pytest.mark.integration


class TestProgressLog(RecorderRepositoryContract):
    @pytest.fixture(autouse=True)
    async def _repo(self, repository_db: asyncpg.Pool) -> None:
        db = repository_db
        self.db = db
        self.repo = ProgressLog(db, GatewaySettings(_env_file=None))

    async def given_task(
        self, task_id: str, status: TaskStatus = TaskStatus.PROCESSING, ended_s_ago: float = 0
    ) -> None:
        await self.db.execute(
            "INSERT INTO tasks (id, owner, status, updated_at) VALUES ($1, $2, $3, now() - make_interval(secs => $4))",
            task_id,
            f"owner-{uuid.uuid4().hex[:8]}",
            status,
            float(ended_s_ago),
        )

    async def given_document(
        self, document_id: str, task_id: str, position: int, status: DocumentStatus = DocumentStatus.PENDING
    ) -> None:
        await self.db.execute(
            "INSERT INTO documents (id, task_id, position, filename, status) VALUES ($1, $2, $3, $4, $5)",
            document_id,
            task_id,
            position,
            f"{document_id}.txt",
            status,
        )

    async def given_chunk(self, chunk_id: str, document_id: str, index: int, status: ChunkStatus) -> None:
        await self.db.execute(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status)"
            " VALUES ($1, $2, $3, 0, 1, 'x', $4)",
            chunk_id,
            document_id,
            index,
            status,
        )

    async def logged(self, task_id: str) -> list[Stored]:
        rows = await self.db.fetch(
            "SELECT seq, kind, dedupe_key, body FROM progress_log WHERE task_id = $1 ORDER BY seq", task_id
        )
        return [
            Stored(r["seq"], r["kind"], r["dedupe_key"], [d["document_id"] for d in json.loads(r["body"])["documents"]])
            for r in rows
        ]

    async def head(self, task_id: str) -> int | None:
        return await self.db.fetchval("SELECT seq FROM progress_heads WHERE task_id = $1", task_id)
