"""The merger's repository contract: what docsum_merger.handlers relies on of its repository.

A document is completed or failed only while it is summarizing, and once only; a task is finished only
while it takes work, and once only; merge failures are counted per document and per task; each merge
node is kept, and one stored again at its place replaces it; the loads return what the stages decide
from. Run against the fake (tests/unit/test_merger_repository.py) and PostgreSQL
(tests/integration/test_merger_repository.py).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from datetime import datetime

from docsum_merger.handlers import Repository
from docsum_merger.policy import AWAITED, DEFAULT_OPTIONS, ChunkState, Cited
from docsum_merger.tree import Merged, MergeNode
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.options import TaskOptions
from docsum_shared.states import TASK_TAKES_WORK, ChunkStatus, DocumentStatus, TaskStatus

NOT_SUMMARIZING = (
    DocumentStatus.CHUNKING,
    DocumentStatus.COMPLETED,
    DocumentStatus.FAILED,
    DocumentStatus.CANCELLED,
)
TAKES_NO_WORK = tuple(s for s in TaskStatus if s not in TASK_TAKES_WORK)


def new_id(kind: str) -> str:
    """A fresh id: cases never see each other's rows on a shared database."""
    return f"{kind}-{uuid.uuid4().hex[:16]}"


# A summary's sentences: one cited, one joining two sources of two documents, one without a page.
SENTENCES = (
    CitedSentence("Kafka keeps logs.", (Source("doc-a", 3, 120, 137),), "cited", (0, 17)),
    CitedSentence("Both agree.", (Source("doc-a", 3, 120, 137), Source("doc-b", None, 0, 40)), "synthesis", (18, 29)),
)


def chunk(index: int, status: ChunkStatus = ChunkStatus.COMPLETED) -> ChunkState:
    """A chunk; a completed one with its summary's sentences, each citing a range of its own."""
    summary = f"summary {index}" if status is ChunkStatus.COMPLETED else None
    error = f"error {index}" if status is ChunkStatus.FAILED else None
    sentences = None
    if summary is not None:
        sentences = (CitedSentence(summary, (Source("doc", index + 1, 10 * index, 10 * index + 9),), "cited", (0, 9)),)
    return ChunkState(index, status, summary, error, sentences)


class MergerRepositoryContract(ABC):
    repo: Repository

    # --- the world a case starts from (what the other services write), one per repository ----------

    @abstractmethod
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
        """A new task (last active an hour ago), its documents new versions of `previous`'s; its id."""

    @abstractmethod
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
        """A new document of the task, with its chunks once it is cut (its counts follow them); its id."""

    @abstractmethod
    async def stored_nodes(self, scope_id: str) -> list[MergeNode]:
        """The merge nodes kept for the scope, by level and position (the repository only writes them)."""

    @abstractmethod
    async def task_sentences(self, task_id: str) -> Cited:
        """The sentences stored with the task's summary (no load of the merger returns them)."""

    @abstractmethod
    async def last_active(self, task_id: str) -> datetime:
        """When the task was last marked active (reconcile re-drives a task idle for long)."""

    async def a_document(self, status: DocumentStatus = DocumentStatus.SUMMARIZING) -> str:
        summary = "kept" if status is DocumentStatus.COMPLETED else None
        return await self.given_document(await self.given_task(), status=status, chunks=[chunk(0)], summary=summary)

    # --- loads ---------------------------------------------------------------------------------

    async def test_a_document_loads_with_its_tasks_status_options_and_owner(self) -> None:
        options = TaskOptions(strict=True, language="fr", style="bullets")
        task = await self.given_task(status=TaskStatus.PENDING, options=options, owner="alice")
        chunks = [chunk(0), chunk(1, ChunkStatus.FAILED), chunk(2, ChunkStatus.PENDING)]
        doc = await self.given_document(task, filename="report.pdf", chunks=chunks)
        loaded = await self.repo.load_document(doc)
        assert loaded is not None
        assert loaded.task_status is TaskStatus.PENDING and loaded.options == options and loaded.owner == "alice"
        assert loaded.document.id == doc and loaded.document.filename == "report.pdf"
        assert loaded.document.status is DocumentStatus.SUMMARIZING and loaded.document.summary is None
        assert loaded.document.chunk_total == 3 and loaded.document.chunks_final == 2  # by the document's counts

    async def test_a_document_not_cut_yet_has_no_chunk_total_and_an_unknown_one_is_none(self) -> None:
        doc = await self.given_document(await self.given_task(), status=DocumentStatus.CHUNKING)
        loaded = await self.repo.load_document(doc)
        assert loaded is not None and loaded.document.chunk_total is None and loaded.document.chunks_final == 0
        assert await self.repo.load_document(new_id("doc")) is None

    async def test_chunks_load_in_order_and_each_row_read_is_counted(self) -> None:
        doc = await self.given_document(
            await self.given_task(), chunks=[chunk(2), chunk(0, ChunkStatus.FAILED), chunk(1)]
        )
        before = self.repo.chunk_rows_read
        chunks = await self.repo.load_chunks(doc)
        assert [c.index for c in chunks] == [0, 1, 2]
        assert chunks[0] == chunk(0, ChunkStatus.FAILED) and chunks[1] == chunk(1)
        assert self.repo.chunk_rows_read == before + 3

    async def test_a_task_loads_with_its_documents_in_order_and_those_it_still_awaits(self) -> None:
        options = TaskOptions(length="brief")
        task = await self.given_task(title="Q3", options=options, owner="bob", expected_documents=3)
        second = await self.given_document(task, filename="b.txt", position=1)
        first = await self.given_document(
            task, filename="a.txt", position=0, status=DocumentStatus.COMPLETED, summary="s", sentences=SENTENCES
        )
        loaded = await self.repo.load_task(task)
        assert loaded is not None
        assert loaded.status is TaskStatus.PROCESSING and loaded.title == "Q3"
        assert loaded.options == options and loaded.owner == "bob"
        assert [d.id for d in loaded.documents[:2]] == [first, second]
        assert loaded.documents[0].status is DocumentStatus.COMPLETED and loaded.documents[2] == AWAITED
        assert loaded.documents[0].sentences == SENTENCES and loaded.documents[1].sentences is None
        assert await self.repo.load_task(new_id("task")) is None

    # --- a document's end ----------------------------------------------------------------------

    async def test_a_document_is_completed_with_its_summary(self) -> None:
        doc = await self.a_document()
        await self.repo.complete_document(doc, Merged("the summary", "model-1", True, SENTENCES), 0.5, [1])
        loaded = await self.repo.load_document(doc)
        assert loaded is not None and loaded.document.status is DocumentStatus.COMPLETED
        assert loaded.document.summary == "the summary" and loaded.document.coverage == 0.5
        assert loaded.document.sentences == SENTENCES

    async def test_a_document_is_failed_with_its_error(self) -> None:
        doc = await self.a_document()
        await self.repo.fail_document(doc, "2 of 2 parts could not be summarized")
        loaded = await self.repo.load_document(doc)
        assert loaded is not None and loaded.document.status is DocumentStatus.FAILED
        assert loaded.document.error == "2 of 2 parts could not be summarized"

    async def test_a_document_not_summarizing_is_neither_completed_nor_failed(self) -> None:
        for status in NOT_SUMMARIZING:
            doc = await self.a_document(status)
            before = await self.repo.load_document(doc)
            await self.repo.complete_document(doc, Merged("late", "model-1"), 1.0, [])
            await self.repo.fail_document(doc, "late")
            assert await self.repo.load_document(doc) == before, status

    async def test_a_document_ends_once_whatever_comes_after(self) -> None:
        doc = await self.a_document()
        await self.repo.complete_document(doc, Merged("first", "model-1"), 1.0, [])
        await self.repo.complete_document(doc, Merged("second", "model-2"), 0.5, [0])
        await self.repo.fail_document(doc, "too late")
        loaded = await self.repo.load_document(doc)
        assert loaded is not None and loaded.document.status is DocumentStatus.COMPLETED
        assert loaded.document.summary == "first" and loaded.document.error is None
        failed = await self.a_document()
        await self.repo.fail_document(failed, "first")
        await self.repo.fail_document(failed, "second")
        loaded = await self.repo.load_document(failed)
        assert loaded is not None and loaded.document.error == "first"

    async def test_merge_failures_are_counted_per_document_and_per_task(self) -> None:
        task = await self.given_task()
        doc, other = await self.given_document(task), await self.given_document(task, position=1)
        assert [await self.repo.record_document_merge_failure(doc) for _ in range(3)] == [1, 2, 3]
        assert await self.repo.record_document_merge_failure(other) == 1
        assert [await self.repo.record_task_merge_failure(task) for _ in range(2)] == [1, 2]
        assert await self.repo.record_task_merge_failure(await self.given_task()) == 1
        assert await self.repo.record_document_merge_failure(new_id("doc")) == 0  # nothing to count on

    # --- a task's end --------------------------------------------------------------------------

    async def test_a_task_that_takes_work_is_finished(self) -> None:
        for status in TASK_TAKES_WORK:
            task = await self.given_task(status=status)
            await self.given_document(task, status=DocumentStatus.COMPLETED, summary="one")
            merged = Merged("all", "model-1", True, SENTENCES)
            await self.repo.finish_task(task, TaskStatus.COMPLETED_WITH_ERRORS, merged, "1 of 2 failed")
            result = await self.repo.task_result(task)
            assert result is not None and result.status == TaskStatus.COMPLETED_WITH_ERRORS, status
            assert result.summary == "all" and result.error == "1 of 2 failed" and result.truncated
            assert await self.task_sentences(task) == SENTENCES

    async def test_a_held_or_final_task_is_not_finished(self) -> None:
        for status in TAKES_NO_WORK:
            task = await self.given_task(status=status)
            await self.repo.finish_task(task, TaskStatus.COMPLETED, Merged("late", "model-1"), None)
            loaded, result = await self.repo.load_task(task), await self.repo.task_result(task)
            assert loaded is not None and loaded.status is status, status
            assert result is not None and result.summary is None, status

    async def test_a_task_finishes_once(self) -> None:
        task = await self.given_task()
        await self.repo.finish_task(task, TaskStatus.COMPLETED, Merged("first", "model-1"), None)
        await self.repo.finish_task(task, TaskStatus.FAILED, None, "second")
        result = await self.repo.task_result(task)
        assert result is not None and result.status == TaskStatus.COMPLETED
        assert result.summary == "first" and result.error is None
        assert await self.task_sentences(task) is None  # a summary stored without them

    async def test_a_tasks_result_lists_its_documents_in_order_with_their_progress(self) -> None:
        task = await self.given_task()
        chunks = [chunk(0), chunk(1, ChunkStatus.FAILED), chunk(2, ChunkStatus.SUMMARIZING)]
        second = await self.given_document(task, filename="b.txt", position=1, chunks=chunks)
        first = await self.given_document(task, filename="a.txt", position=0, chunks=[chunk(0)])
        await self.repo.complete_document(first, Merged("one", "model-1"), 1.0, [])
        result = await self.repo.task_result(task)
        assert result is not None and result.status == TaskStatus.PROCESSING and not result.truncated
        assert [(d.document_id, d.filename) for d in result.documents] == [(first, "a.txt"), (second, "b.txt")]
        assert result.documents[0].summary == "one" and result.documents[0].status == DocumentStatus.COMPLETED
        progress = result.documents[1].chunks
        assert (progress.done, progress.failed, progress.total) == (1, 1, 3)
        assert await self.repo.task_result(new_id("task")) is None

    # --- merge nodes and activity --------------------------------------------------------------

    async def test_each_merge_node_is_kept_and_one_stored_again_at_its_place_replaces_it(self) -> None:
        scope = new_id("doc")
        await self.repo.store_node(MergeNode(scope, 0, 1, 3, "k01", "b"))
        await self.repo.store_node(MergeNode(scope, 0, 0, 4, "k00", "a"))
        await self.repo.store_node(MergeNode(scope, 1, 0, 2, "k10", "ab", SENTENCES))
        await self.repo.store_node(MergeNode(scope, 0, 0, 2, "k00-replanned", "a, smaller", SENTENCES[:1]))
        assert await self.stored_nodes(scope) == [
            MergeNode(scope, 0, 0, 2, "k00-replanned", "a, smaller", SENTENCES[:1]),
            MergeNode(scope, 0, 1, 3, "k01", "b"),
            MergeNode(scope, 1, 0, 2, "k10", "ab", SENTENCES),
        ]
        assert await self.stored_nodes(new_id("doc")) == []

    async def test_a_new_versions_previous_tree_is_its_previous_documents_chunks_and_merge_nodes(self) -> None:
        first = await self.given_task()
        old = await self.given_document(first, filename="report.txt", chunks=[chunk(0), chunk(1)])
        await self.given_document(first, filename="other.txt", position=1, chunks=[chunk(0)])
        await self.repo.store_node(MergeNode(old, 1, 0, 2, "k10", "the top"))
        await self.repo.store_node(MergeNode(old, 0, 0, 2, "k00", "a and b", SENTENCES))
        second = await self.given_task(previous=first)
        new = await self.given_document(second, filename="report.txt", chunks=[chunk(0)])
        found = await self.repo.previous_tree(second, new)
        assert found is not None
        chunks, nodes = found
        assert [c.index for c in chunks] == [0, 1]
        assert nodes == [
            MergeNode(old, 0, 0, 2, "k00", "a and b", SENTENCES),
            MergeNode(old, 1, 0, 2, "k10", "the top"),
        ]
        # none for a name the previous task does not have, for a task naming none, nor across owners
        named_anew = await self.given_document(second, filename="new.txt", position=1, chunks=[chunk(0)])
        assert await self.repo.previous_tree(second, named_anew) is None
        assert await self.repo.previous_tree(first, old) is None
        stranger = await self.given_task(owner="mallory", previous=first)
        theirs = await self.given_document(stranger, filename="report.txt", chunks=[chunk(0)])
        assert await self.repo.previous_tree(stranger, theirs) is None

    async def test_touching_a_task_marks_it_active(self) -> None:
        task = await self.given_task()
        before = await self.last_active(task)
        await self.repo.touch_task(task)
        assert await self.last_active(task) > before
        await self.repo.touch_task(new_id("task"))  # a task gone meanwhile: nothing to mark
