"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp's server...).

What real servers do, and what this backend does about it:
- Answers are bounded: every request carries `max_tokens` (SummaryRequest.max_tokens). An answer cut
  at that bound (`finish_reason: "length"`) is asked for once more, shorter; cut again, it is kept
  and marked truncated. An empty answer, or one that only repeats the input, is a failed attempt.
- Every call is under an overall ceiling that grows with the prompt and the answer's bound. Calls to
  llama.cpp's server and Ollama (as `probe()` finds them) stream besides: they run models on CPU, an
  answer may take minutes, and a stream lets a model that is still producing tokens go on while one
  that stopped fails soon: no token for `stall_timeout_s` (the first may take as long as reading the
  prompt takes at `min_prompt_tps`). Hosted models and vLLM answer fast: a stream would buy nothing
  there and cost the client several times a plain call's CPU (the openai package builds a model of
  each event), so they get plain calls. `stream` "always" or "never" decides it for every endpoint;
  one that cannot stream gets plain calls.
- Some servers and proxies ignore `stream` and answer with one JSON chat completion: it is read as
  the completion it is, and that endpoint gets plain calls from then on.
- `probe()` asks the endpoint what it can: llama.cpp's `/props` (n_ctx), Ollama's `/api/show` (the
  num_ctx it runs the model with, else its default), vLLM's `max_model_len` in `/v1/models`. An endpoint
  that answers `/v1/models` with no window (OpenAI's) is not asked again; one that answers nothing is.
- Ollama never refuses a prompt longer than its num_ctx: it cuts it silently (and its OpenAI-compatible
  endpoint takes no num_ctx from the request). Its usage says how much it read, so an answer to a
  prompt it read only in part is refused here as too long, and the budget is learned from it.
- A flex call (`service_tier: "flex"`) may be refused 429 for lack of flex capacity: that is not our
  rate limit. It is sent again after a short wait, and after `flex_tries` such refusals in a row at the
  default tier, so a task never stalls on flex capacity. An endpoint that does not know the flex tier
  (a 400 naming service_tier) gets the default tier from then on.
- Citations (citations.py): by default the answer is held to a JSON schema (`response_format`),
  which OpenAI, llama.cpp's server and vLLM enforce. An endpoint that refuses it (a 400 naming
  response_format or json_schema) is asked for the text format from then on; one that ignores it
  answers as it likes, and is read leniently all the same.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from docsum_shared import metrics
from docsum_shared.errors import (
    AnsweredWithInput,
    ContextLimitExceeded,
    Kind,
    ProviderUnavailable,
    RateLimited,
    RequestRefused,
    context_limit_error,
)
from docsum_shared.options import Mode
from docsum_shared.retry import FLEX, Backoff, Wait, after_failure, for_flex
from docsum_shared.text import estimate_tokens_upper, sentence_spans, storable

from ..base import SummarizerBackend, SummaryRequest, SummaryResult
from ..batch_api import BatchAPI
from .citations import CitationMode, Claim, cited_sentences, claims, numbered, response_format, summary_text
from .prompts import build_messages, echoes_instructions
from .transport import KEEPALIVE_EXPIRY_S, AiohttpTransport

log = logging.getLogger(__name__)

# Ollama's context when its model sets no num_ctx (OLLAMA_CONTEXT_LENGTH may raise it; docsum cannot
# see that, and learns it from usage instead).
OLLAMA_DEFAULT_NUM_CTX = 2048
# A prompt Ollama reports reading less than this share of (by our deliberately high estimate) was cut.
OLLAMA_CUT_SHARE = 0.5
PROBE_TIMEOUT_S = 5.0

# One call's answer: its text, finish reason, usage (prompt, completion tokens), model, and the tier it
# says it was served at.
_Answer = tuple[str, str | None, tuple[int, int] | None, str | None, str | None]

# When calls stream: "auto" (to the servers below), "always", "never".
StreamMode = Literal["auto", "always", "never"]
# The servers that produce tokens slowly and may stall (CPU inference): "auto" streams to them.
SLOW_SERVERS = ("llama.cpp", "Ollama")


class _NoFlexCapacity(RateLimited):
    """A flex call refused for lack of flex capacity (not our rate limit): handled here, never raised."""


class _NoFlexTier(RequestRefused):
    """The endpoint does not know the flex tier: handled here, never raised."""


class _NoStructuredOutput(RequestRefused):
    """The endpoint refuses `response_format`: handled here, never raised."""


@dataclass(frozen=True)
class EndpointFacts:
    """What the endpoint said about itself."""

    server: str  # "llama.cpp", "Ollama", "vLLM", "OpenAI-compatible"
    context_tokens: int | None  # the window a request must fit (prompt and answer)
    source: str  # where that number comes from, for logs and the task's answer


@dataclass(frozen=True)
class EndpointFeatures:
    """What of the chat-completions API the endpoint takes, as far as its answers have shown. Each starts
    taken and, once the endpoint refuses it, is left off for good: a refusal replaces the whole state
    (never changes it in place), so a call reads one consistent state from start to end."""

    structured: bool = True  # `response_format` (a JSON schema for the citations), until a 400 names it
    streaming: bool = True  # `stream`, until a 400 names it or a stream request is answered in one piece
    flex: bool = True  # `service_tier: "flex"`, until a 400 names it

    def without_structured_output(self) -> EndpointFeatures:
        return replace(self, structured=False)

    def without_streams(self) -> EndpointFeatures:
        return replace(self, streaming=False)

    def without_flex(self) -> EndpointFeatures:
        return replace(self, flex=False)


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
        flex_tries: int = 3,
        flex_backoff: Backoff = FLEX,
        citations: CitationMode = "json_schema",
        stream: StreamMode = "auto",
    ) -> None:
        self.model = model
        self.frequency_penalty = frequency_penalty
        self.sampling: dict[str, object] = {} if frequency_penalty is None else {"frequency_penalty": frequency_penalty}
        if citations == "off":  # another prompt: its answers are not the citing prompt's
            self.sampling["citations"] = "off"
        self.citations = citations
        # JSON citations only when asked for; every feature until the endpoint refuses it.
        self.features = EndpointFeatures(structured=citations == "json_schema")
        self.base_url = base_url
        self.api_key = api_key or "not-needed"
        self.timeouts = timeouts
        self.stream = stream
        self.flex_tries = flex_tries
        self.flex_backoff = flex_backoff
        self.server: str | None = None  # what probe() found
        self.num_ctx: int | None = None  # Ollama's, as /api/show states it

        # Retries are ours (the services back off and keep their place), so the client makes one try.
        # The package's own client, with its defaults, over aiohttp (transport.py); idle connections kept
        # for less time than servers keep theirs.
        limits = openai.DEFAULT_CONNECTION_LIMITS
        self._http = openai.DefaultAsyncHttpxClient(
            transport=AiohttpTransport(
                httpx2.Limits(
                    max_connections=limits.max_connections,
                    max_keepalive_connections=limits.max_keepalive_connections,
                    keepalive_expiry=min(limits.keepalive_expiry or KEEPALIVE_EXPIRY_S, KEEPALIVE_EXPIRY_S),
                )
            )
        )
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=self.api_key, max_retries=0, http_client=self._http
        )

    @property
    def structured(self) -> bool:
        """Whether calls hold the answer to the JSON schema (`response_format`)."""
        return self.features.structured

    @property
    def streaming(self) -> bool:
        """Whether the endpoint takes streams (`stream` decides which calls do)."""
        return self.features.streaming

    @property
    def flex(self) -> bool:
        """Whether the endpoint knows the flex tier."""
        return self.features.flex

    # --- one summary -------------------------------------------------------------------------------

    async def summarize(self, request: SummaryRequest, mode: Mode = "realtime") -> SummaryResult:
        result, finish = await self._complete(request, mode)
        if finish == "length":  # cut at max_tokens: ask once more for a shorter answer
            shorter, finish = await self._complete(replace(request, shorter=True), mode)
            result = replace(
                shorter,
                prompt_tokens=result.prompt_tokens + shorter.prompt_tokens,
                completion_tokens=result.completion_tokens + shorter.completion_tokens,
                requests=result.requests + shorter.requests,
                truncated=finish == "length",
                # Both are priced at one tier: the default one unless both were answered at flex.
                tier=result.tier if result.tier == shorter.tier else "realtime",
            )
        result = self._cited(result, request)
        if _repeats_the_input(result.text, request):
            raise AnsweredWithInput("LLM provider answered with the input itself instead of a summary")
        return result

    def _cited(self, answer: SummaryResult, request: SummaryRequest) -> SummaryResult:
        """The answer as a summary: its sentences, each labelled by what supports it (never refused for
        its citations), joined in the style asked for. An answer in which no sentence can be read (JSON
        cut before its first one) is kept as it is, as prose; nothing in it at all: a failed attempt.

        Every answer passes here (a plain call's, a stream's, a batch line's), and first through `storable`
        (claims' JSON strings too): a NUL or a lone surrogate the model wrote is dropped here, where it
        costs nothing, not refused by PostgreSQL with every answer stored beside it."""
        text = storable(answer.text)
        found = claims(text) or [(text[a:b], ()) for a, b in sentence_spans(text)]
        found = self._without_echoes(found, request)
        sentences = cited_sentences(found, numbered(request))
        if not sentences:
            raise ProviderUnavailable("LLM provider answered with no sentence")
        summary = summary_text(sentences, request.style)
        return replace(answer, text=summary, model=storable(answer.model), sentences=sentences)

    def _without_echoes(self, found: list[Claim], request: SummaryRequest) -> list[Claim]:
        """The answer's sentences less those that repeat the prompt (its instructions, the placeholders of
        its citation format): no summary sentences. Counted: a model that copies its prompt shows there."""
        kept = [claim for claim in found if not echoes_instructions(claim[0], request)]
        if len(kept) < len(found):
            metrics.LLM_ECHOES.labels(self.model).inc(len(found) - len(kept))
            log.warning("%s repeated its prompt in %d sentence(s): dropped", self.model, len(found) - len(kept))
        return kept

    def _asking(self) -> CitationMode:
        """The citations asked for now: JSON only while the endpoint takes response_format."""
        return "json_schema" if self.features.structured else "off" if self.citations == "off" else "text"

    def _format(self, request: SummaryRequest, asking: CitationMode) -> dict[str, Any] | None:
        ids = numbered(request).ids if asking == "json_schema" else []
        return response_format(ids) if ids else None

    # --- one request as a line of the provider's batch ----------------------------------------------

    def chat_body(self, request: SummaryRequest) -> dict[str, Any]:
        """The chat-completions body of `request`, as a batch line carries it (the call `_complete` makes)."""
        asking = self._asking()
        held = self._format(request, asking)
        sent = {**({"response_format": held} if held else {}), **self._extra()}
        return self._body(build_messages(request, asking), request.max_tokens or 1024, sent)

    def _body(self, messages: list[Any], max_tokens: int, extra: Mapping[str, Any]) -> dict[str, Any]:
        """What a chat-completions call sends (beside its tier and streaming)."""
        return {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens, **extra}

    def read_answer(self, body: Mapping[str, Any], request: SummaryRequest) -> SummaryResult:
        """A batch line's chat completion as the answer to `request`, priced at the batch tier; an empty
        answer, or one that repeats the input, is a failed line (ProviderUnavailable). An answer cut at
        its bound is kept, marked truncated: asking again would be another line, a day later."""
        choices = body.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        text = str((choice.get("message") or {}).get("content") or "").strip()
        if not text:
            raise ProviderUnavailable("LLM provider returned an empty answer")
        usage = body.get("usage") or {}
        answer = SummaryResult(
            text,
            str(body.get("model") or self.model),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or estimate_tokens_upper(text)),
            truncated=choice.get("finish_reason") == "length",
            tier="batch",
        )
        result = self._cited(answer, request)
        if _repeats_the_input(result.text, request):
            raise AnsweredWithInput("LLM provider answered with the input itself instead of a summary")
        return result

    def batch_api(self) -> BatchAPI:
        return BatchAPI(self._client)

    def _extra(self) -> dict[str, Any]:
        # Small local models copy their input without a frequency penalty.
        return {} if self.frequency_penalty is None else {"frequency_penalty": self.frequency_penalty}

    async def _complete(self, request: SummaryRequest, mode: Mode = "realtime") -> tuple[SummaryResult, str | None]:
        max_tokens = request.max_tokens or 1024
        extra = self._extra()
        refused = 0  # flex refusals in a row, for lack of capacity
        flex_limits = for_flex(self.flex_tries, self.flex_backoff)
        flex_spent = False  # refused too often: the default tier from here on
        while True:
            asking = self._asking()
            messages = build_messages(request, asking)
            prompt_tokens = sum(estimate_tokens_upper(str(m.get("content", ""))) for m in messages)
            held = self._format(request, asking)
            # A batch task's calls made here (its merges) go flex too: the Batch API takes only its chunks.
            flex = mode in ("flex", "batch") and self.features.flex and not flex_spent
            tier = "flex" if flex else "realtime"
            try:
                text, finish, usage, model, tier = await self._send(
                    messages, max_tokens, prompt_tokens, {**extra, **({"response_format": held} if held else {})}, tier
                )
                break
            except _NoFlexCapacity as exc:
                refused += 1
                # Waited out as a rate limit, up to `flex_tries` refusals; then given up (for_flex).
                step = after_failure(Kind.RATE_LIMITED, 0, refused, flex_limits, retry_after=exc.retry_after)
                if not isinstance(step, Wait):
                    flex_spent = True
                    log.warning(
                        "%s refused a flex call %d times in a row for lack of capacity; sending it at the "
                        "default tier (DOCSUM_LLM_FLEX_TRIES)",
                        self.base_url,
                        refused,
                    )
                    continue
                # Never longer than the back-off's cap, even when the provider says more: the default
                # tier is the way out.
                await asyncio.sleep(min(step.seconds, self.flex_backoff.cap_s))
            except _NoFlexTier as exc:
                log.warning("%s has no flex tier (%s); the default tier from now on", self.base_url, exc)
                self.features = self.features.without_flex()
            except _NoStructuredOutput as exc:
                log.warning(
                    "%s refuses response_format (%s); citations in the text format from now on", self.base_url, exc
                )
                self.features = self.features.without_structured_output()
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
        return SummaryResult(text, model or self.model, prompt_used, completion_used, tier=tier), finish

    async def _send(
        self, messages: list[Any], max_tokens: int, prompt_tokens: int, extra: dict[str, Any], tier: str
    ) -> tuple[str, str | None, tuple[int, int] | None, str | None, str]:
        """One call at `tier`, its failures as the four kinds of errors.py; with the tier it was answered at
        (what the answer says, else what was asked)."""
        try:
            async with asyncio.timeout(self.timeouts.ceiling_s(prompt_tokens, max_tokens)):
                answer: _Answer | None = None
                if self._streams():
                    try:
                        answer = await self._streamed(messages, max_tokens, prompt_tokens, extra, tier)
                    except openai.BadRequestError as exc:
                        if "stream" not in exc.message.lower():
                            raise
                        log.warning("%s cannot stream (%s); plain calls from now on", self.base_url, exc.message)
                        self.features = self.features.without_streams()
                if answer is None:
                    answer = await self._plain(messages, max_tokens, prompt_tokens, extra, tier)
        except TimeoutError as exc:
            raise ProviderUnavailable(
                f"LLM provider took longer than {self.timeouts.ceiling_s(prompt_tokens, max_tokens):.0f}s "
                "(the ceiling for this prompt and answer)"
            ) from exc
        except openai.RateLimitError as exc:
            retry_after = _retry_after(exc.response.headers)
            if tier == "flex" and _no_capacity(exc):
                raise _NoFlexCapacity(f"no flex capacity: {exc.message}", retry_after=retry_after) from exc
            raise RateLimited(f"LLM provider rate limit: {exc.message}", retry_after=retry_after) from exc
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
                if tier == "flex" and exc.status_code == 400 and _names_service_tier(exc):
                    raise _NoFlexTier(exc.message) from exc
                if "response_format" in extra and _names_response_format(exc):
                    raise _NoStructuredOutput(exc.message) from exc
            raise RequestRefused(f"LLM provider rejected the request ({exc.status_code}): {exc.message}") from exc
        text, finish, usage, model, served = answer
        answered = "flex" if served == "flex" or (served is None and tier == "flex") else "realtime"
        return text, finish, usage, model, answered

    def _streams(self) -> bool:
        """Whether the next call streams: as `stream` says ("auto": to the servers that may stall), while
        the endpoint takes streams."""
        if not self.features.streaming or self.stream == "never":
            return False
        return self.stream == "always" or self.server in SLOW_SERVERS

    def _cut(self, reported: int, estimated: int) -> bool:
        """Ollama read less of the prompt than was sent: it filled its num_ctx, or read far less than our
        (deliberately high) estimate."""
        return (self.num_ctx is not None and reported >= self.num_ctx) or reported < estimated * OLLAMA_CUT_SHARE

    async def _streamed(
        self, messages: list[Any], max_tokens: int, prompt_tokens: int, extra: dict[str, Any], tier: str
    ) -> _Answer:
        first_token_s = self.timeouts.first_token_s(prompt_tokens)
        stream = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=0,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            service_tier="flex" if tier == "flex" else openai.omit,  # realtime: nothing more is sent
            extra_body=extra or None,
            # read: between two bytes of the answer; the first may come only after the whole prompt is read
            timeout=httpx2.Timeout(first_token_s, connect=10.0),
        )  # type: ignore[call-overload]  # the stream=True overload, with extra_body
        if _is_json(stream.response):
            return await self._whole(stream)
        pieces: list[str] = []
        finish = model = served = None
        usage: tuple[int, int] | None = None
        loop = asyncio.get_running_loop()
        wait_s = first_token_s
        try:
            # One deadline, moved on at each piece (no task per piece, as wait_for would make).
            async with asyncio.timeout_at(loop.time() + wait_s) as deadline:
                async for chunk in stream:
                    model = chunk.model or model
                    served = chunk.service_tier or served
                    if chunk.usage is not None:
                        usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                    for choice in chunk.choices:
                        if choice.delta and choice.delta.content:
                            pieces.append(choice.delta.content)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    wait_s = self.timeouts.stall_s if pieces else first_token_s
                    deadline.reschedule(loop.time() + wait_s)
        # Ours or the transport's read timeout (no byte for as long: it may fire first), the same stall.
        except (TimeoutError, openai.APITimeoutError) as exc:
            raise ProviderUnavailable(
                f"LLM provider stalled: no token for {wait_s:.0f}s (DOCSUM_LLM_STALL_TIMEOUT_S)"
            ) from exc
        finally:
            await stream.close()
        return "".join(pieces), finish, usage, model, served

    async def _whole(self, stream: openai.AsyncStream[ChatCompletionChunk]) -> _Answer:
        """A stream asked for and one JSON chat completion answered (a server or proxy that ignores
        `stream`): that completion; this endpoint gets plain calls from now on."""
        try:
            content = await stream.response.aread()
        except httpx2.TimeoutException as exc:  # as the package's own stream reports them
            raise openai.APITimeoutError(request=stream.response.request) from exc
        except httpx2.RequestError as exc:
            raise openai.APIConnectionError(request=stream.response.request) from exc
        finally:
            await stream.close()
        answer = _read_completion(content, "a stream request")
        if self.features.streaming:
            log.warning(
                "%s answers a stream request with one JSON chat completion; plain calls from now on", self.base_url
            )
            self.features = self.features.without_streams()
        return answer

    async def _plain(
        self, messages: list[Any], max_tokens: int, prompt_tokens: int, extra: dict[str, Any], tier: str
    ) -> _Answer:
        # Posted as the JSON it is (messages and schema are plain dicts already): the package's typed
        # `create` would walk every field of them first, about a third of a call's CPU here. Its errors
        # and its retries (none) are the same; the answer is read from its JSON, not built into the
        # package's models first (0.92 → 0.72 ms of CPU a call).
        body = self._body(messages, max_tokens, extra)
        if tier == "flex":  # realtime: nothing more is sent
            body["service_tier"] = "flex"
        # read: the whole answer comes at once, so only the ceiling bounds it (not the package's 10 min)
        timeout = httpx2.Timeout(self.timeouts.ceiling_s(prompt_tokens, max_tokens), connect=10.0)
        response = await self._client.post(
            "/chat/completions", cast_to=httpx2.Response, body=body, options={"timeout": timeout}
        )
        return _read_completion(response.content, "a request")

    # --- what the endpoint can do ----------------------------------------------------------------

    async def probe(self) -> EndpointFacts | None:
        """Ask the endpoint what it can (its window None when it answers without one); None when it
        answered none of the questions (not there, or not yet)."""
        root = _server_root(self.base_url)
        headers = {"Authorization": f"Bearer {self.api_key}"}
        ask = functools.partial(_json, self._http, headers=headers, timeout=PROBE_TIMEOUT_S)  # the calls' client
        props = await ask("GET", f"{root}/props")
        if isinstance(props, dict) and ("default_generation_settings" in props or "n_ctx" in props):
            settings = props.get("default_generation_settings") or {}
            n_ctx = _positive(settings.get("n_ctx") or props.get("n_ctx"))
            self.server = "llama.cpp"
            return EndpointFacts("llama.cpp", n_ctx, "llama.cpp /props n_ctx")
        show = await ask("POST", f"{root}/api/show", json={"model": self.model})
        if isinstance(show, dict) and ("model_info" in show or "parameters" in show):
            info = show.get("model_info") or {}
            trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length")), None)
            found = re.search(r"^num_ctx\s+(\d+)", str(show.get("parameters") or ""), re.M)
            num_ctx = int(found.group(1)) if found else OLLAMA_DEFAULT_NUM_CTX
            self.server, self.num_ctx = "Ollama", num_ctx
            source = f"Ollama /api/show: num_ctx {num_ctx}{'' if found else ' (its default)'}"
            return EndpointFacts("Ollama", min(num_ctx, trained or num_ctx), source)
        models = await ask("GET", f"{(self.base_url or 'https://api.openai.com/v1').rstrip('/')}/models")
        if not isinstance(models, dict):
            return None
        for card in models.get("data") or []:
            if isinstance(card, dict) and card.get("id") == self.model and _positive(card.get("max_model_len")):
                return EndpointFacts("vLLM", int(card["max_model_len"]), "vLLM /v1/models max_model_len")
        # It answered, and says nothing of a window (OpenAI's own API): asking again will not change that.
        return EndpointFacts("OpenAI-compatible", None, "/v1/models states no window")

    async def aclose(self) -> None:
        await self._client.close()


def _is_json(response: httpx2.Response) -> bool:
    """The response is JSON (as the openai package tells it: by its content type), not server-sent events."""
    return response.headers.get("content-type", "").split(";")[0].strip().endswith("json")


def _read_completion(content: bytes, asked: str) -> _Answer:
    """What a whole chat completion answered, read from its JSON as leniently as the package reads one
    (nothing validated: what is missing, or not what it should be, is absent). JSON that is not a chat
    completion at all is the provider's failure, and said so."""
    try:
        body = json.loads(content)
    except ValueError as exc:
        raise ProviderUnavailable(f"LLM provider answered {asked} with unreadable JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ProviderUnavailable(f"LLM provider answered {asked} with JSON that is no chat completion")
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    usage = body["usage"] if isinstance(body.get("usage"), dict) else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (
        text if isinstance(text, str) else "",
        _str_or_none(choice.get("finish_reason")),
        (prompt, completion) if isinstance(prompt, int) and isinstance(completion, int) else None,
        _str_or_none(body.get("model")),
        _str_or_none(body.get("service_tier")),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _repeats_the_input(text: str, request: SummaryRequest) -> bool:
    """An answer that is only the text it was given (or the instructions), not a summary of it."""
    answer = _squash(text)
    if len(answer) < 200:
        return False
    return any(answer == _squash(t) for t in request.texts) or "summarizethetextbetween" in answer


def _no_capacity(exc: openai.RateLimitError) -> bool:
    """A 429 for lack of capacity ("resource unavailable"), not for going over our rate limit."""
    code = str(getattr(exc, "code", None) or "")
    return code == "resource_unavailable" or "resource unavailable" in exc.message.lower()


def _names_service_tier(exc: openai.APIStatusError) -> bool:
    """A 400 about service_tier: the endpoint does not know the tier asked for."""
    return "service_tier" in f"{exc.message} {getattr(exc, 'param', None) or ''}".lower()


def _names_response_format(exc: openai.APIStatusError) -> bool:
    """A refusal about response_format: the endpoint does not take a JSON schema."""
    said = f"{exc.message} {getattr(exc, 'param', None) or ''}".lower()
    return "response_format" in said or "json_schema" in said


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
