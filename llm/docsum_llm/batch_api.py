"""The provider's Batch and Files APIs (OpenAI's, and the compatible servers'), through the `openai` package.

A batch is a JSONL file of requests (`custom_id`, `method`, `url`, `body`) uploaded with purpose `batch`,
then a batch made from it, answered within its completion window at about half the price. Its output
file holds the answered lines in any order (matched by `custom_id`), its error file the others
(a failed request, or `batch_expired` for the lines an expired or cancelled batch never ran).

A batch is never held whole: its input file is uploaded from a file object (read piece by piece as it is
sent) and its output read line by line as it arrives (`lines`), through a client of its own over the
`openai` package's own HTTP transport, which streams both ways.

Failures come out as the kinds of errors.py: the provider away or erring (ProviderUnavailable), its
rate limit (RateLimited), a refusal (RequestRefused). A batch or file the provider does not know is None.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final

import httpx2
import openai

from docsum_shared.errors import ProviderUnavailable, RateLimited, RequestRefused

CHAT_URL: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"
ACTIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
# The longest line of an output file read: a chat completion is far shorter; a longer line is skipped
# unread (as one that is no JSON), so one line never holds more than this in memory.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
# How far back a search for a batch created but not recorded looks past the time it was recorded.
FIND_SLACK_S = 300


@dataclass(frozen=True)
class ProviderBatch:
    """A batch as the provider describes it."""

    id: str
    status: str
    created_at: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: tuple[str, ...] = ()  # validation errors' codes (token_limit_exceeded, ...)
    error_text: str = ""  # and their messages, for people
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True)
class LineResult:
    """One line of an output or error file."""

    custom_id: str
    status_code: int  # the line's HTTP status; 0 when it never ran (expired, cancelled)
    body: dict[str, Any] | None  # the chat completion, for a 200
    error: str = ""  # what went wrong, for people
    code: str = ""  # the provider's code for it (batch_expired, server_error, ...)

    @property
    def answered(self) -> bool:
        return self.status_code == 200 and self.body is not None


def input_line(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """One request of a batch's input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": dict(body)}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def read_lines(content: bytes) -> list[LineResult]:
    """The lines of an output or error file held whole (`BatchAPI.lines` reads them as they arrive)."""
    return [line for raw in content.splitlines() if (line := read_line(raw)) is not None]


def read_line(raw: bytes | bytearray) -> LineResult | None:
    """One line of an output or error file; None when it cannot be read (not JSON, or nested deeper than
    the parser recurses, or no custom_id): its request is then missing from both files, which is how a
    line the provider never ran is treated."""
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return None
    response = _dict(line.get("response"))
    body = response.get("body") if isinstance(response.get("body"), dict) else None
    status = response.get("status_code")
    status = status if isinstance(status, int) else 0
    error = _dict(line.get("error"))
    if not error and body is not None and status != 200:
        error = _dict(body.get("error"))
    return LineResult(
        line["custom_id"],
        status,
        body if status == 200 else None,
        str(error.get("message") or ""),
        str(error.get("code") or ""),
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class BatchAPI:
    """The Batch and Files endpoints of one provider."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    @classmethod
    def connect(cls, base_url: str | None, api_key: str | None) -> BatchAPI:
        """The Batch API of `base_url` on a client of its own over the package's own transport: it sends a
        file object piece by piece and reads an answer as it arrives (the summarizer's chat client reads a
        request whole). One try per call: the driver's next poll is the retry."""
        return cls(openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "not-needed", max_retries=0))

    async def aclose(self) -> None:
        await self._client.close()

    async def upload(self, name: str, content: bytes | IO[bytes]) -> str:
        """Upload a batch input file (its bytes, or a file object read as it is sent); its id."""
        uploaded = await _call(self._client.files.create(file=(name, content, "application/jsonl"), purpose="batch"))
        return str(uploaded.id)

    async def create(self, input_file_id: str, metadata: Mapping[str, str]) -> ProviderBatch:
        created = await _call(
            self._client.batches.create(
                input_file_id=input_file_id,
                endpoint=CHAT_URL,
                completion_window=COMPLETION_WINDOW,
                metadata=dict(metadata),
            )
        )
        return _batch(created)

    async def retrieve(self, batch_id: str) -> ProviderBatch | None:
        try:
            return _batch(await _call(self._client.batches.retrieve(batch_id)))
        except _NotFound:
            return None

    async def cancel(self, batch_id: str) -> ProviderBatch | None:
        try:
            return _batch(await _call(self._client.batches.cancel(batch_id)))
        except _NotFound:
            return None
        except RequestRefused:  # ended meanwhile: it cannot be cancelled any more
            return await self.retrieve(batch_id)

    async def find(self, key: str, value: str, input_file_id: str, since: float) -> ProviderBatch | None:
        """The batch whose metadata says `key`: `value` and made of `input_file_id`, among those created
        since `since` (epoch seconds; the list is newest first, so the search stops at the first one
        older). A batch whose metadata says so but made of another file is not ours: metadata is anyone's
        to write."""
        try:
            async for batch in self._client.batches.list(limit=100):
                if batch.created_at < since - FIND_SLACK_S:
                    return None
                if (batch.metadata or {}).get(key) == value and batch.input_file_id == input_file_id:
                    return _batch(batch)
        except openai.APIError as exc:
            translated = _translated(exc)
            if isinstance(translated, _NotFound):
                return None
            raise translated from exc
        return None

    async def lines(self, file_id: str) -> AsyncIterator[LineResult]:
        """The readable lines of an output or error file, as they arrive: never the whole file in memory.
        A file the provider does not know has none."""
        try:
            async with self._client.files.with_streaming_response.content(file_id) as response:
                pending = bytearray()
                async for piece in response.iter_bytes():
                    start = 0
                    while (end := piece.find(b"\n", start)) != -1:
                        pending += piece[start:end]
                        if pending and len(pending) <= MAX_LINE_BYTES and (line := read_line(pending)) is not None:
                            yield line
                        pending.clear()
                        start = end + 1
                    if len(pending) <= MAX_LINE_BYTES:  # past it, the rest of the line is dropped as it comes
                        pending += piece[start:]
                if pending and len(pending) <= MAX_LINE_BYTES and (line := read_line(pending)) is not None:
                    yield line
        except openai.APIError as exc:
            translated = _translated(exc)
            if isinstance(translated, _NotFound):
                return
            raise translated from exc
        except httpx2.TransportError as exc:  # the body cut off while it streams: read again at the next poll
            raise ProviderUnavailable(f"LLM provider unavailable: {exc}") from exc


class _NotFound(RequestRefused):
    """The provider does not know the batch or file (or serves no Batch API at all)."""


async def _call(awaitable: Any) -> Any:
    try:
        return await awaitable
    except openai.APIError as exc:
        raise _translated(exc) from exc


def _translated(exc: openai.APIError) -> Exception:
    if isinstance(exc, openai.NotFoundError):
        return _NotFound(str(exc))
    if isinstance(exc, openai.RateLimitError):
        return RateLimited(f"LLM provider rate limit: {exc.message}")
    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
        return ProviderUnavailable(f"LLM provider unavailable: {exc}")
    if isinstance(exc, openai.APIStatusError) and (exc.status_code >= 500 or exc.status_code in (408, 409)):
        return ProviderUnavailable(f"LLM provider error {exc.status_code}: {exc.message}")
    status = getattr(exc, "status_code", "?")
    return RequestRefused(f"LLM provider rejected the request ({status}): {exc.message}")


def _batch(batch: Any) -> ProviderBatch:
    counts = batch.request_counts
    errors = list((batch.errors.data or []) if batch.errors else [])
    return ProviderBatch(
        id=batch.id,
        status=batch.status,
        created_at=batch.created_at or 0,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        total=counts.total if counts else 0,
        completed=counts.completed if counts else 0,
        failed=counts.failed if counts else 0,
        errors=tuple(str(e.code or "") for e in errors),
        error_text="; ".join(f"{e.code}: {e.message}" if e.code else str(e.message) for e in errors),
        metadata=dict(batch.metadata or {}),
    )
