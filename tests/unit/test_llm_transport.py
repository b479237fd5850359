"""The openai package over aiohttp (docsum_llm/openai/transport.py): what a failing network looks like to the
backend is what it was over httpx2's own transport — a refused or dropped connection is a connection
error, a silent server a timeout — and the backend's stop closes its connections. Real sockets: a port
nobody listens on, a server that closes every connection it takes, one that never answers, and one that
closes a kept-alive connection just as the next request comes on it (as llama.cpp's server closes its
connection after every streamed answer, and any server an idle one at the end of its keep-alive)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import openai
import pytest
from openai.types.chat import ChatCompletion

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.client import OpenAIBackend, StreamMode, Timeouts
from docsum_llm.openai.transport import KEEPALIVE_EXPIRY_S
from docsum_shared.errors import ProviderUnavailable
from tests.fake_llm import FakeLLM, FakeLLMServer

REQUEST = SummaryRequest(SummaryKind.CHUNK, ("The river rose overnight. The bridge held until noon.",))
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _port(after_request: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> AsyncIterator[int]:
    """A server that reads a request, then does `after_request` with the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await after_request(writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def _hang_up(writer: asyncio.StreamWriter) -> None:
    writer.close()


async def _say_nothing(_: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)


@pytest.fixture
async def closing_port() -> AsyncIterator[int]:
    """A server that reads the request and closes the connection without a word."""
    async for port in _port(_hang_up):
        yield port


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A server that reads the request and never answers."""
    async for port in _port(_say_nothing):
        yield port


def _client(port: int) -> OpenAIBackend:
    return OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", stream="never")


async def _post(backend: OpenAIBackend, timeout: float = 5.0) -> ChatCompletion:
    return await backend._client.post(  # the package's own call, as the backend makes it
        "/chat/completions", cast_to=ChatCompletion, body=BODY, options={"timeout": timeout}
    )


async def test_a_refused_connection_is_a_connection_error_not_a_timeout() -> None:
    backend = _client(_free_port())
    try:
        with pytest.raises(openai.APIConnectionError) as raised:
            await _post(backend)
        assert not isinstance(raised.value, openai.APITimeoutError)
        with pytest.raises(ProviderUnavailable, match="LLM provider unavailable: Connection error"):
            await backend.summarize(REQUEST)
    finally:
        await backend.aclose()


async def test_a_dropped_connection_is_a_connection_error(closing_port: int) -> None:
    backend = _client(closing_port)
    try:
        with pytest.raises(openai.APIConnectionError) as raised:
            await _post(backend)
        assert not isinstance(raised.value, openai.APITimeoutError)
    finally:
        await backend.aclose()


async def test_a_server_that_never_answers_is_a_timeout(silent_port: int) -> None:
    backend = _client(silent_port)
    try:
        with pytest.raises(openai.APITimeoutError):
            await _post(backend, timeout=0.3)
        backend.timeouts = Timeouts(stall_s=0.2, min_prompt_tps=1e6, min_output_tps=1e6)
        with pytest.raises(ProviderUnavailable, match="took longer than|Request timed out"):
            await backend.summarize(REQUEST)
    finally:
        await backend.aclose()


async def test_the_backends_stop_closes_its_connections() -> None:
    with FakeLLMServer(FakeLLM()) as server:
        backend = OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", stream="never")
        assert (await backend.summarize(REQUEST)).text
        session = backend._client._client._transport._session  # type: ignore[attr-defined]
        assert session is not None and not session.closed
        await backend.aclose()
        assert session.closed


# --- a server that closes a kept-alive connection as the next request comes on it ------------------------

ANSWER = "The river rose overnight. [S1]"


@dataclass
class _Closer:
    """Answers one request per connection (a chat completion, plain or streamed as llama.cpp streams it,
    with no word of closing), then closes that connection the moment the next request's first bytes
    come on it: the race a client loses when it reuses a connection its server is closing."""

    connections: int = 0
    answered: int = 0
    dropped: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            asked = await _read_request(reader)
            writer.write(_streamed() if asked.get("stream") else _plain())
            await writer.drain()
            self.answered += 1
            if await reader.read(1):  # the next request, on a connection this server is done with
                self.dropped += 1
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> dict[str, object]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return dict(json.loads(await reader.readexactly(length)))


def _plain() -> bytes:
    body = json.dumps(
        {
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 8},
        }
    ).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5, max=100\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _streamed() -> bytes:
    events: list[dict[str, object]] = [
        {"choices": [{"index": 0, "delta": {"content": ANSWER}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 8}},
    ]
    sse = [f"data: {json.dumps({'model': 'm', 'object': 'chat.completion.chunk', **e})}\n\n" for e in events]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (s.encode() for s in [*sse, "data: [DONE]\n\n"]))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    return head + b"Keep-Alive: timeout=5, max=100\r\n\r\n" + chunks + b"0\r\n\r\n"


@pytest.mark.parametrize("stream", ["always", "never"])
async def test_a_request_on_a_connection_the_server_closes_as_it_comes_is_sent_again_on_a_new_one(
    stream: StreamMode,
) -> None:
    closer = _Closer()
    server = await asyncio.start_server(closer.handle, "127.0.0.1", 0)
    backend = OpenAIBackend(
        "m", base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", api_key="k", stream=stream
    )
    try:
        results = [await backend.summarize(REQUEST) for _ in range(3)]
    finally:
        await backend.aclose()
        server.close()
    # Every call answered, each by one request that counts (no failed attempt to try again later)...
    assert [r.text for r in results] == ["The river rose overnight."] * 3
    assert [r.requests for r in results] == [1, 1, 1]
    # ... the second and third after their first try was dropped on the connection the server was done with.
    assert (closer.connections, closer.answered, closer.dropped) == (3, 3, 2)


async def test_a_request_dropped_on_a_new_connection_is_not_sent_again() -> None:
    dropped = 0

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal dropped
        await _read_request(reader)
        dropped += 1
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    backend = _client(server.sockets[0].getsockname()[1])
    try:
        with pytest.raises(ProviderUnavailable, match="LLM provider unavailable: Connection error"):
            await backend.summarize(REQUEST)
    finally:
        await backend.aclose()
        server.close()
    assert dropped == 1  # the server read it: it may be working on it, so it is not sent twice


def test_idle_connections_are_let_go_before_servers_close_them() -> None:
    # llama.cpp's server and uvicorn (vLLM's) close an idle connection after 5 s: the client lets it go first.
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert backend._http._transport._limits.keepalive_expiry == KEEPALIVE_EXPIRY_S < 5  # type: ignore[attr-defined]
