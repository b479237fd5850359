"""The result cache: an answer to a request already answered comes from Postgres, not the provider.

Every request is also recorded in `llm_calls` (tokens, latency, whether the cache answered it), which
is what a task's usage, cost and savings are computed from.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import cast, get_args

import asyncpg

from ..errors import RateLimited
from ..options import Mode
from ..ratelimit import RateLimiter
from .base import Span, SummarizerBackend, SummaryRequest, SummaryResult, SummarySentence, Support
from .budget import COMPLETION_RESERVE, TokenCalibration, estimate_request_tokens
from .prompts import PROMPT_VERSION


@dataclass(frozen=True)
class CallContext:
    """What a request is for, so its cost is booked to the right task, document and chunk."""

    task_id: str | None = None
    document_id: str | None = None
    chunk_id: str | None = None
    # Whose request it is: the result cache is per owner (unless shared), so that no owner learns
    # from a cache hit what another submitted.
    owner: str | None = None
    # How the task's calls are sent (its options' mode; None: the deployment's default). Not part of the
    # cache key: the same request gets the same answer at any tier.
    mode: Mode | None = None


def cache_key(
    model: str, request: SummaryRequest, scope: str | None = None, sampling: Mapping[str, object] | None = None
) -> str:
    """The result cache's key: model, prompt version, the whole request, what else the backend sends
    that changes an answer (`sampling`: only when there is any, so that keys made without stay the
    same), and its scope (the owner; None for a cache shared by every owner)."""
    extra = {"sampling": dict(sampling)} if sampling else {}
    payload = json.dumps(
        {"model": model, "prompt_version": PROMPT_VERSION, "scope": scope, **asdict(request), **extra},
        ensure_ascii=False,
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


async def summarize_cached(
    pool: asyncpg.Pool,
    backend: SummarizerBackend,
    request: SummaryRequest,
    context: CallContext | None = None,
    *,
    limiter: RateLimiter | None = None,
    calibration: TokenCalibration | None = None,
    shared: bool = False,
    mode: Mode = "realtime",
) -> tuple[SummaryResult, bool]:
    """The backend's answer to `request`, and whether it came from the cache.

    A call that goes to the provider first takes its slot from the cluster-wide rate limiter, and is
    sent in `mode`; its ledger line says the tier it was answered at, which is what it is priced at.
    """
    context = context or CallContext()
    key = cache_key(backend.model, request, None if shared else context.owner, backend.sampling)
    if (cached := await lookup(pool, key, request, context)) is not None:
        return cached, True
    estimate = estimate_request_tokens(request)
    reservation = await limiter.acquire(estimate + COMPLETION_RESERVE) if limiter else None
    started = time.monotonic()
    try:
        result = await backend.summarize(request, mode)
    except RateLimited as exc:
        if limiter:
            await limiter.refused(exc.retry_after)
        raise
    if reservation is not None and limiter is not None:
        await limiter.settle(reservation, result.prompt_tokens + result.completion_tokens)
    if calibration is not None:
        calibration.observe(estimate, result.prompt_tokens)
    latency_ms = int((time.monotonic() - started) * 1000)
    # The answer and its ledger line in one statement: both or neither.
    await pool.execute(
        "WITH stored AS (INSERT INTO llm_results (key, model, kind, result, prompt_tokens, completion_tokens,"
        "   truncated, sentences) VALUES ($5, $6, $4, $13, $8, $9, $14, $15::jsonb)"
        "   ON CONFLICT (key) DO NOTHING RETURNING 1)"
        f", recorded AS ({_RECORD} RETURNING 1) SELECT (SELECT count(*) FROM stored), (SELECT count(*) FROM recorded)",
        *_ledger(context, request, key, result, cached=False, latency_ms=latency_ms),
        result.text,
        result.truncated,
        sentences_json(result.sentences),
    )
    return result, False


async def stored_answer(pool: asyncpg.Pool, key: str) -> SummaryResult | None:
    """The answer stored under `key`, if any."""
    row = await pool.fetchrow(
        "SELECT result, model, prompt_tokens, completion_tokens, truncated, sentences::text FROM llm_results"
        " WHERE key = $1",
        key,
    )
    if row is None:
        return None
    return SummaryResult(
        row["result"],
        row["model"],
        row["prompt_tokens"],
        row["completion_tokens"],
        row["truncated"],
        sentences=sentences_from_json(row["sentences"]),
    )


def sentences_json(sentences: tuple[SummarySentence, ...]) -> str | None:
    """A result's sentences for `llm_results.sentences`, each as [text, [[source, start, end], ...],
    support]; None (SQL NULL) when the backend gave none."""
    if not sentences:
        return None
    return json.dumps(
        [[s.text, [[x.source, x.start, x.end] for x in s.spans], s.support] for s in sentences], ensure_ascii=False
    )


def sentences_from_json(data: str | None) -> tuple[SummarySentence, ...]:
    """What `sentences_json` stored; a row from before the column, or without sentences, has none. A
    row stored before sentences had several ranges, [text, source, start, end], quotes one range."""
    if data is None:
        return ()
    out: list[SummarySentence] = []
    for row in json.loads(data):
        if len(row) == 4:
            text, source, start, end = row
            out.append(SummarySentence.quoting(str(text), int(source), int(start), int(end)))
            continue
        text, spans, support = row
        if support not in get_args(Support):
            raise ValueError(f"unknown support {support!r}")
        ranges = tuple(Span(int(source), int(start), int(end)) for source, start, end in spans)
        out.append(SummarySentence(str(text), ranges, cast(Support, support)))
    return tuple(out)


async def lookup(pool: asyncpg.Pool, key: str, request: SummaryRequest, context: CallContext) -> SummaryResult | None:
    """The cache's answer to `request` (its key `key`), booked in the ledger as a cache hit; None on a miss."""
    result = await stored_answer(pool, key)
    if result is not None:
        await pool.execute(_RECORD, *_ledger(context, request, key, result, cached=True, latency_ms=0))
    return result


# A call in the ledger; its parameters are `_ledger`'s, $1 to $12.
_RECORD = (
    "INSERT INTO llm_calls (task_id, document_id, chunk_id, kind, cache_key, model, cached, prompt_tokens,"
    " completion_tokens, latency_ms, tier, requests) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
)


def _ledger(
    context: CallContext, request: SummaryRequest, key: str, result: SummaryResult, *, cached: bool, latency_ms: int
) -> tuple[object, ...]:
    return (
        context.task_id,
        context.document_id,
        context.chunk_id,
        str(request.kind),
        key,
        result.model,
        cached,
        0 if cached else result.prompt_tokens,
        0 if cached else result.completion_tokens,
        latency_ms,
        "realtime" if cached else result.tier,  # a cached answer is paid nothing, at any tier
        0 if cached else result.requests,
    )
