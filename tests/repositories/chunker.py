"""The chunker's repository contract: what docsum_chunker.handlers relies on of its repository.

A document's chunks are stored, and it moves on to SUMMARIZING, only while it is CHUNKING, and once
only; it fails only while CHUNKING. Under the task's lock the transaction names the task (its owner, the
plan approved before) and every document of it cut so far, and holds the task for approval only from
the statuses that may wait; an exception rolls the whole transaction back. Run against the fake
(tests/unit/test_chunker_repository.py) and PostgreSQL (tests/integration/test_chunker_repository.py).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod

import pytest

from docsum_chunker.chunking import Chunk
from docsum_chunker.handlers import Repository
from docsum_chunker.policy import ChunkRef, CutChunk
from docsum_chunker.repository import LockedTask, ParsedDocument, TaskCuts
from docsum_shared.approval import Approved, Hold
from docsum_shared.states import DocumentStatus, TaskStatus
from docsum_shared.text import estimate_tokens_upper

NOT_CHUNKING = (DocumentStatus.PENDING, DocumentStatus.SUMMARIZING, DocumentStatus.FAILED, DocumentStatus.CANCELLED)
WAITS = Hold("over the ceiling", calls=21, cost_usd=0.5)


def new_id(kind: str) -> str:
    """A fresh id: cases never see each other's rows on a shared database."""
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def cut_chunks(document_id: str, count: int, width: int = 40) -> list[CutChunk]:
    """`count` chunks of `width` characters, each with some context on either side."""
    return [
        CutChunk(f"{document_id}-c{i:05d}", i, Chunk(i, i * width, (i + 1) * width, "w" * width, "before", "after"))
        for i in range(count)
    ]


def tokens(rows: list[CutChunk]) -> int:
    return sum(estimate_tokens_upper(r.chunk.context_before + r.chunk.text + r.chunk.context_after) for r in rows)


class ChunkerRepositoryContract(ABC):
    repo: Repository

    # --- the world a case starts from (what the other services write), one per repository ----------

    @abstractmethod
    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, approved: Approved | None = None
    ) -> str:
        """A new task; its id."""

    @abstractmethod
    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.CHUNKING, text: str | None = "Some text."
    ) -> str:
        """A new document of the task, its text stored when given; its id."""

    @abstractmethod
    async def asked_to_approve(self, task_id: str) -> Hold | None:
        """The plan the task's owner is asked to approve (its reason, calls and cost), if any."""

    @abstractmethod
    async def error_of(self, document_id: str) -> str | None:
        """The error stored on the document."""

    # --- loads --------------------------------------------------------------------------------------

    async def test_load_returns_the_document_its_text_and_its_tasks_status(self) -> None:
        task = await self.given_task(status=TaskStatus.PAUSED)
        document = await self.given_document(task, text="The parsed text.")
        bare = await self.given_document(task, status=DocumentStatus.PENDING, text=None)
        assert await self.repo.load(document) == ParsedDocument(
            status=DocumentStatus.CHUNKING, text="The parsed text.", task_status=TaskStatus.PAUSED
        )
        assert await self.repo.load(bare) == ParsedDocument(DocumentStatus.PENDING, None, TaskStatus.PAUSED)
        assert await self.repo.load(new_id("doc")) is None

    # --- chunks stored: CHUNKING -> SUMMARIZING, once -----------------------------------------------

    async def test_chunks_are_stored_and_the_document_moves_on(self) -> None:
        document = await self.given_document(await self.given_task())
        rows = cut_chunks(document, 3)
        async with self.repo.locked(document) as tx:
            assert await tx.store_chunks(list(reversed(rows))) is True
        assert (await self.repo.load(document) or _missing()).status is DocumentStatus.SUMMARIZING
        assert await self.repo.stored_chunks(document) == [ChunkRef(r.id, r.index) for r in rows]

    async def test_chunks_are_stored_once_a_second_cut_changes_nothing(self) -> None:
        document = await self.given_document(await self.given_task())
        first = cut_chunks(document, 2)
        async with self.repo.locked(document) as tx:
            assert await tx.store_chunks(first)
        async with self.repo.locked(document) as tx:
            assert await tx.store_chunks(cut_chunks(document, 5)) is False
        assert await self.repo.stored_chunks(document) == [ChunkRef(r.id, r.index) for r in first]

    @pytest.mark.parametrize("status", NOT_CHUNKING)
    async def test_no_chunk_is_stored_for_a_document_that_is_not_chunking(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status)
        async with self.repo.locked(document) as tx:
            assert await tx.store_chunks(cut_chunks(document, 2)) is False
        assert await self.repo.stored_chunks(document) == []
        assert (await self.repo.load(document) or _missing()).status is status

    async def test_a_transaction_that_raises_keeps_nothing(self) -> None:
        task = await self.given_task()
        document = await self.given_document(task)
        with pytest.raises(RuntimeError, match="cut short"):
            async with self.repo.locked(document) as tx:
                assert await tx.store_chunks(cut_chunks(document, 2))
                assert await tx.hold(WAITS)
                raise RuntimeError("cut short")
        assert await self.repo.load(document) == ParsedDocument(
            DocumentStatus.CHUNKING, "Some text.", TaskStatus.PROCESSING
        )
        assert await self.repo.stored_chunks(document) == []
        assert await self.asked_to_approve(task) is None

    # --- under the task's lock: the task and its plan -----------------------------------------------

    async def test_the_lock_names_the_task_its_owner_and_the_plan_approved_before(self) -> None:
        owner = new_id("owner")
        task = await self.given_task(owner=owner, approved=Approved(calls=15, cost_usd=0.25))
        document = await self.given_document(task)
        async with self.repo.locked(document) as tx:
            assert tx.task == LockedTask(task, owner, Approved(15, 0.25))
        never_approved = await self.given_task(owner=owner)
        other = await self.given_document(never_approved)
        async with self.repo.locked(other) as tx:
            assert tx.task == LockedTask(never_approved, owner, None)

    async def test_an_unknown_document_locks_no_task_and_stores_nothing(self) -> None:
        document = new_id("doc")
        async with self.repo.locked(document) as tx:
            assert tx.task is None
            assert await tx.store_chunks(cut_chunks(document, 2)) is False
            assert await tx.cuts() == TaskCuts((), 0)
            assert await tx.hold(WAITS) is False
        assert await self.repo.stored_chunks(document) == []

    async def test_the_cuts_are_every_document_of_the_task_cut_so_far(self) -> None:
        task = await self.given_task()
        first, second = await self.given_document(task), await self.given_document(task)
        await self.given_document(task)  # not cut yet: no part of the plan
        await self.given_document(await self.given_task())  # another task's
        first_rows, second_rows = cut_chunks(first, 3), cut_chunks(second, 2, width=400)
        async with self.repo.locked(first) as tx:
            assert await tx.store_chunks(first_rows)
            assert await tx.cuts() == TaskCuts((3,), tokens(first_rows))  # this transaction's own cut
        async with self.repo.locked(second) as tx:
            before = await tx.cuts()
            assert await tx.store_chunks(second_rows)
            after = await tx.cuts()
        assert before == TaskCuts((3,), tokens(first_rows))
        assert sorted(after.chunk_counts) == [2, 3]
        assert after.prompt_tokens == tokens(first_rows) + tokens(second_rows) > before.prompt_tokens

    # --- the approval hold --------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "status", [TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.PAUSED, TaskStatus.AWAITING_APPROVAL]
    )
    async def test_a_task_that_may_wait_is_held_with_the_plan_it_asks_for(self, status: TaskStatus) -> None:
        task = await self.given_task(status=status)
        document = await self.given_document(task)
        async with self.repo.locked(document) as tx:
            assert await tx.store_chunks(cut_chunks(document, 2))
            assert await tx.hold(WAITS) is True
        assert (await self.repo.load(document) or _missing()).task_status is TaskStatus.AWAITING_APPROVAL
        assert await self.asked_to_approve(task) == WAITS

    async def test_a_task_held_again_is_asked_for_its_whole_plan(self) -> None:
        task = await self.given_task()
        first, second = await self.given_document(task), await self.given_document(task)
        async with self.repo.locked(first) as tx:
            assert await tx.hold(WAITS)
        bigger = Hold("the whole plan", calls=40, cost_usd=1.25)
        async with self.repo.locked(second) as tx:
            assert await tx.hold(bigger)
        assert await self.asked_to_approve(task) == bigger

    @pytest.mark.parametrize("status", [TaskStatus.CANCELLED, TaskStatus.COMPLETED, TaskStatus.FAILED])
    async def test_a_task_past_waiting_is_not_held(self, status: TaskStatus) -> None:
        task = await self.given_task(status=status)
        document = await self.given_document(task)
        async with self.repo.locked(document) as tx:
            assert await tx.hold(WAITS) is False
        assert (await self.repo.load(document) or _missing()).task_status is status
        assert await self.asked_to_approve(task) is None

    # --- a document failed before its chunks: CHUNKING -> FAILED ------------------------------------

    async def test_a_chunking_document_fails_with_its_error(self) -> None:
        document = await self.given_document(await self.given_task())
        await self.repo.fail(document, "too many chunks")
        assert (await self.repo.load(document) or _missing()).status is DocumentStatus.FAILED
        assert await self.error_of(document) == "too many chunks"
        await self.repo.fail(document, "again")  # a repeat changes nothing
        assert await self.error_of(document) == "too many chunks"

    @pytest.mark.parametrize("status", [DocumentStatus.SUMMARIZING, DocumentStatus.COMPLETED])
    async def test_a_document_past_chunking_does_not_fail(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status)
        await self.repo.fail(document, "too many chunks")
        assert (await self.repo.load(document) or _missing()).status is status
        assert await self.error_of(document) is None


def _missing() -> ParsedDocument:
    raise AssertionError("the document is missing")
