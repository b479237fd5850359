"""The merger's repository in memory, with the rules of docsum_merger.repository.MergeRepository: a
document is completed or failed only while it is summarizing, a task is finished only while it takes
work, a node stored again at its place replaces the one before."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from docsum_merger.policy import (
    DEFAULT_OPTIONS,
    ChunkState,
    Cited,
    DocumentState,
    DocumentWithTask,
    TaskWithDocuments,
    with_awaited,
)
from docsum_merger.tree import Merged, MergeNode
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel.schemas import ChunkProgress, DocumentResult, Recovery, TaskResult, Usage
from docsum_shared.states import TASK_TAKES_WORK, ChunkStatus, DocumentStatus, TaskStatus


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class StoredTask:
    """A row of `tasks`, as far as the merger reads and writes it."""

    owner: str = "owner"
    title: str | None = "batch"
    status: TaskStatus = TaskStatus.PROCESSING
    options: TaskOptions = DEFAULT_OPTIONS
    expected_documents: int | None = None
    summary: str | None = None
    summary_model: str | None = None
    error: str | None = None
    summary_truncated: bool = False
    merge_failures: int = 0
    summary_sentences: Cited = None
    updated_at: datetime = field(default_factory=_now)
    last_active_at: datetime = field(default_factory=_now)


@dataclass
class StoredDocument:
    """A row of `documents`, as far as the merger reads and writes it."""

    task_id: str
    filename: str
    position: int = 0
    status: DocumentStatus = DocumentStatus.SUMMARIZING
    chunk_total: int | None = None  # None until the document is cut
    chunks_completed: int = 0
    chunks_failed: int = 0
    summary: str | None = None
    summary_model: str | None = None
    error: str | None = None
    coverage: float | None = None
    failed_chunks: list[int] = field(default_factory=list)
    truncated_parts: int = 0
    merge_failures: int = 0
    summary_sentences: Cited = None


@dataclass
class FakeMergeRepository:
    tasks: dict[str, StoredTask] = field(default_factory=dict)
    documents: dict[str, StoredDocument] = field(default_factory=dict)
    chunks: dict[str, list[ChunkState]] = field(default_factory=dict)
    nodes: dict[tuple[str, int, int], MergeNode] = field(default_factory=dict)
    chunk_rows_read: int = 0
    touched: list[str] = field(default_factory=list)

    # Where a document may be completed or failed from, and a task finished from (as in PostgreSQL).
    MERGEABLE = frozenset({DocumentStatus.SUMMARIZING})
    UNFINISHED_TASK = frozenset(TASK_TAKES_WORK)

    # --- the state a test starts from (what the gateway, parser, chunker and summarizer write) -----

    def add_task(
        self,
        task_id: str,
        *,
        status: TaskStatus = TaskStatus.PROCESSING,
        title: str | None = "batch",
        options: TaskOptions = DEFAULT_OPTIONS,
        owner: str = "owner",
        expected_documents: int | None = None,
    ) -> StoredTask:
        self.tasks[task_id] = StoredTask(owner, title, status, options, expected_documents)
        return self.tasks[task_id]

    def add_document(
        self,
        document_id: str,
        task_id: str,
        *,
        filename: str = "a.txt",
        position: int = 0,
        status: DocumentStatus = DocumentStatus.SUMMARIZING,
        chunks: list[ChunkState] | None = None,
        summary: str | None = None,
        sentences: Cited = None,
    ) -> StoredDocument:
        """A document, with its chunks once it has been cut (its counts follow them)."""
        self.documents[document_id] = StoredDocument(
            task_id, filename, position, status, summary=summary, summary_sentences=sentences
        )
        if chunks is not None:
            self.chunks[document_id] = []
            self.documents[document_id].chunk_total = len(chunks)
            for chunk in chunks:
                self.put_chunk(document_id, chunk)
        return self.documents[document_id]

    def put_chunk(self, document_id: str, chunk: ChunkState) -> None:
        """A chunk of the document as the summarizer leaves it, and the document's counts with it."""
        chunks = self.chunks.setdefault(document_id, [])
        chunks[:] = sorted([c for c in chunks if c.index != chunk.index] + [chunk], key=lambda c: c.index)
        doc = self.documents[document_id]
        doc.chunks_completed = sum(c.status is ChunkStatus.COMPLETED for c in chunks)
        doc.chunks_failed = sum(c.status is ChunkStatus.FAILED for c in chunks)

    # --- the repository ---------------------------------------------------------------------------

    def _state(self, document_id: str) -> DocumentState:
        d = self.documents[document_id]
        return DocumentState(
            document_id,
            d.filename,
            d.status,
            d.summary,
            d.error,
            d.coverage,
            d.chunk_total,
            d.chunks_completed + d.chunks_failed,
            d.summary_sentences,
        )

    async def load_document(self, document_id: str) -> DocumentWithTask | None:
        doc = self.documents.get(document_id)
        if doc is None:
            return None
        task = self.tasks[doc.task_id]
        return DocumentWithTask(self._state(document_id), task.status, task.options, task.owner)

    async def load_chunks(self, document_id: str) -> list[ChunkState]:
        chunks = list(self.chunks.get(document_id, []))
        self.chunk_rows_read += len(chunks)
        return chunks

    async def complete_document(
        self, document_id: str, merged: Merged, coverage: float, failed_chunks: list[int]
    ) -> None:
        doc = self.documents.get(document_id)
        if doc is None or doc.status not in self.MERGEABLE:
            return
        doc.status, doc.summary, doc.summary_model = DocumentStatus.COMPLETED, merged.text, merged.model
        doc.coverage, doc.failed_chunks = coverage, list(failed_chunks)
        doc.truncated_parts += int(merged.truncated)
        doc.summary_sentences = merged.sentences

    async def fail_document(self, document_id: str, error: str) -> None:
        doc = self.documents.get(document_id)
        if doc is None or doc.status not in self.MERGEABLE:
            return
        doc.status, doc.error = DocumentStatus.FAILED, error

    async def record_document_merge_failure(self, document_id: str) -> int:
        doc = self.documents.get(document_id)
        if doc is None:
            return 0
        doc.merge_failures += 1
        return doc.merge_failures

    async def record_task_merge_failure(self, task_id: str) -> int:
        task = self.tasks.get(task_id)
        if task is None:
            return 0
        task.merge_failures += 1
        return task.merge_failures

    def _documents_of(self, task_id: str) -> list[str]:
        ids = [i for i, d in self.documents.items() if d.task_id == task_id]
        return sorted(ids, key=lambda i: self.documents[i].position)

    async def load_task(self, task_id: str) -> TaskWithDocuments | None:
        task = self.tasks.get(task_id)
        if task is None:
            return None
        docs = with_awaited([self._state(i) for i in self._documents_of(task_id)], task.expected_documents)
        return TaskWithDocuments(task.status, task.title, docs, task.options, task.owner)

    async def finish_task(self, task_id: str, status: TaskStatus, merged: Merged | None, error: str | None) -> None:
        task = self.tasks.get(task_id)
        if task is None or task.status not in self.UNFINISHED_TASK:
            return
        task.status, task.error = status, error
        task.summary = task.summary_model = task.summary_sentences = None
        task.summary_truncated = False
        if merged is not None:
            task.summary, task.summary_model, task.summary_sentences = merged.text, merged.model, merged.sentences
            task.summary_truncated = merged.truncated
        task.updated_at = task.last_active_at = _now()

    async def store_node(self, node: MergeNode) -> None:
        self.nodes[node.scope_id, node.level, node.position] = node

    async def previous_tree(self, task_id: str, document_id: str) -> tuple[list[ChunkState], list[MergeNode]] | None:
        task = self.tasks[task_id]
        previous_id = task.options.previous_task or ""
        previous = self.tasks.get(previous_id)
        if previous is None or previous.owner != task.owner:
            return None
        name = self.documents[document_id].filename
        ours = [i for i in self._documents_of(task_id) if self.documents[i].filename == name]
        theirs = [i for i in self._documents_of(previous_id) if self.documents[i].filename == name]
        n = ours.index(document_id)
        if n >= len(theirs):
            return None
        nodes = [node for key, node in sorted(self.nodes.items()) if key[0] == theirs[n]]
        return await self.load_chunks(theirs[n]), nodes

    async def touch_task(self, task_id: str) -> None:
        self.touched.append(task_id)
        if task_id in self.tasks:
            self.tasks[task_id].last_active_at = _now()

    async def task_result(self, task_id: str) -> TaskResult | None:
        task = self.tasks.get(task_id)
        if task is None:
            return None
        docs = [(i, self.documents[i]) for i in self._documents_of(task_id)]
        return TaskResult(
            task_id=task_id,
            status=task.status,
            updated_at=task.updated_at,
            summary=task.summary,
            error=task.error,
            truncated=task.summary_truncated or any(d.truncated_parts for _, d in docs),
            usage=Usage(),
            recovery=Recovery(),
            documents=[
                DocumentResult(
                    document_id=i,
                    filename=d.filename,
                    status=d.status,
                    summary=d.summary,
                    error=d.error,
                    truncated=bool(d.truncated_parts),
                    chunks=ChunkProgress(done=d.chunks_completed, failed=d.chunks_failed, total=d.chunk_total),
                )
                for i, d in docs
            ],
        )
