"""The openai package over aiohttp (summarizers/transport.py): what a failing network looks like to the
backend is what it was over httpx2's own transport — a refused or dropped connection is a connection
error, a silent server a timeout — and the backend's stop closes its connections. Real sockets: a port
nobody listens on, a server that closes every connection it takes, one that never answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import openai
import pytest
from openai.types.chat import ChatCompletion

from docsum_shared.errors import ProviderUnavailable
from docsum_shared.summarizers.base import SummaryKind, SummaryRequest
from docsum_shared.summarizers.openai_backend import OpenAIBackend, Timeouts
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
