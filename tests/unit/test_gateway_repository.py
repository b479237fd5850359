"""The gateway's repository contract, run against its fake; and proof that the contract catches a fake
that forgets a rule."""

from __future__ import annotations

import pytest

from docsum_gateway.repository import NewDocument
from docsum_shared.options import TaskOptions
from tests.fakes.gateway import FakeTaskRepository
from tests.repositories.gateway import GatewayRepositoryContract, StoredDocument, StoredTask


class TestFakeTaskRepository(GatewayRepositoryContract):
    @pytest.fixture(autouse=True)
    def _repo(self) -> None:
        self.fake = self.make()
        self.repo = self.fake

    def make(self) -> FakeTaskRepository:
        return FakeTaskRepository()

    async def stored_task(self, task_id: str) -> StoredTask | None:
        task = self.fake.tasks.get(task_id)
        return None if task is None else StoredTask(task.owner, task.title, task.status, task.options)

    async def stored_documents(self, task_id: str) -> list[StoredDocument]:
        docs = sorted((d for d in self.fake.documents.values() if d.task_id == task_id), key=lambda d: d.position)
        return [
            StoredDocument(d.id, d.position, d.filename, d.content_type, d.blob_sha256, d.size_bytes, d.status)
            for d in docs
        ]

    async def stored_blob(self, sha256: str) -> bytes | None:
        return self.fake.blobs.get(sha256)

    async def tasks_of(self, owner: str) -> list[str]:
        return [t.id for t in self.fake.tasks.values() if t.owner == owner]


class _StoresWhatItThenRefuses(FakeTaskRepository):
    """Forgets that a task is stored whole or not at all: registers it before checking its documents."""

    async def create_task(
        self, owner: str, title: str | None, documents: list[NewDocument], options: TaskOptions
    ) -> str:
        task_id = await super().create_task(owner, title, [], options)
        for d in documents:
            await super().create_task(owner, title, [d], options)  # raises on the first taken id
        return task_id


class _Forgetful(TestFakeTaskRepository):
    def make(self) -> FakeTaskRepository:
        return _StoresWhatItThenRefuses()


async def test_the_contract_fails_a_fake_that_stores_part_of_a_refused_task() -> None:
    case = _Forgetful()
    case.fake = case.make()
    case.repo = case.fake
    with pytest.raises(AssertionError):
        await case.test_a_document_id_already_stored_refuses_the_whole_task()
