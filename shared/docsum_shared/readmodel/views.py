"""The read model: what a task, a task list and a task's failures look like to their owner, and what a
finished task's result is.

Each function takes the pool (and the settings where prices matter), reads through `queries` (which
holds all the SQL) and shapes the rows into the models of `schemas`. The gateway's routes and progress
WebSocket answer with these (a task of another owner reads as None, like a missing one); the merger
publishes `task_result` on task-finished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg

from ..options import TaskOptions
from ..settings import LLMSettings
from ..summarizers import endpoint_key
from . import queries
from .schemas import (
    ChunkProgress,
    DocumentView,
    EndpointView,
    Estimate,
    FailureView,
    Recovery,
    TaskListItem,
    TaskResult,
    TaskView,
    Usage,
)

# What one chunk summary is expected to cost in completion tokens, for estimates before the calls.
EXPECTED_COMPLETION_TOKENS = 150

Row = Mapping[str, Any]  # an asyncpg.Record, or anything that reads like one


async def task_view(pool: asyncpg.Pool, settings: LLMSettings, owner: str, task_id: str) -> TaskView | None:
    """The task with its documents, usage, estimate and recovery; None if `owner` has no such task."""
    found = await queries.get_task(pool, owner, task_id)
    return None if found is None else await _view(pool, settings, *found)


async def task_result(pool: asyncpg.Pool, settings: LLMSettings, task_id: str) -> TaskResult | None:
    """The task's result as published on task-finished (the pipeline's own read: no owner check)."""
    found = await queries.load_task(pool, task_id)
    return None if found is None else TaskResult.of(await _view(pool, settings, *found))


async def pipeline_view(pool: asyncpg.Pool, settings: LLMSettings, task_id: str) -> TaskView | None:
    """The task's full view, whoever owns it: for the pipeline's own use (the gateway's progress log)."""
    found = await queries.load_task(pool, task_id)
    return None if found is None else await _view(pool, settings, *found)


async def _view(pool: asyncpg.Pool, settings: LLMSettings, task: Row, documents: list[Row]) -> TaskView:
    task_id = task["id"]
    total, per_document = usage_by_document(settings, await queries.usage_rows(pool, task_id))
    options = resolved(settings, TaskOptions.from_stored(task["options"]))
    return TaskView(
        task_id=task["id"],
        title=task["title"],
        status=task["status"],
        created_at=task["created_at"],
        updated_at=task["updated_at"],
        summary=task["summary"],
        summary_model=task["summary_model"],
        error=task["error"],
        options=options,
        hold_reason=task.get("hold_reason"),
        truncated=bool(task.get("summary_truncated")) or any(d.get("truncated_parts") for d in documents),
        llm=await endpoint_view(pool, settings),
        usage=total,
        estimate=estimate_from(settings, await queries.remaining_work(pool, task_id), options.mode or "realtime"),
        recovery=recovery_from(task, await queries.recovery(pool, task_id), total),
        documents=[document_view(d, per_document.get(d["id"], Usage())) for d in documents],
    )


async def endpoint_view(pool: asyncpg.Pool, settings: LLMSettings) -> EndpointView | None:
    """The input budget requests are planned under: configured, stated by the endpoint, or learned."""
    if settings.llm_backend != "openai":
        return None
    learned = await queries.learned_budget(pool, endpoint_key(settings))
    configured = settings.llm_context_tokens
    if learned is not None and (configured is None or learned["context_tokens"] < configured):
        return EndpointView(
            model=settings.llm_model, input_budget=learned["context_tokens"], learned_from=learned["learned_from"]
        )
    return EndpointView(
        model=settings.llm_model,
        input_budget=configured,
        learned_from="DOCSUM_LLM_CONTEXT_TOKENS" if configured is not None else None,
    )


async def list_tasks(pool: asyncpg.Pool, owner: str, limit: int) -> list[TaskListItem]:
    """The owner's latest tasks, newest first."""
    return [
        TaskListItem(task_id=r["id"], title=r["title"], status=r["status"], created_at=r["created_at"])
        for r in await queries.list_tasks(pool, owner, limit)
    ]


async def failures(pool: asyncpg.Pool, owner: str, task_id: str) -> list[FailureView] | None:
    """The failed chunks and documents of the task; None if `owner` has no such task."""
    if not await queries.owns(pool, owner, task_id):
        return None
    return [
        FailureView(
            document_id=r["document_id"],
            filename=r["filename"],
            chunk_index=r["chunk_index"],
            error=r["error"],
            attempts=r["attempts"],
        )
        for r in await queries.failures(pool, task_id)
    ]


# --------------------------------------------------------------------------------------------------
# Shaping (pure: rows in, models out)


def usage_by_document(settings: LLMSettings, rows: Iterable[Row]) -> tuple[Usage, dict[str | None, Usage]]:
    """The task's total usage and its usage per document (key None: the task-level merge)."""
    per_document: dict[str | None, Usage] = {}
    total = Usage()
    for row in rows:
        tier = row.get("tier") or "realtime"
        cost = settings.cost_usd(row["model"], row["prompt_tokens"], row["completion_tokens"], tier)
        for u in (per_document.setdefault(row["document_id"], Usage()), total):
            u.prompt_tokens += row["prompt_tokens"]
            u.completion_tokens += row["completion_tokens"]
            u.llm_calls += row["llm_calls"]
            u.cached_calls += row["cached_calls"]
            u.cost_usd += cost
    return total, per_document


def resolved(settings: LLMSettings, options: TaskOptions) -> TaskOptions:
    """The options as the task runs them: a mode it did not ask for is the deployment's default."""
    return options.model_copy(update={"mode": settings.mode(options)})


def estimate_from(settings: LLMSettings, remaining: Row, tier: str = "realtime") -> Estimate:
    """Cost and time of the chunks still to summarize (at the task's tier), at the task's call rate of the
    last minute."""
    chunks = remaining["chunks"]
    prompt_tokens = remaining["prompt_tokens"]
    rate_per_s = remaining["calls_last_minute"] / 60.0
    return Estimate(
        remaining_chunks=chunks,
        prompt_tokens=prompt_tokens,
        cost_usd=settings.cost_usd(settings.llm_model, prompt_tokens, chunks * EXPECTED_COMPLETION_TOKENS, tier),
        eta_s=round(chunks / rate_per_s, 1) if rate_per_s > 0 else (0.0 if not chunks else None),
    )


def recovery_from(task: Row, recovered: Row, total: Usage) -> Recovery:
    return Recovery(
        attempts=recovered["attempts"],
        interruptions=recovered["interruptions"],
        redrives=task["redrives"],
        calls_saved=total.cached_calls,
    )


def document_view(d: Row, usage: Usage) -> DocumentView:
    return DocumentView(
        document_id=d["id"],
        filename=d["filename"],
        status=d["status"],
        size_level=d["size_level"],
        text_chars=d["text_chars"],
        chunks=ChunkProgress(done=d["chunks_done"], failed=d["chunks_failed"], total=d["chunk_total"]),
        summary=d["summary"],
        summary_model=d["summary_model"],
        error=d["error"],
        coverage=d["coverage"],
        failed_chunks=d["failed_chunks"] or [],
        truncated=bool(d.get("truncated_parts")),
        usage=usage,
    )
