"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp...)."""

from __future__ import annotations

from collections.abc import Mapping

import openai

from ..errors import ProviderUnavailable, RateLimited, RequestRefused, context_limit_error
from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .prompts import build_messages


class OpenAIBackend(SummarizerBackend):
    def __init__(self, model: str, *, base_url: str | None, api_key: str | None, timeout_s: float) -> None:
        self.model = model
        # Retries are ours (the consumer backs off and keeps its place), so the client makes one try.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
        )

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=build_messages(request),
                temperature=0,
            )
        except openai.RateLimitError as exc:
            raise RateLimited(
                f"LLM provider rate limit: {exc.message}", retry_after=_retry_after(exc.response.headers)
            ) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ProviderUnavailable(f"LLM provider unavailable: {exc}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409):
                raise ProviderUnavailable(
                    f"LLM provider error {exc.status_code}: {exc.message}",
                    retry_after=_retry_after(exc.response.headers),
                ) from exc
            if exc.status_code in (400, 413, 422):
                code = getattr(exc, "code", None)
                if overflow := context_limit_error(exc.message, code if isinstance(code, str) else None):
                    raise overflow from exc
            raise RequestRefused(f"LLM provider rejected the request ({exc.status_code}): {exc.message}") from exc
        text = (response.choices[0].message.content or "").strip() if response.choices else ""
        if not text:
            raise ProviderUnavailable("LLM provider returned an empty answer")
        usage = response.usage
        return SummaryResult(
            text=text,
            model=response.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    async def aclose(self) -> None:
        await self._client.close()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from LLM providers; fall back to our own back-off
