"""The progress recorder's repository contract: entries appended under the task's lock, numbered in
order and stored once per step, nothing kept of a block that raised; what is read under the lock (the
task's view, its chunks) and before it (the task stored, its chunks' status, the keys stored); pruning.
As ProgressLog keeps them on PostgreSQL and its fake in memory.

A subclass gives `repo` and the world it stands in: tasks, documents and chunks seeded, and the log
read back as stored.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import pytest

from docsum_gateway.progress.recorder.handlers import Repository, TaskLog
from docsum_gateway.progress.recorder.policy import Entry, LoggedChunk
from docsum_shared.states import TASK_FINAL, ChunkStatus, DocumentStatus, TaskStatus

FINAL = sorted(TASK_FINAL)


class ProgressLogStore(Repository, Protocol):
    """The handler's port, and the pruning every gateway runs."""

    def locked(self, task_id: str) -> AbstractAsyncContextManager[TaskLog]: ...
    async def prune(self, final: Sequence[str], retain_s: float, tasks_at_most: int = 100) -> int: ...


@dataclass(frozen=True)
class Stored:
    """An entry as stored: its number, kind and key, and the documents its body tells of."""

    seq: int
    kind: str
    key: str
    documents: list[str]


def _id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}"


def entry(key: str, **documents: str) -> Entry:
    """An entry telling each document's status (document id=status)."""
    told = [{"document_id": d, "status": s, "percent": 0.0, "chunks": {}} for d, s in documents.items()]
    return Entry("step", key, {"kind": "step", "documents": told})


class Failed(Exception):
    pass


class RecorderRepositoryContract(abc.ABC):
    repo: ProgressLogStore

    # --- the world a case starts from, and what it reads back -------------------------------------

    @abc.abstractmethod
    async def given_task(
        self, task_id: str, status: TaskStatus = TaskStatus.PROCESSING, ended_s_ago: float = 0
    ) -> None:
        """A stored task, last changed `ended_s_ago` seconds ago."""

    @abc.abstractmethod
    async def given_document(
        self, document_id: str, task_id: str, position: int, status: DocumentStatus = DocumentStatus.PENDING
    ) -> None: ...

    @abc.abstractmethod
    async def given_chunk(self, chunk_id: str, document_id: str, index: int, status: ChunkStatus) -> None: ...

    @abc.abstractmethod
    async def logged(self, task_id: str) -> list[Stored]:
        """The task's log as stored, in order."""

    @abc.abstractmethod
    async def head(self, task_id: str) -> int | None:
        """The number the task's head row holds (None: no head row)."""

    async def task(self, status: TaskStatus = TaskStatus.PROCESSING, ended_s_ago: float = 0) -> str:
        task_id = _id("task")
        await self.given_task(task_id, status, ended_s_ago)
        return task_id

    async def append(self, task_id: str, *entries: Entry) -> list[int]:
        async with self.repo.locked(task_id) as tx:
            return await tx.append(list(entries))

    async def keys(self, task_id: str) -> list[tuple[int, str]]:
        return [(e.seq, e.key) for e in await self.logged(task_id)]

    # --- appends ------------------------------------------------------------------------------------

    async def test_entries_are_numbered_from_one_in_the_order_given(self) -> None:
        task_id = await self.task()
        assert await self.append(task_id, entry("task"), entry("started:d"), entry("parsed:d")) == [1, 2, 3]
        assert await self.keys(task_id) == [(1, "task"), (2, "started:d"), (3, "parsed:d")]
        assert [e.kind for e in await self.logged(task_id)] == ["step"] * 3
        assert await self.head(task_id) == 3

    async def test_an_entry_is_stored_once_per_key_and_task(self) -> None:
        task_id, other = await self.task(), await self.task()
        assert await self.append(task_id, entry("a"), entry("b")) == [1, 2]
        assert await self.append(task_id, entry("a"), entry("b")) == []  # a redelivery adds nothing
        assert await self.append(task_id, entry("b"), entry("c")) == [3]  # only what is new, numbered on
        assert await self.keys(task_id) == [(1, "a"), (2, "b"), (3, "c")]
        assert await self.append(other, entry("a")) == [1]  # keys and numbers are per task

    async def test_a_key_twice_in_one_append_is_stored_once(self) -> None:
        task_id = await self.task()
        assert await self.append(task_id, entry("a"), entry("a"), entry("b")) == [1, 2]
        assert await self.keys(task_id) == [(1, "a"), (2, "b")]

    async def test_appends_under_one_lock_number_on(self) -> None:
        task_id = await self.task()
        async with self.repo.locked(task_id) as tx:
            assert await tx.append([entry("a")]) == [1]
            assert await tx.append([entry("a"), entry("b")]) == [2]
            assert await tx.append([]) == []
        assert await self.keys(task_id) == [(1, "a"), (2, "b")]

    async def test_nothing_is_kept_of_a_block_that_raises(self) -> None:
        task_id = await self.task()
        await self.append(task_id, entry("a"))
        with pytest.raises(Failed):
            async with self.repo.locked(task_id) as tx:
                assert await tx.append([entry("b"), entry("c")]) == [2, 3]
                raise Failed
        assert await self.keys(task_id) == [(1, "a")] and await self.head(task_id) == 1
        assert await self.append(task_id, entry("c")) == [2]  # the numbers of the lost block are given again

    async def test_an_entry_tells_only_the_documents_whose_state_changed(self) -> None:
        task_id = await self.task()
        await self.append(task_id, entry("1", d1="PARSING", d2="PENDING"), entry("2", d1="PARSING", d2="PENDING"))
        await self.append(task_id, entry("3", d1="PARSING", d2="PARSING"))  # what was told stays between appends
        await self.append(task_id, entry("4", d1="PARSING", d2="PARSING"))
        assert [e.documents for e in await self.logged(task_id)] == [["d1", "d2"], [], ["d2"], []]

    async def test_the_log_of_no_such_task_cannot_be_locked(self) -> None:
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await self.append(_id("task"), entry("a"))

    # --- what is read under the lock, and before it -------------------------------------------------

    async def test_the_view_under_the_lock_is_the_stored_task(self) -> None:
        task_id = await self.task(TaskStatus.PAUSED)
        second, first = _id("doc"), _id("doc")
        await self.given_document(second, task_id, 1, DocumentStatus.SUMMARIZING)
        await self.given_document(first, task_id, 0, DocumentStatus.COMPLETED)
        async with self.repo.locked(task_id) as tx:
            view = await tx.task_view()
        assert view is not None and (view.task_id, view.status) == (task_id, TaskStatus.PAUSED)
        assert [(d.document_id, d.status) for d in view.documents] == [
            (first, DocumentStatus.COMPLETED),
            (second, DocumentStatus.SUMMARIZING),
        ]

    async def test_the_chunks_under_the_lock_are_the_tasks(self) -> None:
        task_id, other = await self.task(), await self.task()
        d1, d2, elsewhere = _id("doc"), _id("doc"), _id("doc")
        await self.given_document(d1, task_id, 0)
        await self.given_document(d2, task_id, 1)
        await self.given_document(elsewhere, other, 0)
        c0, c1, c2, cx = _id("chunk"), _id("chunk"), _id("chunk"), _id("chunk")
        await self.given_chunk(c0, d1, 0, ChunkStatus.COMPLETED)
        await self.given_chunk(c1, d1, 1, ChunkStatus.PENDING)
        await self.given_chunk(c2, d2, 0, ChunkStatus.FAILED)
        await self.given_chunk(cx, elsewhere, 0, ChunkStatus.COMPLETED)
        rows = {
            c0: LoggedChunk(c0, d1, 0, ChunkStatus.COMPLETED),
            c1: LoggedChunk(c1, d1, 1, ChunkStatus.PENDING),
            c2: LoggedChunk(c2, d2, 0, ChunkStatus.FAILED),
        }
        async with self.repo.locked(task_id) as tx:
            assert _by_id(await tx.chunks()) == rows
            assert _by_id(await tx.chunks(d1)) == {c0: rows[c0], c1: rows[c1]}
            assert await tx.chunks_by_id([c2, _id("chunk")]) == [rows[c2]]
            assert await tx.chunks_by_id([]) == []

    async def test_whether_the_task_is_stored_and_its_chunks_status(self) -> None:
        task_id = await self.task()
        doc = _id("doc")
        await self.given_document(doc, task_id, 0)
        done, pending = _id("chunk"), _id("chunk")
        await self.given_chunk(done, doc, 0, ChunkStatus.COMPLETED)
        await self.given_chunk(pending, doc, 1, ChunkStatus.SUMMARIZING)
        found = await self.repo.task_and_chunks(task_id, [done, pending, _id("chunk")])
        assert found.stored and found.chunk_status == {done: ChunkStatus.COMPLETED, pending: ChunkStatus.SUMMARIZING}
        missing = await self.repo.task_and_chunks(_id("task"), [])
        assert not missing.stored and missing.chunk_status == {}

    async def test_the_stored_keys_are_those_of_the_task_asked_that_have_an_entry(self) -> None:
        task_id, other = await self.task(), await self.task()
        await self.append(task_id, entry("a"), entry("b"))
        await self.append(other, entry("c"))
        assert (await self.repo.task_and_chunks(task_id, [], ["a", "c", "z"])).stored_keys == {"a"}
        assert (await self.repo.task_and_chunks(task_id, [])).stored_keys == set()

    # --- pruning ------------------------------------------------------------------------------------

    async def test_pruning_deletes_the_log_of_tasks_that_ended_long_ago_and_keeps_their_head(self) -> None:
        old = await self.task(TaskStatus.COMPLETED, ended_s_ago=3600)
        recent = await self.task(TaskStatus.CANCELLED)
        running = await self.task(TaskStatus.PROCESSING, ended_s_ago=3600)  # not ended: kept however old
        for task_id in (old, recent, running):
            await self.append(task_id, entry("a"), entry("b"))
        deleted = 0
        while gone := await self.repo.prune(FINAL, retain_s=600, tasks_at_most=1):
            deleted += gone
        assert deleted >= 2  # the old task's two entries (and those of any other such task)
        assert await self.logged(old) == [] and await self.head(old) == 2
        assert len(await self.logged(recent)) == 2 and len(await self.logged(running)) == 2
        assert await self.append(old, entry("c")) == [3]  # a revived task numbers on after its head


def _by_id(chunks: list[LoggedChunk]) -> dict[str, Any]:
    return {c.chunk_id: c for c in chunks}
