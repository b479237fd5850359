"""Summarizer backends behind one interface, and the result cache every call goes through."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from ..errors import ContextLimitExceeded
from ..ratelimit import RateLimiter
from ..settings import Settings
from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .budget import TokenCalibration, estimate_request_tokens, plan_chunk
from .cache import CallContext, cache_key, summarize_cached
from .endpoint import EndpointLimits


@dataclass
class Summarizing:
    """The LLM port every service summarizes through: the backend, the result cache, the cluster-wide
    rate limit, the endpoint's input budget (configured or learned) and the token calibration learnt
    from the provider's usage reports."""

    pool: asyncpg.Pool
    backend: SummarizerBackend
    limits: EndpointLimits | None
    limiter: RateLimiter | None
    calibration: TokenCalibration
    shared_cache: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, pool: asyncpg.Pool) -> Summarizing:
        backend = make_backend(settings)
        limiter = limits = None
        if settings.llm_backend == "openai":
            key = f"{settings.openai_base_url or 'openai'}|{settings.llm_model}"
            limits = EndpointLimits(pool, key, configured=settings.llm_context_tokens)
            if settings.llm_rpm or settings.llm_tpm:
                limiter = RateLimiter(pool, key, rpm=settings.llm_rpm, tpm=settings.llm_tpm)
        return cls(pool, backend, limits, limiter, TokenCalibration(), settings.shared_cache)

    @property
    def model(self) -> str:
        return self.backend.model

    async def budget(self) -> int | None:
        return await self.limits.budget() if self.limits else None

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        return await summarize_cached(
            self.pool,
            self.backend,
            request,
            context,
            limiter=self.limiter,
            calibration=self.calibration,
            shared=self.shared_cache,
        )

    def cache_key(self, request: SummaryRequest, context: CallContext) -> str:
        return cache_key(self.model, request, None if self.shared_cache else context.owner)

    async def plan_chunk(self, request: SummaryRequest) -> list[SummaryRequest] | None:
        return plan_chunk(request, await self.budget(), self.calibration)

    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool:
        """A refusal of `request` as too long: lower the budget. True: plan again; False: cannot shrink."""
        if self.limits is None:
            return False
        return await self.limits.learn(refusal, estimate_request_tokens(request, self.calibration), self.calibration)

    def describe_budget(self) -> str:
        return self.limits.describe() if self.limits else "no known input budget"


def make_backend(settings: Settings) -> SummarizerBackend:
    if settings.llm_backend == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(
            settings.llm_model,
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key,
            timeout_s=settings.llm_timeout_s,
        )
    from .extractive import ExtractiveBackend

    return ExtractiveBackend()
