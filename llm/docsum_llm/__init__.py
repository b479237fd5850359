"""Summarizer backends behind one interface, and the result cache every call goes through."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import asyncpg

from docsum_shared import metrics
from docsum_shared.errors import ContextLimitExceeded, RateLimited
from docsum_shared.ratelimit import RateLimiter
from docsum_shared.settings import LLMSettings, endpoint_key

from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .budget import TokenCalibration, completion_reserve, estimate_request_tokens, fits, plan_chunk
from .cache import CallContext, ResultCache, cache_key, summarize_cached
from .openai.endpoint import EndpointLimits
from .shares import OwnerShares
from .slots import RankedSlots

if TYPE_CHECKING:
    from .openai.client import OpenAIBackend

log = logging.getLogger(__name__)

PROBE_AGAIN_S = 60.0  # an endpoint that did not answer the probe is asked again after this long


class StalePlan(ContextLimitExceeded):
    """A request planned under a budget lowered since: planned again, never sent."""


@dataclass
class Summarizing:
    """The LLM port every service summarizes through: the backend, the result cache, the cluster-wide
    rate limit, the endpoint's input budget (configured, stated by the endpoint, or learned from its
    refusals), the answers' bounds and the token calibration learnt from the provider's usage reports."""

    pool: asyncpg.Pool
    backend: SummarizerBackend
    limits: EndpointLimits | None
    limiter: RateLimiter | None
    calibration: TokenCalibration
    settings: LLMSettings
    # Whose shares the paid calls are charged to (the merger's: its calls take no admission's slot); None
    # for the summarizer's chunks, charged by the admission.
    shares: OwnerShares | None = None
    _probed_at: float | None = field(default=None, init=False)
    _probing: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    # Calls in flight in this process, whoever makes them: a free one to the waiting call of lowest rank.
    _calls: RankedSlots = field(init=False)
    cache: ResultCache = field(init=False)

    def __post_init__(self) -> None:
        self._calls = RankedSlots(self.settings.llm_max_inflight)
        self.cache = ResultCache(self.pool)

    @classmethod
    def from_settings(cls, settings: LLMSettings, pool: asyncpg.Pool, *, charged: bool = False) -> Summarizing:
        """The port for `settings`; `charged`: its paid calls charged to their owners' shares."""
        backend = make_backend(settings)
        limiter = limits = None
        if settings.llm_backend == "openai":
            key = endpoint_key(settings)
            limits = EndpointLimits(pool, key, configured=settings.llm_context_tokens)
            if settings.llm_rpm or settings.llm_tpm:
                limiter = RateLimiter(pool, key, rpm=settings.llm_rpm, tpm=settings.llm_tpm)
        shares = OwnerShares(settings.deployment, settings.owner_weights) if charged else None
        return cls(pool, backend, limits, limiter, TokenCalibration(), settings, shares)

    @property
    def model(self) -> str:
        return self.backend.model

    async def aclose(self) -> None:
        """Release the backend's connections (at the service's stop)."""
        await self.backend.aclose()

    async def budget(self) -> int | None:
        if self.limits is None:
            return None
        await self._probe_once()
        return await self.limits.budget()

    async def _probe_once(self) -> None:
        """Ask the endpoint what it can, once (again a minute later if it did not answer)."""
        probe = getattr(self.backend, "probe", None)
        if self.limits is None or probe is None or not self.settings.llm_probe:
            return
        if self._probed_at is not None and time.monotonic() - self._probed_at < PROBE_AGAIN_S:
            return
        async with self._probing:  # the calls that come meanwhile wait for the answer, not plan without it
            if self._probed_at is not None and time.monotonic() - self._probed_at < PROBE_AGAIN_S:
                return
            facts = await probe()
            if facts is None:
                log.info("%s: the endpoint did not answer what it can; asked again in a minute", self.limits.key)
                self._probed_at = time.monotonic()
                return
            if facts.context_tokens:
                await self.limits.observe(facts.context_tokens, facts.source)
            else:  # never asked again: every call would wait for the same answer once a minute
                log.info("%s: the endpoint states no context window; learned from refusals", self.limits.key)
            # Only now: a call that finds the probe done plans under what it stated.
            self._probed_at = float("inf")  # asked and answered: never again in this process

    async def bounded(self, request: SummaryRequest) -> SummaryRequest:
        """The request with its answer's bound: the setting for its kind and length, within a quarter of
        the budget."""
        wanted = self.settings.max_answer_tokens(str(request.kind), request.length)
        budget = await self.budget()
        return replace(request, max_tokens=wanted if budget is None else max(16, min(wanted, budget // 4)))

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        """The answer to `request` (from the result cache, or the provider), and whether it was cached.
        At most `DOCSUM_LLM_MAX_INFLIGHT` of them at once per process: the summarizer's chunks and the
        merger's merges alike, a call waiting for one of those slots served in its `context.rank` (the
        fair order's, lowest first; unranked first, in the order they came: slots.py)."""
        kind = str(request.kind)
        try:
            result, cached = await summarize_cached(
                self.cache,
                self.backend,
                request,
                context,
                limiter=self.limiter,
                calibration=self.calibration,
                shared=self.settings.shared_cache,
                mode=(context.mode if context else None) or self.settings.llm_mode,
                slot=self._call_slot(request, context.rank if context else None),
                shares=self.shares,
            )
        except StalePlan:
            raise  # no call was made
        except Exception as exc:
            metrics.LLM_CALLS.labels(self.model, kind, _outcome(exc)).inc()
            raise
        _measured(result, kind, cached, self.settings)
        return result, cached

    @contextlib.asynccontextmanager
    async def _call_slot(self, request: SummaryRequest, rank: tuple[float, ...] | None) -> AsyncIterator[None]:
        """One of the process's call slots, in `rank`'s turn. A request planned before its wait for one,
        under a budget a refusal has lowered meanwhile, is not sent to be refused too:
        ContextLimitExceeded, planned again."""
        async with self._calls.slot(rank):
            if self.limits is not None and not fits(request, await self.limits.budget(), self.calibration):
                raise StalePlan("planned under a larger input budget than the one learned meanwhile")
            try:
                yield
            except ContextLimitExceeded as refusal:
                if not isinstance(refusal, StalePlan):
                    await self.learn(refusal, request)  # before the slot is free: the next call plans under it
                raise

    async def cached(self, request: SummaryRequest, context: CallContext) -> SummaryResult | None:
        """The result cache's answer to `request` (booked as a cache hit), or None: nothing is called."""
        return await self.cache.lookup(self.cache_key(request, context), request, context)

    async def stored(self, key: str) -> SummaryResult | None:
        """The answer stored under a cache key (a batch line's custom_id), booked nowhere: it was paid
        when it was stored."""
        return await self.cache.stored(key)

    @property
    def batching(self) -> OpenAIBackend | None:
        """The backend, when it can send requests as lines of the provider's batches."""
        from .openai.client import OpenAIBackend

        return self.backend if isinstance(self.backend, OpenAIBackend) else None

    def cache_key(self, request: SummaryRequest, context: CallContext) -> str:
        return cache_key(
            self.model, request, None if self.settings.shared_cache else context.owner, self.backend.sampling
        )

    async def plan_chunk(self, request: SummaryRequest) -> list[SummaryRequest] | None:
        return plan_chunk(request, await self.budget(), self.calibration)

    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool:
        """A refusal of `request` as too long: lower the budget. True: plan again; False: cannot shrink.
        The lesson of one refusal is taken once (its call slot took it first, see `_call_slot`)."""
        if self.limits is None:
            return False
        if refusal.replan is None:
            estimate = estimate_request_tokens(request, self.calibration)
            reserve = completion_reserve(self.limits.effective(), request)
            refusal.replan = await self.limits.learn(refusal, estimate, reserve, self.calibration)
        return refusal.replan

    def describe_budget(self) -> str:
        return self.limits.describe() if self.limits else "no known input budget"


def _outcome(exc: Exception) -> str:
    if isinstance(exc, RateLimited):
        return "rate_limited"
    return "context_refused" if isinstance(exc, ContextLimitExceeded) else "failed"


def _measured(result: SummaryResult, kind: str, cached: bool, settings: LLMSettings) -> None:
    if cached:
        metrics.LLM_CALLS.labels(result.model, kind, "cached").inc()
        return
    metrics.LLM_CALLS.labels(result.model, kind, "answered").inc(result.requests)
    metrics.LLM_SECONDS.labels(result.model, kind).observe(result.seconds)
    metrics.LLM_TOKENS.labels(result.model, "prompt").inc(result.prompt_tokens)
    metrics.LLM_TOKENS.labels(result.model, "completion").inc(result.completion_tokens)
    metrics.LLM_COST.labels(result.model).inc(
        settings.cost_usd(result.model, result.prompt_tokens, result.completion_tokens, result.tier)
    )


def make_backend(settings: LLMSettings) -> SummarizerBackend:
    if settings.llm_backend == "openai":
        from .openai.client import OpenAIBackend, Timeouts

        return OpenAIBackend(
            settings.llm_model,
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key,
            timeouts=Timeouts(settings.llm_stall_timeout_s, settings.llm_min_prompt_tps, settings.llm_min_output_tps),
            frequency_penalty=settings.llm_frequency_penalty,
            flex_tries=settings.llm_flex_tries,
            citations=settings.llm_citations,
            stream=settings.llm_stream,
        )
    from .extractive import ExtractiveBackend

    return ExtractiveBackend()
