"""Summarizer backends behind one interface, and the result cache every call goes through."""

from __future__ import annotations

from ..settings import Settings
from .base import SummarizerBackend


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
