"""The chunker's repository contract against PostgreSQL: the same cases as its fake passes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from docsum_chunker.chunking import owned_slices, split_into_chunks
from docsum_chunker.policy import CutChunk, chunk_id
from docsum_chunker.repository import ChunkRepository
from docsum_shared.approval import Approved, Hold
from docsum_shared.positions import chunk_window
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.documents import english_prose
from tests.repositories.chunker import ChunkerRepositoryContract, cut_chunks, new_id

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(scope="module")
async def pool(repository_db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    db = repository_db
    yield db


class TestChunkRepository(ChunkerRepositoryContract):
    @pytest.fixture(autouse=True)
    def _on(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.repo = ChunkRepository(pool)

    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, approved: Approved | None = None
    ) -> str:
        task_id = new_id("task")
        await self.pool.execute(
            "INSERT INTO tasks (id, owner, status, approved_calls, approved_cost_usd) VALUES ($1, $2, $3, $4, $5)",
            task_id, owner, status, approved.calls if approved else None, approved.cost_usd if approved else None,
        )  # fmt: skip
        return task_id

    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.CHUNKING, text: str | None = "Some text."
    ) -> str:
        document_id = new_id("doc")
        await self.pool.execute(
            "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'a.txt', $3)",
            document_id,
            task_id,
            status,
        )
        if text is not None:
            await self.pool.execute("INSERT INTO document_texts (document_id, text) VALUES ($1, $2)", document_id, text)
        return document_id

    async def asked_to_approve(self, task_id: str) -> Hold | None:
        row = await self.pool.fetchrow(
            "SELECT hold_reason, held_calls, held_cost_usd FROM tasks WHERE id = $1", task_id
        )
        return Hold(row["hold_reason"], row["held_calls"], row["held_cost_usd"]) if row["hold_reason"] else None

    async def error_of(self, document_id: str) -> str | None:
        return await self.pool.fetchval("SELECT error FROM documents WHERE id = $1", document_id)

    async def test_each_chunk_is_stored_with_where_it_lies_among_its_documents_units(self) -> None:
        """What the summarizer reads with a chunk (positions.chunk_window): how many of the document's
        units start at or before it, and those inside it; nothing for a text stored without positions."""
        starts = [0, 10, 10, 35, 80, 119]
        document = await self.given_document(await self.given_task())
        await self.pool.execute(
            "UPDATE document_texts SET position_unit = 'line', position_starts = $2 WHERE document_id = $1",
            document,
            starts,
        )
        bare = await self.given_document(await self.given_task())
        rows, bare_rows = cut_chunks(document, 3), cut_chunks(bare, 2)
        for doc, cut in ((document, rows), (bare, bare_rows)):
            async with self.repo.locked(doc) as tx:
                assert await tx.store_chunks(cut)
        stored = await self.pool.fetch(
            "SELECT id, units_before, unit_starts FROM chunks WHERE document_id = ANY($1::text[]) ORDER BY id",
            [document, bare],
        )
        windows = {r["id"]: (r["units_before"], r["unit_starts"]) for r in stored}
        for row in rows:
            before, inside = chunk_window(starts, row.chunk.start, row.chunk.end)
            assert windows[row.id] == (before, list(inside))
        assert [windows[row.id] for row in bare_rows] == [(None, None), (None, None)]

    async def test_without_the_task_lock_two_documents_of_a_task_are_stored_at_once(self) -> None:
        """No ceiling, no approval to decide: a document's chunks are stored while another document of its
        task is being stored, not after it (with the lock, the second would wait for the first's commit)."""
        task = await self.given_task()
        first, second = await self.given_document(task), await self.given_document(task)
        async with self.repo.locked(first, task=False) as tx:
            assert tx.task is None and await tx.store_chunks(cut_chunks(first, 2))
            async with asyncio.timeout(30):  # a store that waited for this open transaction would never end
                async with self.repo.locked(second, task=False) as other:
                    assert await other.store_chunks(cut_chunks(second, 3))
        stored = await self.pool.fetch(
            "SELECT document_id, count(*) AS n FROM chunks WHERE document_id = ANY($1::text[]) GROUP BY document_id",
            [first, second],
        )
        assert {r["document_id"]: r["n"] for r in stored} == {first: 2, second: 3}

    async def test_a_new_versions_document_is_loaded_with_its_previous_versions_owned_slices(self) -> None:
        """The task names its previous task (of the same owner): the document of the same key there gives
        the owned slices of its chunks, in order, for the cut to keep; a document of another key, or of a
        task that names none, gives none."""
        text = english_prose(30_000, seed=4)
        first_task = await self.given_task()
        first = await self.given_document(first_task, text=text)
        chunks = split_into_chunks(text)
        async with self.repo.locked(first) as tx:  # stored as the chunker stores them
            assert await tx.store_chunks([CutChunk(chunk_id(first, c.index), c.index, c) for c in chunks])
        unlinked = await self.given_document(await self.given_task(), text=text)
        task = await self.given_task()
        await self.pool.execute("UPDATE tasks SET previous_task = $2 WHERE id = $1", task, first_task)
        again = await self.given_document(task, text=text + " One more sentence.")
        other = await self.given_document(task, text="Another file.")
        await self.pool.execute("UPDATE documents SET filename = 'b.txt' WHERE id = $1", other)
        loaded = await self.repo.load(again)
        assert loaded is not None and loaded.status is DocumentStatus.CHUNKING
        owned = owned_slices(chunks)
        assert len(owned) > 5 and loaded.previous == tuple(owned) and "".join(owned) == text
        for document in (other, unlinked):  # another key; a task that names no previous one
            loaded = await self.repo.load(document)
            assert loaded is not None and loaded.status is DocumentStatus.CHUNKING and loaded.previous == ()
