"""The chunker's repository contract against its fake, and a fake that forgets a guard failing it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from docsum_chunker.policy import ChunkRef, CutChunk
from docsum_shared.approval import Approved, Hold
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.fakes.chunker import DocumentRow, FakeChunkRepository, FakeChunkTransaction, TaskRow
from tests.repositories.chunker import ChunkerRepositoryContract, new_id


class TestFakeChunkRepository(ChunkerRepositoryContract):
    fake: FakeChunkRepository

    @pytest.fixture(autouse=True)
    def _on(self) -> None:
        self.fake = self.repo = FakeChunkRepository()

    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, approved: Approved | None = None
    ) -> str:
        task_id = new_id("task")
        self.fake.state.tasks[task_id] = TaskRow(owner, status, approved)
        return task_id

    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.CHUNKING, text: str | None = "Some text."
    ) -> str:
        document_id = new_id("doc")
        self.fake.state.documents[document_id] = DocumentRow(task_id, status, text)
        return document_id

    async def asked_to_approve(self, task_id: str) -> Hold | None:
        return self.fake.state.tasks[task_id].asked

    async def error_of(self, document_id: str) -> str | None:
        return self.fake.state.documents[document_id].error


class CutsTwice(FakeChunkTransaction):
    """Forgets that only a CHUNKING document takes its chunks: a redelivered event cuts it again."""

    async def store_chunks(self, rows: Sequence[CutChunk], *, trace_id: str | None = None) -> bool:
        doc = self._state.documents.get(self._document_id)
        if doc is None:
            return False
        doc.status, doc.chunk_total = DocumentStatus.SUMMARIZING, len(rows)
        for r in rows:
            self._state.chunks[r.id] = (self._document_id, ChunkRef(r.id, r.index))
        return True


class FakeThatCutsTwice(FakeChunkRepository):
    transaction = CutsTwice


async def test_the_contract_fails_a_fake_that_cuts_a_document_twice() -> None:
    case = TestFakeChunkRepository()
    case.fake = case.repo = FakeThatCutsTwice()
    with pytest.raises(AssertionError):
        await case.test_chunks_are_stored_once_a_second_cut_changes_nothing()
