"""The summarizer's repository in memory, with the rules of docsum_summarizer.repository.ChunkRepository:
the lease (taken, held, expired, renewed, released), the rounds a chunk waits for, the completions
guarded by the chunk's status (counted once on its document), and the task's and document's gates.

Time is the fake's own clock (`now`, `advance`): a lease expires or a round falls due only when a test
moves it, never while a test runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docsum_shared.cited import CitedSentence
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions, chunk_window, window
from docsum_shared.states import DOCUMENT_FINAL, ChunkStatus, DocumentStatus, TaskStatus, takes_work
from docsum_summarizer.batches.policy import LIVE, ChunkLine, LineStatus
from docsum_summarizer.policy import Answer, StoredChunk
from docsum_summarizer.repository import Claim, Claimed, DueRound

UNFINISHED_CHUNK = (ChunkStatus.PENDING, ChunkStatus.SUMMARIZING)


@dataclass
class TaskRow:
    status: TaskStatus
    owner: str = ""
    options: TaskOptions = TaskOptions()
    recovering: bool = False  # a chunk of it was taken over from a holder whose lease ran out


@dataclass
class DocumentRow:
    task_id: str
    status: DocumentStatus
    chunks_completed: int = 0
    chunks_failed: int = 0
    truncated_parts: int = 0


@dataclass
class ChunkTableRow:
    """One row of the chunks table: the chunk, its lease, its next round and its outcome."""

    document_id: str
    chunk_index: int
    status: ChunkStatus
    text: str
    context_before: str = ""
    context_after: str = ""
    failures: int = 0
    attempts: int = 0  # claims, and tries in place that followed a failure at once
    interruptions: int = 0  # claims that took the chunk over from another holder
    lease: str | None = None
    lease_expires_at: float | None = None
    retry_at: float | None = None  # waiting for its next round until then
    summary: str | None = None
    summary_model: str | None = None
    summary_truncated: bool = False
    error: str | None = None
    line: ChunkLine | None = None  # its batch line (batch mode)
    admitted: bool = True  # given its slot in the fair order (admission.py); not yet: claims defer it
    line_request: dict[str, Any] | None = None
    start_char: int = 0  # where it starts in its document's text
    summary_sentences: tuple[CitedSentence, ...] | None = None


class FakeChunkRepository:
    def __init__(self, **chunks: StoredChunk) -> None:
        """Each chunk given in a task and a document of its own, with the statuses it names."""
        self.now = 0.0
        self.tasks: dict[str, TaskRow] = {}
        self.documents: dict[str, DocumentRow] = {}
        self.rows: dict[str, ChunkTableRow] = {}
        self.positions: dict[str, Positions] = {}  # by document: where its units start (document_texts)
        self.released: list[str] = []  # chunks handed back by their holder, in order
        for chunk_id, chunk in chunks.items():
            task_id, document_id = f"task-of-{chunk_id}", f"document-of-{chunk_id}"
            self.tasks[task_id] = TaskRow(chunk.task_status, chunk.owner, chunk.options)
            self.documents[document_id] = DocumentRow(task_id, chunk.document_status)
            self.rows[chunk_id] = ChunkTableRow(
                document_id,
                0,
                chunk.status,
                chunk.text,
                chunk.context_before,
                chunk.context_after,
                failures=chunk.failures,
                line=chunk.line,
                start_char=chunk.start_char,
            )
            if chunk.positions is not None:
                self.positions[document_id] = chunk.positions

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def load(self, chunk_id: str) -> StoredChunk | None:
        row = self.rows.get(chunk_id)
        return None if row is None else self._stored(row)

    async def claim(self, chunk_id: str, holder: str, ttl_s: float) -> Claimed:
        row = self.rows.get(chunk_id)
        if row is None:
            return Claimed(Claim.UNAVAILABLE)
        document = self.documents[row.document_id]
        task = self.tasks[document.task_id]
        wanted = takes_work(task.status) and document.status not in DOCUMENT_FINAL
        batched = self._waits_for_batch(row)
        if wanted and not batched and row.admitted and self._free_for(row, holder):
            taken_over = row.status is ChunkStatus.SUMMARIZING and row.lease != holder
            row.status, row.attempts = ChunkStatus.SUMMARIZING, row.attempts + 1
            row.interruptions += int(taken_over)
            row.lease, row.lease_expires_at = holder, self.now + ttl_s
            task.recovering = task.recovering or taken_over
            return Claimed(Claim.TAKEN, self._stored(row))
        # Refused: a lease counts first, whatever its task, then a round not due yet.
        if row.status is ChunkStatus.SUMMARIZING:
            return Claimed(Claim.HELD)
        if row.status is ChunkStatus.PENDING and batched:
            return Claimed(Claim.BATCHED)
        if row.retry_at is not None and row.retry_at > self.now or not row.admitted:
            return Claimed(Claim.DEFERRED)
        return Claimed(Claim.UNAVAILABLE)

    async def renew(self, chunk_id: str, holder: str, ttl_s: float) -> None:
        row = self.rows.get(chunk_id)
        if row is not None and row.lease == holder and row.status is ChunkStatus.SUMMARIZING:
            row.lease_expires_at = self.now + ttl_s

    async def release(self, chunk_id: str, holder: str, *, retry_in_s: float | None = None) -> None:
        row = self.rows.get(chunk_id)
        if row is None or row.lease != holder or row.status is not ChunkStatus.SUMMARIZING:
            return
        row.status, row.lease, row.lease_expires_at = ChunkStatus.PENDING, None, None
        row.retry_at = None if retry_in_s is None else self.now + retry_in_s
        self.released.append(chunk_id)

    async def queue_line(
        self,
        chunk_id: str,
        holder: str,
        task_id: str,
        owner: str,
        custom_id: str,
        request: dict[str, Any],
        *,
        endpoint: str,
    ) -> bool:
        row = self.rows.get(chunk_id)
        if row is None or row.lease != holder or row.status is not ChunkStatus.SUMMARIZING:
            return False
        row.status, row.lease, row.lease_expires_at, row.retry_at = ChunkStatus.PENDING, None, None, None
        if row.line is None or row.line.status is LineStatus.DROPPED:
            row.line, row.line_request = ChunkLine(LineStatus.QUEUED, custom_id), request
        return True

    async def due_rounds(self, limit: int) -> list[DueRound]:
        due = sorted(
            ((chunk_id, row) for chunk_id, row in self.rows.items() if self._due(row)),
            key=lambda item: item[1].retry_at or 0.0,
        )
        return [
            DueRound(self.documents[row.document_id].task_id, row.document_id, chunk_id, row.chunk_index, row.retry_at)
            for chunk_id, row in due[:limit]
        ]

    async def announced(self, due: list[DueRound]) -> None:
        for announced in due:
            row = self.rows.get(announced.chunk_id)
            if row is not None and row.retry_at == announced.retry_at:  # not deferred again meanwhile
                row.retry_at = None

    async def complete(self, chunk_id: str, task_id: str, answer: Answer, *, weight: float = 1.0) -> bool:
        row = self.rows.get(chunk_id)
        if row is None or not self._unfinished(row):
            return False
        row.status, row.summary, row.summary_model, row.summary_truncated = (
            ChunkStatus.COMPLETED,
            answer.text,
            answer.model,
            answer.truncated,
        )
        row.summary_sentences = answer.sentences
        truncated = answer.truncated
        row.error, row.lease, row.lease_expires_at, row.retry_at = None, None, None, None
        document = self.documents[row.document_id]
        document.chunks_completed += 1
        document.truncated_parts += int(truncated)
        return True

    async def fail(self, chunk_id: str, error: str) -> bool:
        row = self.rows.get(chunk_id)
        if row is None or not self._unfinished(row):
            return False
        row.status, row.error = ChunkStatus.FAILED, error
        row.lease, row.lease_expires_at, row.retry_at = None, None, None
        self.documents[row.document_id].chunks_failed += 1
        return True

    async def record_failure(self, chunk_id: str, error: str, *, retry_now: bool) -> None:
        row = self.rows.get(chunk_id)
        if row is not None and row.status is ChunkStatus.SUMMARIZING:
            row.error, row.failures, row.attempts = error, row.failures + 1, row.attempts + int(retry_now)

    # The guards, one place each.

    def _free_for(self, row: ChunkTableRow, holder: str) -> bool:
        """A pending chunk whose round is due, or a leased one whose lease is ours or has run out."""
        if row.status is ChunkStatus.PENDING:
            return row.retry_at is None or row.retry_at <= self.now
        return row.status is ChunkStatus.SUMMARIZING and not self._held_by_another(row, holder)

    def _held_by_another(self, row: ChunkTableRow, holder: str) -> bool:
        expires = row.lease_expires_at
        return row.lease != holder and expires is not None and expires >= self.now

    def _waits_for_batch(self, row: ChunkTableRow) -> bool:
        """Its line is queued or in a batch: the batch answers it, not a claim."""
        return row.line is not None and row.line.status in LIVE

    def _unfinished(self, row: ChunkTableRow) -> bool:
        return row.status in UNFINISHED_CHUNK

    def _due(self, row: ChunkTableRow) -> bool:
        return row.retry_at is not None and row.retry_at <= self.now

    def _stored(self, row: ChunkTableRow) -> StoredChunk:
        document = self.documents[row.document_id]
        task = self.tasks[document.task_id]
        return StoredChunk(
            status=row.status,
            text=row.text,
            context_before=row.context_before,
            context_after=row.context_after,
            document_status=document.status,
            task_status=task.status,
            options=task.options,
            failures=row.failures,
            owner=task.owner,
            line=row.line,
            start_char=row.start_char,
            positions=self._window(row),
        )

    def _window(self, row: ChunkTableRow) -> Positions | None:
        """The document's positions around the chunk, as the SQL reads them."""
        whole = self.positions.get(row.document_id)
        if whole is None:
            return None
        start, end = row.start_char, row.start_char + len(row.text)
        before, inside = chunk_window(whole.starts, start, end)
        return window(whole.unit, whole.before + before, inside)
