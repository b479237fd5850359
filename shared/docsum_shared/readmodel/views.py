"""The read model: what a task, a task list and a task's failures look like to their owner, and what a
finished task's result is.

Each function takes the pool (and the settings where prices matter), reads through `queries` (which
holds all the SQL) and shapes the rows into the models of `schemas`. The gateway's routes and progress
WebSocket answer with these (a task of another owner, or of another deployment, reads as None, like a
missing one); the merger
publishes `task_result` on task-finished.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg

from ..cited import CitedSentence, Source, at_most, from_json, without_unsupported
from ..options import TaskOptions
from ..scope import Scope
from ..settings import LLMSettings, endpoint_key
from ..states import BatchState, LineStatus
from . import queries
from .changes import changes
from .schemas import (
    BatchProgress,
    ChunkProgress,
    DocumentView,
    EndpointView,
    Estimate,
    FailureView,
    Place,
    Recovery,
    Reuse,
    SentenceView,
    SourceView,
    TaskListItem,
    TaskResult,
    TaskView,
    Usage,
)

# What one chunk summary is expected to cost in completion tokens, for estimates before the calls.
EXPECTED_COMPLETION_TOKENS = 150

Row = Mapping[str, Any]  # an asyncpg.Record, or anything that reads like one


async def task_view(pool: asyncpg.Pool, settings: LLMSettings, scope: Scope, task_id: str) -> TaskView | None:
    """The task with its documents, usage, estimate, recovery and its summaries' sentences; None if
    `scope` has no such task."""
    found = await queries.get_task(pool, scope, task_id)
    if found is None:
        return None
    view = await _view(pool, settings, *found)
    # The sentences, what was reused and what each document is a new version of show here only: the
    # pipeline's views (the progress log, the published result) show none of them, and make no query for them.
    view = with_sentences(view, await queries.sentences(pool, task_id))
    if view.estimate.remaining_chunks:  # only a task with chunks to summarize may have some waiting
        view = view.model_copy(update={"place": place_from(await queries.place(pool, task_id))})
    previous_task = found[0].get("previous_task")
    pairs = await queries.previous_documents(pool, task_id) if previous_task else []  # no query: not a new version
    return with_versions(view, previous_task, await queries.reuse_rows(pool, task_id), pairs)


async def task_result(pool: asyncpg.Pool, settings: LLMSettings, task_id: str) -> TaskResult | None:
    """The task's result as published on task-finished (the pipeline's own read: no owner check)."""
    found = await queries.load_task(pool, task_id)
    if found is None:
        return None
    view = await _view(pool, settings, *found)
    if view.options.support == "strict":  # its summaries shown without their unsupported sentences
        view = with_sentences(view, await queries.sentences(pool, task_id))
    return TaskResult.of(view)


async def pipeline_view(pool: asyncpg.Pool, settings: LLMSettings, task_id: str) -> TaskView | None:
    """The task's view, whoever owns it, as the gateway's progress log tells it (read at each append):
    everything its entries show, without what none of them does, which takes a read of every chunk of
    the task or of the endpoint (`recovery`'s attempts and interruptions are 0, `llm` is None)."""
    found = await queries.load_task(pool, task_id)
    return None if found is None else await _view(pool, settings, *found, progress=True)


async def _view(
    pool: asyncpg.Pool, settings: LLMSettings, task: Row, documents: list[Row], *, progress: bool = False
) -> TaskView:
    task_id = task["id"]
    total, per_document = usage_by_document(settings, await queries.usage_rows(pool, task_id))
    options = resolved(settings, TaskOptions.from_stored(task["options"]))
    # Only a batch task has batch lines: every other view (the progress recorder reads one per append)
    # makes no query for them.
    lines = await queries.batch_lines(pool, task_id) if options.mode == "batch" else []
    batch = batch_progress(lines, options.deadline)
    estimate = estimate_from(settings, await queries.remaining_work(pool, task_id), options.mode or "realtime")
    if batch is not None and batch.state != "done":
        estimate = estimate.model_copy(update={"eta_s": batch_eta_s(lines, datetime.now(UTC))})
    return TaskView(
        task_id=task["id"],
        title=task["title"],
        name=task_name(task["title"], [d["filename"] for d in documents[:2]], len(documents)),
        status=task["status"],
        created_at=task["created_at"],
        updated_at=task["updated_at"],
        summary=task["summary"],
        summary_model=task["summary_model"],
        error=task["error"],
        options=options,
        hold_reason=task.get("hold_reason"),
        truncated=bool(task.get("summary_truncated")) or any(d.get("truncated_parts") for d in documents),
        llm=None if progress else await endpoint_view(pool, settings),
        usage=total,
        estimate=estimate,
        recovery=recovery_from(task, NOTHING_RECOVERED if progress else await queries.recovery(pool, task_id), total),
        documents=[document_view(d, per_document.get(d["id"], Usage())) for d in documents],
        batch=batch,
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


async def list_tasks(pool: asyncpg.Pool, scope: Scope, limit: int) -> list[TaskListItem]:
    """The owner's latest tasks in the deployment, newest first."""
    return [
        TaskListItem(
            task_id=r["id"],
            title=r["title"],
            name=task_name(r["title"], r["first_files"], r["files"]),
            status=r["status"],
            created_at=r["created_at"],
        )
        for r in await queries.list_tasks(pool, scope, limit)
    ]


def task_name(title: str | None, first_files: Sequence[str], files: int) -> str:
    """What to call a task: its title, else its files (the first, and how many more), else "Untitled task"."""
    if title and title.strip():
        return title
    if not first_files:
        return "Untitled task"
    if files == 1:
        return first_files[0]
    if files == 2 and len(first_files) == 2:
        return f"{first_files[0]} and {first_files[1]}"
    return f"{first_files[0]} and {files - 1} more"


async def failures(pool: asyncpg.Pool, scope: Scope, task_id: str) -> list[FailureView] | None:
    """The failed chunks and documents of the task; None if `scope` has no such task."""
    if not await queries.owns(pool, scope, task_id):
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


def place_from(row: Row | None) -> Place | None:
    """Where the task's waiting chunks stand (queries.place); None when none waits."""
    if row is None or not row["waiting"]:
        return None
    per_minute = row["calls_last_minute"]
    work = row["ahead"] + row["waiting"]
    return Place(
        waiting_chunks=row["waiting"],
        ahead_chunks=row["ahead"],
        calls_per_minute=per_minute,
        eta_s=round(work * 60.0 / per_minute, 1) if per_minute else None,
    )


def batch_progress(rows: Iterable[Row], deadline: datetime | None) -> BatchProgress | None:
    """The task's batch lines as one figure (rows: queries.batch_lines); None when it has none."""
    rows = list(rows)
    if not rows:
        return None
    count: dict[str, int] = {}
    done_at_provider = 0
    gathering = at_provider = False
    open_batches: set[str] = set()
    submitted: list[datetime] = []
    for r in rows:
        count[r["status"]] = count.get(r["status"], 0) + r["lines"]
        if r["status"] == LineStatus.QUEUED:
            gathering = True
        if r["status"] != LineStatus.SUBMITTED:
            continue
        if r["batch_state"] is None:
            at_provider = True  # its batch ended: its answers are being taken in
        elif r["batch_state"] != BatchState.SUBMITTED:
            gathering = True  # chosen for a batch, not yet at the provider
        else:
            at_provider = True
            done_at_provider += _done_share(r)
        if r["batch_id"] is not None:
            open_batches.add(r["batch_id"])
            if r["submitted_at"] is not None:
                submitted.append(r["submitted_at"])
    lines = sum(count.values())
    done = count.get(LineStatus.ANSWERED, 0) + done_at_provider
    sent_back = count.get(LineStatus.REALTIME, 0)
    waiting = count.get(LineStatus.QUEUED, 0) + count.get(LineStatus.SUBMITTED, 0) - done_at_provider
    return BatchProgress(
        lines=lines,
        done=done,
        waiting=waiting,
        sent_back=sent_back,
        dropped=lines - done - waiting - sent_back,
        batches=len(open_batches),
        submitted_at=min(submitted, default=None),
        deadline=deadline,
        state="waiting" if at_provider else "gathering" if gathering else "done",
    )


def _done_share(r: Row) -> int:
    """The task's lines in a submitted batch that the provider reports done: the batch counts requests
    (lines of other tasks asking the same may be in it too), so its lines take its done share."""
    if not r["batch_lines"]:
        return 0
    return min(r["lines"], r["lines"] * r["batch_done"] // r["batch_lines"])


def batch_eta_s(rows: Iterable[Row], now: datetime) -> float | None:
    """Seconds until the task's open batches end, at the pace each has gone so far: its elapsed time since
    it was submitted, scaled by the requests left over those processed (done or failed). None while a line
    waits to be sent, or a batch has processed nothing yet: the provider's window (24 hours after
    submitted_at) bounds it, but a bound is no estimate, and realtime call rates say nothing of a batch."""
    left = 0.0
    for r in rows:
        if r["status"] == LineStatus.QUEUED:
            return None
        if r["status"] != LineStatus.SUBMITTED or r["batch_state"] is None:
            continue  # answered, sent back, dropped, or in a batch that ended: nothing left to wait for there
        processed = (r["batch_done"] or 0) + (r["batch_failed"] or 0)
        if r["batch_state"] != BatchState.SUBMITTED or r["submitted_at"] is None or processed <= 0:
            return None
        elapsed = max(0.0, (now - r["submitted_at"]).total_seconds())
        left = max(left, elapsed * max(0, r["batch_lines"] - processed) / processed)
    return round(left, 1)


NOTHING_RECOVERED: Row = {"attempts": 0, "interruptions": 0}


def recovery_from(task: Row, recovered: Row, total: Usage) -> Recovery:
    return Recovery(
        attempts=recovered["attempts"],
        interruptions=recovered["interruptions"],
        redrives=task["redrives"],
        calls_saved=total.cached_calls,
    )


def with_sentences(view: TaskView, rows: Iterable[Row]) -> TaskView:
    """The view with the sentences of its summaries (rows: queries.sentences); a summary without a row
    keeps null. A task asking for `support` "strict" shows each summary without its unsupported
    sentences (`shown`)."""
    by_holder = {r["holder"]: sentence_views(r["sentences"], r["places"]) for r in rows}
    strict = view.options.support == "strict"

    def update(summary: str | None, sentences: list[SentenceView] | None) -> dict[str, Any]:
        if strict and summary is not None and sentences is not None:
            summary, sentences = shown(summary, sentences)
        return {"summary": summary, "sentences": sentences}

    documents = [
        d.model_copy(update=update(d.summary, by_holder[d.document_id])) if d.document_id in by_holder else d
        for d in view.documents
    ]
    return view.model_copy(update={"documents": documents, **update(view.summary, by_holder.get(None))})


def with_versions(view: TaskView, previous_task: str | None, reuse: Iterable[Row], pairs: Iterable[Row]) -> TaskView:
    """The view with what was reused (rows: queries.reuse_rows) and, for a new version, its previous task and
    each document's previous version (rows: queries.previous_documents)."""
    total, per_document = reuse_by_document(reuse)
    previous = {r["id"]: r for r in pairs}
    documents = []
    for d in view.documents:
        pair = previous.get(d.document_id)
        update: dict[str, Any] = {"reuse": per_document.get(d.document_id)}
        if pair is not None:
            update["previous_document_id"] = pair["previous"]
            if d.sentences is not None and pair["previous_sentences"] is not None:
                before = [s.text for s in from_json(pair["previous_sentences"])]
                update.update(marked(d.sentences, before))
        documents.append(d.model_copy(update=update))
    return view.model_copy(update={"documents": documents, "reuse": total, "previous_task": previous_task})


def marked(sentences: list[SentenceView], previous: list[str]) -> dict[str, Any]:
    """A new version's summary sentences marked against the previous version's (changes.changes), and the
    previous sentences that are gone: the DocumentView fields they update."""
    found = changes([s.text for s in sentences], previous)
    return {
        "sentences": [
            s.model_copy(update={"change": mark, "was": was})
            for s, mark, was in zip(sentences, found.marks, found.was, strict=True)
        ],
        "removed_sentences": list(found.removed),
    }


def reuse_by_document(rows: Iterable[Row]) -> tuple[Reuse | None, dict[str | None, Reuse]]:
    """The task's reuse and each document's (key None: the task's own merge), from queries.reuse_rows; the
    task's is None when nothing was made yet."""
    counts: dict[str | None, list[int]] = {}
    for r in rows:
        made = counts.setdefault(r["document_id"], [0, 0, 0, 0])
        at = 0 if r["kind"] == "chunk" else 2
        made[at] += r["made"]
        made[at + 1] += r["reused"]
    per_document = {document: reuse(*made) for document, made in counts.items()}
    if not counts:
        return None, per_document
    total = reuse(*(sum(column) for column in zip(*counts.values(), strict=True)))
    return total, per_document


def reuse(chunk_summaries: int, chunk_summaries_reused: int, merges: int, merges_reused: int) -> Reuse:
    """The counts, and what they say: "98 of 100 chunk summaries reused, 3 merges redone"."""
    parts = []
    if chunk_summaries:
        noun = "summary" if chunk_summaries == 1 else "summaries"
        parts.append(f"{chunk_summaries_reused} of {chunk_summaries} chunk {noun} reused")
    if merges:
        redone = merges - merges_reused
        parts.append(
            f"{redone} merge{'' if redone == 1 else 's'} redone"
            + (f", {merges_reused} reused" if merges_reused else "")
        )
    return Reuse(
        chunk_summaries=chunk_summaries,
        chunk_summaries_reused=chunk_summaries_reused,
        merges=merges,
        merges_reused=merges_reused,
        said=", ".join(parts),
    )


def shown(summary: str, sentences: list[SentenceView]) -> tuple[str, list[SentenceView]]:
    """A summary without its unsupported sentences (citations.without_unsupported), and all of its
    sentences placed in what is left."""
    text, placed = without_unsupported(summary, [CitedSentence(s.text, (), s.support, s.at) for s in sentences])
    return text, [s.model_copy(update={"at": p.at}) for s, p in zip(sentences, placed, strict=True)]


def sentence_views(stored: str, places: str) -> list[SentenceView]:
    """Stored sentences (citations.to_json) as a reader sees them; `places` holds, for each source in
    order, its document's filename, unit and the unit its range ends in. A source whose document is not
    the task's is left out: nobody could open it. A sentence stored with more than MAX_SOURCES sources
    (before they were bounded) shows the bounded few (citations.at_most)."""
    where = iter(json.loads(places))
    out: list[SentenceView] = []
    for sentence in from_json(stored):
        documents: dict[str, tuple[str, Any]] = {}
        located: list[Source] = []
        for source in sentence.sources:
            filename, unit, last = next(where)
            if filename is None:
                continue
            documents[source.document_id] = (filename, unit)
            last_page = (last or None) if source.page is not None else None
            located.append(replace(source, last_page=last_page))
        sources = [
            SourceView(
                document_id=s.document_id,
                filename=documents[s.document_id][0],
                unit=cast(Any, documents[s.document_id][1]),
                page=s.page,
                last_page=s.last_page,
                start=s.start,
                end=s.end,
            )
            for s in at_most(located)
        ]
        out.append(SentenceView(text=sentence.text, support=sentence.support, at=sentence.at, sources=sources))
    return out


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
        reading=d.get("reading"),
    )
