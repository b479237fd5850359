"""The summarizer's repository contract against its fake, and the proof the contract can fail: a fake
that forgets one guard does not pass it."""

from __future__ import annotations

from typing import Any

import pytest

from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.policy import ChunkLine, LineStatus
from tests.fakes.summarizer import ChunkTableRow, DocumentRow, FakeChunkRepository, TaskRow
from tests.repositories.summarizer import ChunkFacts, DocumentCounts, SummarizerRepositoryContract


class InMemory(SummarizerRepositoryContract):
    fake: FakeChunkRepository

    @pytest.fixture(autouse=True)
    def _fake(self) -> None:
        self.on(FakeChunkRepository())

    def on(self, fake: FakeChunkRepository) -> None:
        self.fake = self.repo = fake

    async def given_task(self, task_id: str, status: TaskStatus, owner: str, options: TaskOptions) -> None:
        self.fake.tasks[task_id] = TaskRow(status, owner, options)

    async def given_document(self, document_id: str, task_id: str, status: DocumentStatus) -> None:
        self.fake.documents[document_id] = DocumentRow(task_id, status)

    async def given_chunk(
        self, chunk_id: str, document_id: str, index: int, status: ChunkStatus, text: str, failures: int, start: int = 0
    ) -> None:
        self.fake.rows[chunk_id] = ChunkTableRow(document_id, index, status, text, failures=failures, start_char=start)

    async def given_text(self, document_id: str, text: str, positions: Positions | None) -> None:
        if positions is not None:
            self.fake.positions[document_id] = positions

    async def task_now(self, task_id: str, status: TaskStatus) -> None:
        self.fake.tasks[task_id].status = status

    async def lease_runs_out(self, chunk_id: str) -> None:
        self.fake.rows[chunk_id].lease_expires_at = self.fake.now - 1.0

    async def admitted(self, chunk_id: str, admitted: bool) -> None:
        self.fake.rows[chunk_id].admitted = admitted

    async def given_line(self, chunk_id: str, status: LineStatus, custom_id: str) -> None:
        self.fake.rows[chunk_id].line = ChunkLine(status, custom_id)

    async def line_request(self, chunk_id: str) -> dict[str, Any] | None:
        return self.fake.rows[chunk_id].line_request

    async def facts(self, chunk_id: str) -> ChunkFacts:
        row = self.fake.rows[chunk_id]
        return ChunkFacts(
            row.summary,
            row.summary_model,
            row.summary_truncated,
            row.error,
            row.attempts,
            row.interruptions,
            row.lease,
            row.summary_sentences,
        )

    async def counts(self, document_id: str) -> DocumentCounts:
        document = self.fake.documents[document_id]
        return DocumentCounts(document.chunks_completed, document.chunks_failed, document.truncated_parts)

    async def recovering(self, task_id: str) -> bool:
        return self.fake.tasks[task_id].recovering


class TestFakeChunkRepository(InMemory):
    """Every case of the contract, against the fake."""


class TakesLiveLeases(FakeChunkRepository):
    """Forgets that a lease another holder still has is theirs."""

    def _held_by_another(self, row: ChunkTableRow, holder: str) -> bool:
        return False


class CompletesFinalChunks(FakeChunkRepository):
    """Forgets that a final chunk stays as it ended."""

    def _unfinished(self, row: ChunkTableRow) -> bool:
        return True


class ClaimsChunksWaitingForTheirBatch(FakeChunkRepository):
    """Forgets that a chunk whose line is queued or in a batch waits for that batch."""

    def _waits_for_batch(self, row: ChunkTableRow) -> bool:
        return False


async def test_the_contract_fails_a_fake_that_takes_a_live_lease() -> None:
    case = InMemory()
    case.on(TakesLiveLeases())
    with pytest.raises(AssertionError):
        await case.test_a_live_lease_is_refused_to_another_holder_and_taken_again_by_its_own()


async def test_the_contract_fails_a_fake_that_completes_a_final_chunk() -> None:
    case = InMemory()
    case.on(CompletesFinalChunks())
    with pytest.raises(AssertionError):
        await case.test_complete_stores_the_summary_once_and_counts_it_once()


@pytest.mark.parametrize("status", [LineStatus.QUEUED, LineStatus.SUBMITTED])
async def test_the_contract_fails_a_fake_that_claims_a_chunk_waiting_for_its_batch(status: LineStatus) -> None:
    case = InMemory()
    case.on(ClaimsChunksWaitingForTheirBatch())
    with pytest.raises(AssertionError):
        await case.test_a_chunk_whose_line_waits_for_its_batch_gets_no_claim(status)
    case.on(ClaimsChunksWaitingForTheirBatch())
    with pytest.raises(AssertionError):
        await case.test_queue_line_queues_the_request_and_hands_the_chunk_back_to_wait_for_its_batch()
