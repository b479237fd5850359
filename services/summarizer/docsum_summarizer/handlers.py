"""The summarizer's handlers: chunk-created (and its delayed retries) → a stored summary → chunk-summarized.

A chunk is summarized under a lease in Postgres, renewed while the call runs: a second consumer that
gets the same chunk (a rebalance, a redelivery) waits for the first instead of paying again, and the
chunk of a process that died is taken over once its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from docsum_llm.base import SummaryRequest, SummaryResult
from docsum_llm.cache import CallContext
from docsum_llm.shares import served_tokens
from docsum_shared import metrics
from docsum_shared.errors import ContextLimitExceeded, ItemFailed, Kind
from docsum_shared.events import ChunkCreated, ChunkSummarized, Event
from docsum_shared.handlers import Handlers, required
from docsum_shared.retry import (
    PROVIDER,
    Backoff,
    NextRound,
    Tally,
    Wait,
    after_failure,
    for_chunks,
    for_claims,
    llm_retry,
    obey,
    retry_until,
)
from docsum_shared.retry import Step as RetryStep

from .admission import Wake
from .batches.policy import Route, batch_endpoint, call_mode, request_json, route
from .policy import Answer, Step, StoredChunk, answer_of, cannot_fit, next_step, offsets_of, request_for
from .repository import Claim, Claimed
from .schedule import Priority
from .settings import SummarizerSettings

log = logging.getLogger("docsum_summarizer")

# A chunk's request is planned again after each refusal as too long; each lowers the budget, so
# this only bounds a provider that keeps refusing whatever it is sent.
MAX_REPLANS = 8


class Repository(Protocol):
    async def load(self, chunk_id: str) -> StoredChunk | None: ...
    async def claim(self, chunk_id: str, holder: str, ttl_s: float) -> Claimed: ...
    async def renew(self, chunk_id: str, holder: str, ttl_s: float) -> None: ...
    async def release(self, chunk_id: str, holder: str, *, retry_in_s: float | None = None) -> None: ...
    async def complete(self, chunk_id: str, task_id: str, answer: Answer, *, weight: float = 1.0) -> bool: ...
    async def fail(self, chunk_id: str, error: str) -> bool: ...
    async def record_failure(self, chunk_id: str, error: str, *, retry_now: bool) -> None: ...
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
    ) -> bool: ...


class LLM(Protocol):
    """The LLM port (docsum_llm.Summarizing)."""

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]: ...
    async def bounded(self, request: SummaryRequest) -> SummaryRequest: ...
    async def plan_chunk(self, request: SummaryRequest) -> list[SummaryRequest] | None: ...
    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool: ...
    def describe_budget(self) -> str: ...
    async def cached(self, request: SummaryRequest, context: CallContext) -> SummaryResult | None: ...
    async def stored(self, key: str) -> SummaryResult | None: ...
    def cache_key(self, request: SummaryRequest, context: CallContext) -> str: ...
    @property
    def batching(self) -> object | None: ...


@dataclass
class Deps:
    repo: Repository
    llm: LLM
    settings: SummarizerSettings
    holder: str  # this process, as lease holder
    backoff: Backoff = PROVIDER
    # This process's admission, told when a handling here is done with a leased chunk (final, handed
    # back, or waiting for its next round or its batch): its slot is free, and it is filled at once.
    admission: Wake = field(default_factory=Wake)


handlers = Handlers[Deps]("summarizer")
handle = handlers.handle


@handlers.on(ChunkCreated, emits=(ChunkSummarized,))
async def summarize_chunk(event: ChunkCreated, deps: Deps) -> list[Event]:
    # Each handling claims under its own name: two deliveries of one chunk in this process (a
    # re-drive beside a redelivery) exclude each other as two processes would.
    holder = f"{deps.holder}:{uuid.uuid4().hex[:12]}"
    ttl = deps.settings.lease_ttl_s
    claims = for_claims(min(2.0, ttl / 4))
    held = 0  # times another handling held it
    while True:
        # The claim comes first: it takes the chunk only if it is unfinished and its task and document
        # still want it (next_step's SUMMARIZE), and gives it as stored; anything else reads it.
        claimed = await deps.repo.claim(event.chunk_id, holder, ttl)
        if claimed.outcome is Claim.TAKEN and claimed.chunk is not None:
            if await _under_lease(event, claimed.chunk, holder, deps):
                return [_reported(event)]  # made final by this very handling: no need to read it again
            continue  # deferred, or no longer wanted: read again
        if claimed.outcome in (Claim.DEFERRED, Claim.BATCHED):
            return []  # waiting for its next round (rounds.py) or its batch (batches/): announced again then
        chunk = required(await deps.repo.load(event.chunk_id), f"chunk {event.chunk_id} of {event.document_id}")
        step = next_step(chunk)
        if step is Step.NOTHING:
            return []
        if step is Step.REPORT:
            return [_reported(event)]
        # Another process is on it (or it changed between the two reads): claim again in a moment,
        # its holder may be gone by then.
        held += 1
        await asyncio.sleep(obey(after_failure(Kind.RETRIABLE, 0, held, claims)))  # waits: no end


def _reported(event: ChunkCreated) -> ChunkSummarized:
    return event.next(ChunkSummarized, **event.model_dump(include={"document_id", "chunk_id", "chunk_index"}))


async def _under_lease(event: ChunkCreated, chunk: StoredChunk, holder: str, deps: Deps) -> bool:
    """Whether this handling made the chunk final (its summary or its failure stored)."""
    renewer = asyncio.create_task(_keep_lease(event.chunk_id, holder, deps))
    try:
        return await _summarize(event, chunk, holder, deps)
    except asyncio.CancelledError:
        # Shutting down mid-call: hand the chunk back so its next owner starts at once.
        await asyncio.shield(deps.repo.release(event.chunk_id, holder))
        raise
    finally:
        renewer.cancel()
        deps.admission.finished()


async def _keep_lease(chunk_id: str, holder: str, deps: Deps) -> None:
    while True:
        await asyncio.sleep(deps.settings.lease_ttl_s / 3)
        with contextlib.suppress(Exception):  # a missed renewal is retried; expiry is the backstop
            await deps.repo.renew(chunk_id, holder, deps.settings.lease_ttl_s)


async def _summarize(event: ChunkCreated, chunk: StoredChunk, holder: str, deps: Deps) -> bool:
    """Summarize the leased chunk and store the outcome: its summary, its failure, or its next round;
    whether it made the chunk final."""
    request = await deps.llm.bounded(request_for(chunk))
    settings = deps.settings
    # The task's mode (None: the deployment's default, applied by the LLM port).
    mode = chunk.options.mode
    context = CallContext(
        event.task_id, event.document_id, event.chunk_id, owner=chunk.owner, mode=mode, rank=chunk.rank
    )
    match route(settings.mode(chunk.options), chunk.line, deps.llm.batching is not None):
        case Route.TAKE_ANSWER if chunk.line is not None:
            if (answer := await deps.llm.stored(chunk.line.custom_id)) is not None:
                paid = served_tokens(answer.prompt_tokens, answer.completion_tokens)  # a batch line, paid
                stored = answer_of([(answer, 0)], event.document_id, chunk, served=paid)
                return await _completed(event, stored, chunk, deps)
            # its stored answer is gone: call
        case Route.QUEUE:
            if (queued := await _queue_line(event, chunk, request, context, holder, deps)) is not None:
                return queued
    context = replace(context, mode=call_mode(mode, chunk.line))
    limits = for_chunks(
        settings.llm_max_attempts, settings.llm_inplace_attempts, settings.llm_retry_delay_s, deps.backoff
    )

    async def stored_attempts(tally: Tally) -> int:
        return chunk.failures + tally[Kind.RETRIABLE]  # rate limits never count as attempts

    async def then(exc: Exception, kind: Kind, step: RetryStep, failures: int) -> None:
        if kind is Kind.RETRIABLE:
            await deps.repo.record_failure(event.chunk_id, str(exc), retry_now=isinstance(step, Wait))
        if isinstance(step, Wait):
            log.info("chunk %s: %s; retrying in %.1fs", event.chunk_id, exc, step.seconds)

    try:
        parts, paid = await retry_until(
            lambda: _summarize_within_budget(request, context, deps), llm_retry(limits, stored_attempts, then)
        )
    except NextRound as later:
        log.info("chunk %s: next round in %.0fs", event.chunk_id, later.seconds)
        await deps.repo.release(event.chunk_id, holder, retry_in_s=later.seconds)
        return False
    except ItemFailed as exc:
        failed = await deps.repo.fail(event.chunk_id, str(exc))
        log.warning("chunk %s failed: %s", event.chunk_id, exc)
        return failed
    return await _completed(event, answer_of(parts, event.document_id, chunk, served=paid), chunk, deps)


async def _completed(event: ChunkCreated, answer: Answer, chunk: StoredChunk, deps: Deps) -> bool:
    weight = deps.settings.owner_weights.get(chunk.owner, 1.0)  # its share's counter is in tokens / weight
    completed = await deps.repo.complete(event.chunk_id, event.task_id, answer, weight=weight)
    if completed and answer.served:
        metrics.TOKENS_SERVED.labels(chunk.options.priority or Priority.NORMAL).inc(answer.served)
    log.info("chunk %s summarized", event.chunk_id)
    return completed


async def _queue_line(
    event: ChunkCreated, chunk: StoredChunk, request: SummaryRequest, context: CallContext, holder: str, deps: Deps
) -> bool | None:
    """Batch mode: the chunk's answer from the result cache (a cached answer never enters a batch), else
    its request queued as a batch line, the chunk waiting for it (False: not final); None when the chunk
    must be called instead (it needs more than one request to fit the model's window)."""
    parts = await deps.llm.plan_chunk(request)
    if parts is None or len(parts) != 1:
        return None
    if (cached := await deps.llm.cached(parts[0], context)) is not None:
        return await _completed(event, answer_of([(cached, 0)], event.document_id, chunk, served=0), chunk, deps)
    key = deps.llm.cache_key(parts[0], context)
    await deps.repo.queue_line(
        event.chunk_id, holder, event.task_id, chunk.owner, key, request_json(parts[0]),
        endpoint=batch_endpoint(deps.settings),
    )  # fmt: skip
    log.info("chunk %s queued for the provider's batch", event.chunk_id)
    return False


async def _summarize_within_budget(
    request: SummaryRequest, context: CallContext, deps: Deps
) -> tuple[list[tuple[SummaryResult, int]], int]:
    """The answers to the chunk's parts, each with where its text starts in the chunk's, planned under
    the endpoint's input budget (in parts when it must be), and what the answers not from the result
    cache cost (docsum_llm.shares.served_tokens); a refusal as too long lowers the budget and plans again.
    ItemFailed when it cannot shrink further."""
    for _ in range(MAX_REPLANS):
        parts = await deps.llm.plan_chunk(request)
        if parts is None:
            raise ItemFailed(cannot_fit(deps.llm.describe_budget()))
        results: list[SummaryResult] = []
        paid = 0
        try:
            for part in parts:
                result, cached = await deps.llm.summarize(part, context)
                results.append(result)
                paid += 0 if cached else served_tokens(result.prompt_tokens, result.completion_tokens)
        except ContextLimitExceeded as refusal:
            if not await deps.llm.learn(refusal, part):
                raise ItemFailed(cannot_fit(deps.llm.describe_budget(), str(refusal))) from refusal
            continue
        return list(zip(results, offsets_of(parts, request.texts[0]), strict=True)), paid
    raise ItemFailed(cannot_fit(deps.llm.describe_budget(), "it kept refusing every smaller request"))
