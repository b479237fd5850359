"""The merger's SQL: documents and tasks reaching their summaries, and the nodes of hierarchical merges."""

from __future__ import annotations

import asyncpg

from docsum_llm.openai.prompts import PROMPT_VERSION
from docsum_shared import lifecycle, metrics, outbox
from docsum_shared.cited import from_json, to_json
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel import queries, views
from docsum_shared.readmodel.schemas import TaskResult
from docsum_shared.states import TASK_TAKES_WORK, ChunkStatus, DocumentStatus, TaskStatus

from .policy import ChunkState, Cited, DocumentState, DocumentWithTask, TaskWithDocuments, with_awaited
from .settings import MergerSettings
from .tree import Merged, MergeNode

MERGEABLE = [DocumentStatus.SUMMARIZING]  # a document whose chunks are being (or have been) summarized
UNFINISHED_TASK = list(TASK_TAKES_WORK)


def _document(row: asyncpg.Record) -> DocumentState:
    return DocumentState(
        row["id"],
        row["filename"],
        DocumentStatus(row["status"]),
        row["summary"],
        row["error"],
        row["coverage"],
        row["chunk_total"],
        row["chunks_completed"] + row["chunks_failed"],
        _cited(row["summary_sentences"]),
    )


def _cited(data: str | None) -> Cited:
    return None if data is None else from_json(data)


def _json(sentences: Cited) -> str | None:
    return None if sentences is None else to_json(sentences)


_DOCUMENT = (
    "d.id, d.filename, d.status, d.summary, d.error, d.coverage, d.chunk_total, d.chunks_completed, d.chunks_failed,"
    " d.summary_sentences::text"
)


class MergeRepository:
    def __init__(self, pool: asyncpg.Pool, settings: MergerSettings) -> None:
        self.pool = pool
        self.settings = settings  # prices, for the usage in a task's result
        self.chunk_rows_read = 0  # how many chunk rows this process has read: O(chunks), not O(chunks²)

    async def load_document(self, document_id: str) -> DocumentWithTask | None:
        row = await self.pool.fetchrow(
            f"SELECT {_DOCUMENT}, t.status AS task_status, t.options, t.owner"
            " FROM documents d JOIN tasks t ON t.id = d.task_id WHERE d.id = $1",
            document_id,
        )
        if row is None:
            return None
        options = TaskOptions.from_stored(row["options"])
        return DocumentWithTask(_document(row), TaskStatus(row["task_status"]), options, row["owner"])

    async def load_chunks(self, document_id: str) -> list[ChunkState]:
        rows = await self.pool.fetch(
            "SELECT chunk_index, status, summary, error, summary_sentences::text FROM chunks"
            " WHERE document_id = $1 ORDER BY chunk_index",
            document_id,
        )
        self.chunk_rows_read += len(rows)
        return [
            ChunkState(
                r["chunk_index"], ChunkStatus(r["status"]), r["summary"], r["error"], _cited(r["summary_sentences"])
            )
            for r in rows
        ]

    async def complete_document(
        self, document_id: str, merged: Merged, coverage: float, failed_chunks: list[int]
    ) -> None:
        await self.pool.execute(
            "UPDATE documents SET status = $7, summary = $2, summary_model = $3, summary_prompt_version = $4,"
            " coverage = $5, failed_chunks = $6, truncated_parts = truncated_parts + $9::int,"
            " summary_sentences = $10::jsonb, updated_at = now()"
            " WHERE id = $1 AND status = ANY($8::text[])",
            document_id, merged.text, merged.model, PROMPT_VERSION, coverage, failed_chunks, DocumentStatus.COMPLETED,
            MERGEABLE, int(merged.truncated), _json(merged.sentences),
        )  # fmt: skip

    async def fail_document(self, document_id: str, error: str) -> None:
        """The document FAILED with `error` while its chunks are summarized, and the webhook deliveries that
        owes, in one transaction."""
        await lifecycle.fail_document(self.pool, document_id, error, MERGEABLE)

    async def record_document_merge_failure(self, document_id: str) -> int:
        """One more failed attempt at the document's merge; the total so far."""
        failures = await self.pool.fetchval(
            "UPDATE documents SET merge_failures = merge_failures + 1 WHERE id = $1 RETURNING merge_failures",
            document_id,
        )
        return int(failures or 0)

    async def record_task_merge_failure(self, task_id: str) -> int:
        failures = await self.pool.fetchval(
            "UPDATE tasks SET merge_failures = merge_failures + 1 WHERE id = $1 RETURNING merge_failures", task_id
        )
        return int(failures or 0)

    async def load_task(self, task_id: str) -> TaskWithDocuments | None:
        task = await self.pool.fetchrow(
            "SELECT status, title, options, owner, expected_documents FROM tasks WHERE id = $1", task_id
        )
        if task is None:
            return None
        rows = await self.pool.fetch(
            f"SELECT {_DOCUMENT} FROM documents d WHERE d.task_id = $1 ORDER BY d.position",
            task_id,
        )
        options = TaskOptions.from_stored(task["options"])
        docs = with_awaited([_document(r) for r in rows], task["expected_documents"])
        return TaskWithDocuments(TaskStatus(task["status"]), task["title"], docs, options, task["owner"])

    async def finish_task(self, task_id: str, status: TaskStatus, merged: Merged | None, error: str | None) -> None:
        """The task final with its summary (None: no summary, e.g. every document failed), and in the same
        transaction the webhook deliveries its end owes (outbox.py): an end stored is always told."""
        async with self.pool.acquire() as conn, conn.transaction():
            moved = await conn.fetchrow(
                "UPDATE tasks SET status = $2, summary = $3, summary_model = $4, error = $5,"
                " summary_prompt_version = $6, summary_truncated = $8, summary_sentences = $9::jsonb,"
                " updated_at = now(), last_active_at = now()"
                " WHERE id = $1 AND status = ANY($7::text[])"
                " RETURNING extract(epoch FROM now() - recovering_since)::float8 AS recovery_s",
                task_id, status, merged and merged.text, merged and merged.model, error, PROMPT_VERSION,
                UNFINISHED_TASK, bool(merged and merged.truncated), _json(merged.sentences) if merged else None,
            )  # fmt: skip
            if moved is not None:  # a handling again (a replay, a re-drive) moves nothing and owes nothing
                await outbox.enqueue_task(conn, self.settings, task_id, status)
        if moved is not None and moved["recovery_s"] is not None:  # it got here through a recovery
            recovered = status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_WITH_ERRORS)
            metrics.RECOVERIES.labels("recovered" if recovered else "failed").inc()
            metrics.RECOVERY_SECONDS.observe(moved["recovery_s"])

    async def store_node(self, node: MergeNode) -> None:
        """One finished node of a hierarchical merge (its answer is in the result cache as well)."""
        await self.pool.execute(
            "INSERT INTO merge_nodes (scope_id, level, position, inputs, cache_key, summary, sentences)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT (scope_id, level, position) DO UPDATE"
            " SET inputs = EXCLUDED.inputs, cache_key = EXCLUDED.cache_key, summary = EXCLUDED.summary,"
            " sentences = EXCLUDED.sentences",
            node.scope_id, node.level, node.position, node.inputs, node.cache_key, node.summary,
            _json(node.sentences),
        )  # fmt: skip

    async def previous_tree(self, task_id: str, document_id: str) -> tuple[list[ChunkState], list[MergeNode]] | None:
        """The chunks and the merge nodes (by level and position) of the document that `document_id` is a
        new version of (its task's `previous_task`'s, paired by key); None when it is none's."""
        previous = await queries.previous_document(self.pool, task_id, document_id)
        if previous is None:
            return None
        rows = await self.pool.fetch(
            "SELECT scope_id, level, position, inputs, cache_key, summary, sentences::text FROM merge_nodes"
            " WHERE scope_id = $1 ORDER BY level, position",
            previous,
        )
        nodes = [MergeNode(r[0], r[1], r[2], r[3], r[4], r[5], _cited(r[6])) for r in rows]
        return await self.load_chunks(previous), nodes

    async def touch_task(self, task_id: str) -> None:
        """The task is making progress (a merge is running): reconcile leaves it alone."""
        await self.pool.execute("UPDATE tasks SET last_active_at = now() WHERE id = $1", task_id)

    async def task_result(self, task_id: str) -> TaskResult | None:
        return await views.task_result(self.pool, self.settings, task_id)
