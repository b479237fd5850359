"""The merger's repository contract against its in-memory fake, and proof that the contract catches a
fake that forgets a guard."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from docsum_merger.policy import DEFAULT_OPTIONS, ChunkState, Cited
from docsum_merger.tree import MergeNode
from docsum_shared.options import TaskOptions
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.fakes.merger import FakeMergeRepository
from tests.repositories.merger import MergerRepositoryContract, new_id


class TestFakeMergeRepository(MergerRepositoryContract):
    def setup_method(self) -> None:
        self.fake = FakeMergeRepository()
        self.repo = self.fake

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
        task = self.fake.add_task(
            task_id, status=status, title=title, options=options, owner=owner, expected_documents=expected_documents
        )
        task.last_active_at -= timedelta(hours=1)
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
        self.fake.add_document(
            document_id,
            task_id,
            filename=filename,
            position=position,
            status=status,
            chunks=chunks,
            summary=summary,
            sentences=sentences,
        )
        return document_id

    async def task_sentences(self, task_id: str) -> Cited:
        return self.fake.tasks[task_id].summary_sentences

    async def stored_nodes(self, scope_id: str) -> list[MergeNode]:
        return [node for key, node in sorted(self.fake.nodes.items()) if key[0] == scope_id]

    async def last_active(self, task_id: str) -> datetime:
        return self.fake.tasks[task_id].last_active_at


class CompletesAnyDocument(FakeMergeRepository):
    """Forgets that only a summarizing document is completed or failed."""

    MERGEABLE = frozenset(DocumentStatus)


class FinishesAnyTask(FakeMergeRepository):
    """Forgets that only a task that takes work is finished."""

    UNFINISHED_TASK = frozenset(TaskStatus)


def _case(fake: FakeMergeRepository) -> TestFakeMergeRepository:
    case = TestFakeMergeRepository()
    case.fake = fake
    case.repo = fake
    return case


async def test_the_contract_fails_a_fake_that_completes_a_final_document() -> None:
    with pytest.raises(AssertionError):
        await _case(CompletesAnyDocument()).test_a_document_not_summarizing_is_neither_completed_nor_failed()


async def test_the_contract_fails_a_fake_that_finishes_a_final_task() -> None:
    with pytest.raises(AssertionError):
        await _case(FinishesAnyTask()).test_a_held_or_final_task_is_not_finished()
