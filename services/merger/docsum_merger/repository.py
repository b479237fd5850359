"""The merger's SQL."""

from __future__ import annotations

import asyncpg

from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.prompts import PROMPT_VERSION

from .handler import ChunkState, DocumentState


def _document(row: asyncpg.Record) -> DocumentState:
    return DocumentState(row["id"], row["filename"], DocumentStatus(row["status"]), row["summary"], row["error"])


async def load_document(pool: asyncpg.Pool, document_id: str) -> tuple[DocumentState, TaskStatus, TaskOptions] | None:
    row = await pool.fetchrow(
        "SELECT d.id, d.filename, d.status, d.summary, d.error, t.status AS task_status, t.options"
        " FROM documents d JOIN tasks t ON t.id = d.task_id WHERE d.id = $1",
        document_id,
    )
    if row is None:
        return None
    return _document(row), TaskStatus(row["task_status"]), TaskOptions.from_stored(row["options"])


async def load_chunks(pool: asyncpg.Pool, document_id: str) -> list[ChunkState]:
    rows = await pool.fetch(
        "SELECT chunk_index, status, summary, error FROM chunks WHERE document_id = $1 ORDER BY chunk_index",
        document_id,
    )
    return [ChunkState(r["chunk_index"], ChunkStatus(r["status"]), r["summary"], r["error"]) for r in rows]


async def complete_document(
    pool: asyncpg.Pool, document_id: str, summary: str, model: str, coverage: float, failed_chunks: list[int]
) -> None:
    await pool.execute(
        "UPDATE documents SET status = 'COMPLETED', summary = $2, summary_model = $3, summary_prompt_version = $4,"
        " coverage = $5, failed_chunks = $6, updated_at = now() WHERE id = $1 AND status IN ('SUMMARIZING', 'MERGING')",
        document_id, summary, model, PROMPT_VERSION, coverage, failed_chunks,
    )  # fmt: skip


async def fail_document(pool: asyncpg.Pool, document_id: str, error: str) -> None:
    await pool.execute(
        "UPDATE documents SET status = $2, error = $3, updated_at = now()"
        " WHERE id = $1 AND status IN ('SUMMARIZING', 'MERGING')",
        document_id,
        DocumentStatus.FAILED,
        error,
    )


async def load_task(
    pool: asyncpg.Pool, task_id: str
) -> tuple[TaskStatus, str | None, list[DocumentState], TaskOptions] | None:
    task = await pool.fetchrow("SELECT status, title, options FROM tasks WHERE id = $1", task_id)
    if task is None:
        return None
    rows = await pool.fetch(
        "SELECT id, filename, status, summary, error FROM documents WHERE task_id = $1 ORDER BY position",
        task_id,
    )
    options = TaskOptions.from_stored(task["options"])
    return TaskStatus(task["status"]), task["title"], [_document(r) for r in rows], options


async def finish_task(
    pool: asyncpg.Pool, task_id: str, status: TaskStatus, summary: str | None, model: str | None, error: str | None
) -> None:
    await pool.execute(
        "UPDATE tasks SET status = $2, summary = $3, summary_model = $4, error = $5, summary_prompt_version = $6,"
        " updated_at = now(), last_active_at = now() WHERE id = $1 AND status IN ('PENDING', 'PROCESSING')",
        task_id, status, summary, model, error, PROMPT_VERSION,
    )  # fmt: skip
