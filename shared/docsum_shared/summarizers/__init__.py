"""Summarizer backends behind one interface, and the result cache every call goes through."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from ..ratelimit import RateLimiter
from ..settings import Settings
from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .budget import TokenCalibration, fit_chunk_request
from .cache import CallContext, summarize_cached


@dataclass
class Summarizing:
    """What every summary request goes through: the backend, the result cache, the cluster-wide rate
    limit, the input budget and the token calibration learnt from the provider's usage reports."""

    pool: asyncpg.Pool
    backend: SummarizerBackend
    budget: int | None
    limiter: RateLimiter | None
    calibration: TokenCalibration

    @classmethod
    def from_settings(cls, settings: Settings, pool: asyncpg.Pool) -> Summarizing:
        backend = make_backend(settings)
        limiter = None
        if settings.llm_backend == "openai" and (settings.llm_rpm or settings.llm_tpm):
            key = f"{settings.openai_base_url or 'openai'}|{settings.llm_model}"
            limiter = RateLimiter(pool, key, rpm=settings.llm_rpm, tpm=settings.llm_tpm)
        budget = settings.llm_context_tokens if settings.llm_backend == "openai" else None
        return cls(pool, backend, budget, limiter, TokenCalibration())

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        return await summarize_cached(
            self.pool, self.backend, request, context, limiter=self.limiter, calibration=self.calibration
        )

    def fit_chunk(self, request: SummaryRequest) -> SummaryRequest:
        return fit_chunk_request(request, self.budget, self.calibration)


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
