"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp's server...).

What real servers do, and what this backend does about it:
- Answers are bounded: every request carries `max_tokens` (SummaryRequest.max_tokens). An answer cut
  at that bound (`finish_reason: "length"`) is asked for once more, shorter; cut again, it is kept
  and marked truncated. An empty answer, or one that only repeats the input, is a failed attempt.
- Calls stream, so that a slow local model that is still producing tokens is never cut off: the
  timeout is a stall timeout (no token for `stall_timeout_s`), the first token may take as long as
  reading the prompt takes at `min_prompt_tps`, and an overall ceiling grows with the prompt and the
  answer's bound. An endpoint that cannot stream gets plain calls under that ceiling.
- `probe()` asks the endpoint what it can: llama.cpp's `/props` (n_ctx), Ollama's `/api/show` (the
  num_ctx it runs the model with, else its default), vLLM's `max_model_len` in `/v1/models`.
- Ollama never refuses a prompt longer than its num_ctx: it cuts it silently (and its OpenAI-compatible
  endpoint takes no num_ctx from the request). Its usage says how much it read, so an answer to a
  prompt it read only in part is refused here as too long, and the budget is learned from it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
import openai

from ..errors import ContextLimitExceeded, ProviderUnavailable, RateLimited, RequestRefused, context_limit_error
from ..text import estimate_tokens_upper
from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .prompts import build_messages

log = logging.getLogger(__name__)

# Ollama's context when its model sets no num_ctx (OLLAMA_CONTEXT_LENGTH may raise it; docsum cannot
# see that, and learns it from usage instead).
OLLAMA_DEFAULT_NUM_CTX = 2048
# A prompt Ollama reports reading less than this share of (by our deliberately high estimate) was cut.
OLLAMA_CUT_SHARE = 0.5
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class EndpointFacts:
    """What the endpoint said about itself."""

    server: str  # "llama.cpp", "Ollama", "vLLM", "OpenAI-compatible"
    context_tokens: int | None  # the window a request must fit (prompt and answer)
    source: str  # where that number comes from, for logs and the task's answer


@dataclass(frozen=True)
class Timeouts:
    stall_s: float = 60.0  # no token for this long: the call failed
    min_prompt_tps: float = 10.0  # the slowest prompt reading we wait for before the first token
    min_output_tps: float = 2.0  # the slowest answer we wait for, token by token

    def first_token_s(self, prompt_tokens: int) -> float:
        return self.stall_s + prompt_tokens / self.min_prompt_tps

    def ceiling_s(self, prompt_tokens: int, max_tokens: int) -> float:
        return self.first_token_s(prompt_tokens) + max(max_tokens, 1) / self.min_output_tps


class OpenAIBackend(SummarizerBackend):
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeouts: Timeouts = Timeouts(),
        frequency_penalty: float | None = None,
    ) -> None:
        self.model = model
        self.frequency_penalty = frequency_penalty
        self.sampling = {} if frequency_penalty is None else {"frequency_penalty": frequency_penalty}
        self.base_url = base_url
        self.api_key = api_key or "not-needed"
        self.timeouts = timeouts
        self.streaming = True  # until the endpoint says it cannot
        self.server: str | None = None  # what probe() found
        self.num_ctx: int | None = None  # Ollama's, as /api/show states it

        # Retries are ours (the services back off and keep their place), so the client makes one try.
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=self.api_key, max_retries=0)

    # --- one summary -------------------------------------------------------------------------------

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        result, finish = await self._complete(request)
        if finish == "length":  # cut at max_tokens: ask once more for a shorter answer
            shorter, finish = await self._complete(replace(request, shorter=True))
            result = replace(
                shorter,
                prompt_tokens=result.prompt_tokens + shorter.prompt_tokens,
                completion_tokens=result.completion_tokens + shorter.completion_tokens,
                truncated=finish == "length",
            )
        if _repeats_the_input(result.text, request):
            raise ProviderUnavailable("LLM provider answered with the input itself instead of a summary")
        return result

    async def _complete(self, request: SummaryRequest) -> tuple[SummaryResult, str | None]:
        messages = build_messages(request)
        prompt_tokens = sum(estimate_tokens_upper(str(m.get("content", ""))) for m in messages)
        max_tokens = request.max_tokens or 1024
        extra: dict[str, Any] = {}
        if self.frequency_penalty is not None:  # small local models copy their input without one
            extra["frequency_penalty"] = self.frequency_penalty
        try:
            async with asyncio.timeout(self.timeouts.ceiling_s(prompt_tokens, max_tokens)):
                if self.streaming:
                    try:
                        text, finish, usage, model = await self._streamed(messages, max_tokens, prompt_tokens, extra)
                    except openai.BadRequestError as exc:
                        if "stream" not in exc.message.lower():
                            raise
                        log.warning("%s cannot stream (%s); plain calls from now on", self.base_url, exc.message)
                        self.streaming = False
                if not self.streaming:
                    text, finish, usage, model = await self._plain(messages, max_tokens, extra)
        except TimeoutError as exc:
            raise ProviderUnavailable(
                f"LLM provider took longer than {self.timeouts.ceiling_s(prompt_tokens, max_tokens):.0f}s "
                "(the ceiling for this prompt and answer)"
            ) from exc
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
        text = text.strip()
        if not text:
            raise ProviderUnavailable("LLM provider returned an empty answer")
        prompt_used, completion_used = usage if usage else (prompt_tokens, estimate_tokens_upper(text))
        if self.server == "Ollama" and usage and self._cut(prompt_used, prompt_tokens):
            raise ContextLimitExceeded(
                f"the endpoint read only {prompt_used} of about {prompt_tokens} prompt tokens: it cut the prompt "
                "silently (Ollama's num_ctx)",
                limit=prompt_used,
                requested=prompt_tokens,
            )
        return SummaryResult(text, model or self.model, prompt_used, completion_used), finish

    def _cut(self, reported: int, estimated: int) -> bool:
        """Ollama read less of the prompt than was sent: it filled its num_ctx, or read far less than our
        (deliberately high) estimate."""
        return (self.num_ctx is not None and reported >= self.num_ctx) or reported < estimated * OLLAMA_CUT_SHARE

    async def _streamed(
        self, messages: list[Any], max_tokens: int, prompt_tokens: int, extra: dict[str, Any]
    ) -> tuple[str, str | None, tuple[int, int] | None, str | None]:
        first_token_s = self.timeouts.first_token_s(prompt_tokens)
        stream = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=0,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=extra or None,
            # read: between two bytes of the answer; the first may come only after the whole prompt is read
            timeout=httpx2.Timeout(first_token_s, connect=10.0),
        )  # type: ignore[call-overload]  # the stream=True overload, with extra_body
        pieces: list[str] = []
        finish = model = None
        usage: tuple[int, int] | None = None
        loop = asyncio.get_running_loop()
        wait_s = first_token_s
        try:
            # One deadline, moved on at each piece (no task per piece, as wait_for would make).
            async with asyncio.timeout_at(loop.time() + wait_s) as deadline:
                async for chunk in stream:
                    model = chunk.model or model
                    if chunk.usage is not None:
                        usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                    for choice in chunk.choices:
                        if choice.delta and choice.delta.content:
                            pieces.append(choice.delta.content)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    wait_s = self.timeouts.stall_s if pieces else first_token_s
                    deadline.reschedule(loop.time() + wait_s)
        except TimeoutError as exc:
            raise ProviderUnavailable(
                f"LLM provider stalled: no token for {wait_s:.0f}s (DOCSUM_LLM_STALL_TIMEOUT_S)"
            ) from exc
        finally:
            await stream.close()
        return "".join(pieces), finish, usage, model

    async def _plain(
        self, messages: list[Any], max_tokens: int, extra: dict[str, Any]
    ) -> tuple[str, str | None, tuple[int, int] | None, str | None]:
        response = await self._client.chat.completions.create(
            model=self.model, messages=messages, temperature=0, max_tokens=max_tokens, extra_body=extra or None
        )
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        usage = (response.usage.prompt_tokens, response.usage.completion_tokens) if response.usage else None
        return text, choice.finish_reason if choice else None, usage, response.model

    # --- what the endpoint can do ----------------------------------------------------------------

    async def probe(self) -> EndpointFacts | None:
        """Ask the endpoint what it can; None when it says nothing useful (or is not there)."""
        root = _server_root(self.base_url)
        headers = {"Authorization": f"Bearer {self.api_key}"}
        async with httpx2.AsyncClient(timeout=PROBE_TIMEOUT_S, headers=headers) as http:
            props = await _json(http, "GET", f"{root}/props")
            if isinstance(props, dict) and ("default_generation_settings" in props or "n_ctx" in props):
                settings = props.get("default_generation_settings") or {}
                n_ctx = _positive(settings.get("n_ctx") or props.get("n_ctx"))
                self.server = "llama.cpp"
                return EndpointFacts("llama.cpp", n_ctx, "llama.cpp /props n_ctx")
            show = await _json(http, "POST", f"{root}/api/show", json={"model": self.model})
            if isinstance(show, dict) and ("model_info" in show or "parameters" in show):
                info = show.get("model_info") or {}
                trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length")), None)
                found = re.search(r"^num_ctx\s+(\d+)", str(show.get("parameters") or ""), re.M)
                num_ctx = int(found.group(1)) if found else OLLAMA_DEFAULT_NUM_CTX
                self.server, self.num_ctx = "Ollama", num_ctx
                source = f"Ollama /api/show: num_ctx {num_ctx}{'' if found else ' (its default)'}"
                return EndpointFacts("Ollama", min(num_ctx, trained or num_ctx), source)
            models = await _json(http, "GET", f"{(self.base_url or 'https://api.openai.com/v1').rstrip('/')}/models")
            if isinstance(models, dict):
                for card in models.get("data") or []:
                    if isinstance(card, dict) and card.get("id") == self.model and _positive(card.get("max_model_len")):
                        return EndpointFacts("vLLM", int(card["max_model_len"]), "vLLM /v1/models max_model_len")
        return None

    async def aclose(self) -> None:
        await self._client.close()


def _repeats_the_input(text: str, request: SummaryRequest) -> bool:
    """An answer that is only the text it was given (or the instructions), not a summary of it."""
    answer = _squash(text)
    if len(answer) < 200:
        return False
    return any(answer == _squash(t) for t in request.texts) or "summarizethetextbetween" in answer


def _squash(text: str) -> str:
    return re.sub(r"\W+", "", text.lower())


def _server_root(base_url: str | None) -> str:
    """http://host:port/v1 → http://host:port (llama.cpp and Ollama serve their own routes there)."""
    parts = urlsplit(base_url or "https://api.openai.com/v1")
    path = re.sub(r"/v1/?$", "", parts.path.rstrip("/"))
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")).rstrip("/")


async def _json(http: httpx2.AsyncClient, method: str, url: str, **kwargs: Any) -> Any:
    try:
        response = await http.request(method, url, **kwargs)
        return response.json() if response.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from LLM providers; fall back to our own back-off
