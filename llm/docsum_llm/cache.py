"""The result cache: an answer to a request already answered comes from Postgres, not the provider.

Every request is also recorded in `llm_calls` (tokens, latency, whether the cache answered it), which
is what a task's usage, cost and savings are computed from.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, replace
from typing import Any, cast, get_args

import asyncpg

from docsum_shared.errors import ItemFailed, RateLimited
from docsum_shared.options import Mode
from docsum_shared.ratelimit import RateLimiter
from docsum_shared.together import Together

from .base import Span, SummarizerBackend, SummaryRequest, SummaryResult, SummarySentence, Support
from .budget import COMPLETION_RESERVE, TokenCalibration, estimate_request_tokens
from .openai.prompts import PROMPT_VERSION
from .shares import OwnerShares


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
    # Its chunk's rank in the fair order between owners (lower first): the order in which it gets one
    # of the process's call slots (slots.py). None: unranked (a merge; a chunk admitted first in, first out).
    rank: tuple[float, ...] | None = None


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


class ResultCache:
    """The result cache and the ledger in PostgreSQL. The reads and the writes of calls made at about
    the same time go as one statement each (together.py): one round trip for many chunks."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._read = Together(self._read_rows)
        # A value PostgreSQL refuses (asyncpg's DataError: a NUL, a lone surrogate, ...) is one answer's
        # fault: its round is stored again answer by answer, so that the others are not lost (and paid
        # again by their chunks' retries) with it.
        self._store = Together(self._store_rows, alone=lambda exc: isinstance(exc, asyncpg.DataError))

    async def stored(self, key: str) -> SummaryResult | None:
        """The answer stored under `key`, if any."""
        return await self._read(key)

    async def lookup(self, key: str, request: SummaryRequest, context: CallContext) -> SummaryResult | None:
        """The cache's answer to `request` (its key `key`), booked in the ledger as a cache hit; None on a miss."""
        result = await self.stored(key)
        if result is not None:
            await self.pool.execute(_RECORD, *_ledger(context, request, key, result, cached=True, latency_ms=0))
        return result

    async def store(
        self,
        context: CallContext,
        request: SummaryRequest,
        key: str,
        result: SummaryResult,
        latency_ms: int,
        shares: OwnerShares | None = None,
    ) -> None:
        """A paid answer and its ledger line, both or neither, and with `shares` its owner's charge in the
        same statement. An answer PostgreSQL refuses fails its item for good (ItemFailed): asked again, the
        model would most likely write it again, and be paid again."""
        owner = context.owner if shares is not None else None
        charge = shares.charge(owner, result.prompt_tokens, result.completion_tokens) if shares and owner else None
        try:
            await self._store(
                (*_ledger(context, request, key, result, cached=False, latency_ms=latency_ms),
                 result.text, result.truncated, sentences_json(result.sentences),
                 shares.deployment if shares else None, owner, charge)
            )  # fmt: skip
        except asyncpg.DataError as exc:
            raise ItemFailed(f"the LLM provider's answer could not be stored: {_first_line(exc)}") from exc

    async def _read_rows(self, keys: list[str]) -> list[SummaryResult | None]:
        rows = await self.pool.fetch(
            "SELECT key, result, model, prompt_tokens, completion_tokens, truncated, sentences::text"
            " FROM llm_results WHERE key = ANY($1::text[])",
            keys,
        )
        found = {row["key"]: _answer(row) for row in rows}
        return [found.get(key) for key in keys]

    async def _store_rows(self, rows: list[tuple[object, ...]]) -> list[None]:
        # Each answer once (the first of a key: the same request got the same answer), each call a line.
        await self.pool.execute(_STORE, *(list(column) for column in zip(*rows, strict=True)))
        return [None] * len(rows)


async def summarize_cached(
    cache: ResultCache,
    backend: SummarizerBackend,
    request: SummaryRequest,
    context: CallContext | None = None,
    *,
    limiter: RateLimiter | None = None,
    calibration: TokenCalibration | None = None,
    shared: bool = False,
    mode: Mode = "realtime",
    slot: AbstractAsyncContextManager[object] | None = None,
    shares: OwnerShares | None = None,
) -> tuple[SummaryResult, bool]:
    """The backend's answer to `request`, and whether it came from the cache; with `shares`, a paid
    answer charged to its owner's share.

    A call that goes to the provider first takes its slot from the cluster-wide rate limiter, and is
    sent in `mode`; its ledger line says the tier it was answered at, which is what it is priced at.
    `slot` bounds the calls in flight: held for the provider's answer only, so that the next call
    starts the moment one ends, while the answers before it are stored.
    """
    context = context or CallContext()
    key = cache_key(backend.model, request, None if shared else context.owner, backend.sampling)
    if (cached := await cache.lookup(key, request, context)) is not None:
        return cached, True
    estimate = estimate_request_tokens(request)
    reservation = None
    try:
        async with slot or contextlib.nullcontext():
            # The rate limiter's turn is taken with the slot in hand: the call leaves when its turn comes.
            reservation = await limiter.acquire(estimate + COMPLETION_RESERVE) if limiter else None
            started = time.monotonic()
            result = replace(await backend.summarize(request, mode), seconds=time.monotonic() - started)
    except RateLimited as exc:
        if limiter:
            await limiter.refused(exc.retry_after)
        raise
    # The call that waited for this slot goes out before this answer is stored: when many answers come
    # at once, the provider is kept busy first.
    await asyncio.sleep(0)
    if reservation is not None and limiter is not None:
        await limiter.settle(reservation, result.prompt_tokens + result.completion_tokens)
    if calibration is not None:
        calibration.observe(estimate, result.prompt_tokens)
    await cache.store(context, request, key, result, int(result.seconds * 1000), shares)
    return result, False


def _first_line(exc: Exception, most: int = 200) -> str:
    """What PostgreSQL (or asyncpg) said, short: its message may quote the whole value it refused."""
    said = str(exc).partition("\n")[0]
    return said if len(said) <= most else said[: most - 1] + "…"


def _answer(row: Mapping[str, Any]) -> SummaryResult:
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


# A call in the ledger; its parameters are `_ledger`'s, $1 to $12.
_LEDGER_COLUMNS = (
    "task_id, document_id, chunk_id, kind, cache_key, model, cached, prompt_tokens, completion_tokens,"
    " latency_ms, tier, requests"
)
_RECORD = f"INSERT INTO llm_calls ({_LEDGER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
# Paid answers with their ledger lines: `_ledger`'s columns, then the answer's text, whether it was cut
# and its sentences, then the owner's share charged for it (its deployment, owner and charge; NULL when
# the call is charged otherwise: a chunk's, by the admission), each an array over the calls.
_STORE = (
    "WITH w AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],"
    "   $7::bool[], $8::int[], $9::int[], $10::int[], $11::text[], $12::int[], $13::text[], $14::bool[],"
    "   $15::jsonb[], $16::text[], $17::text[], $18::float8[])"
    f"   AS w({_LEDGER_COLUMNS}, result, truncated, sentences, share_deployment, share_owner, share_charge)),"
    " stored AS (INSERT INTO llm_results (key, model, kind, result, prompt_tokens, completion_tokens, truncated,"
    "   sentences) SELECT cache_key, model, kind, result, prompt_tokens, completion_tokens, truncated, sentences"
    "   FROM w ON CONFLICT (key) DO NOTHING),"
    " charged AS (INSERT INTO owner_shares (deployment, owner, counter, lifted)"
    "   SELECT share_deployment, share_owner, sum(share_charge), 0 FROM w WHERE share_charge IS NOT NULL"
    "   GROUP BY share_deployment, share_owner"
    "   ON CONFLICT (deployment, owner) DO UPDATE SET counter = owner_shares.counter + excluded.counter,"
    "   updated_at = now())"
    f" INSERT INTO llm_calls ({_LEDGER_COLUMNS}) SELECT {_LEDGER_COLUMNS} FROM w"
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
