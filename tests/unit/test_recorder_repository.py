"""The progress recorder's repository contract, run against its fake; and proof that the contract
catches a fake that forgets a rule."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from docsum_gateway.progress.recorder.policy import Entry, LoggedChunk
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from tests.fakes.recorder import FakeDocument, FakeLockedLog, FakeProgressLog, FakeTask
from tests.repositories.recorder import RecorderRepositoryContract, Stored


class TestFakeProgressLog(RecorderRepositoryContract):
    @pytest.fixture(autouse=True)
    def _repo(self) -> None:
        self.fake = self.make()
        self.repo = self.fake

    def make(self) -> FakeProgressLog:
        return FakeProgressLog()

    async def given_task(
        self, task_id: str, status: TaskStatus = TaskStatus.PROCESSING, ended_s_ago: float = 0
    ) -> None:
        self.fake.tasks[task_id] = FakeTask(status, datetime.now(UTC) - timedelta(seconds=ended_s_ago))

    async def given_document(
        self, document_id: str, task_id: str, position: int, status: DocumentStatus = DocumentStatus.PENDING
    ) -> None:
        self.fake.documents[document_id] = FakeDocument(task_id, position, f"{document_id}.txt", status)

    async def given_chunk(self, chunk_id: str, document_id: str, index: int, status: ChunkStatus) -> None:
        self.fake.chunks[chunk_id] = LoggedChunk(chunk_id, document_id, index, status)

    async def logged(self, task_id: str) -> list[Stored]:
        return [
            Stored(r.seq, r.kind, r.key, [d["document_id"] for d in r.body["documents"]])
            for r in self.fake.log.get(task_id, [])
        ]

    async def head(self, task_id: str) -> int | None:
        head = self.fake.heads.get(task_id)
        return None if head is None else head.seq


class _ChecksOnlyItsOwnBatch(FakeLockedLog):
    """Forgets the keys stored before: a redelivered event would tell its step twice."""

    async def append(self, entries: Sequence[Entry]) -> list[int]:
        stored = self.store.log.pop(self.task_id, [])
        try:
            return await super().append(entries)
        finally:
            self.store.log[self.task_id] = stored


class _ForgetsTheStoredKeys(FakeProgressLog):
    locked_log = _ChecksOnlyItsOwnBatch


class _Forgetful(TestFakeProgressLog):
    def make(self) -> FakeProgressLog:
        return _ForgetsTheStoredKeys()


async def test_the_contract_fails_a_fake_that_tells_a_step_twice() -> None:
    case = _Forgetful()
    case.fake = case.make()
    case.repo = case.fake
    with pytest.raises(AssertionError):
        await case.test_an_entry_is_stored_once_per_key_and_task()
