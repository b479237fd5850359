"""The `openai` package's HTTP calls carried by aiohttp: its connections are reused without a check of
every pooled socket per request, and its responses are read by a C parser. The package, its requests,
its errors and its reading of answers stay as they are; only the transport under its `httpx2` client
changes (about 40 % less of the client's CPU per call; bench/README.md).

What an `httpx2` transport must keep: the request's timeouts (connect; read, between two bytes of the
answer), a streamed answer read piece by piece, and failures raised as `httpx2`'s own kinds, which the
package turns into `APITimeoutError` (a timeout) or `APIConnectionError` (anything else) as it would.
Certificates are checked as `httpx2` checks them; a proxy from the environment (HTTPS_PROXY, …) is
`httpx2`'s own transport's to use, as before (a client mounts one for the URLs a proxy serves).

A kept-alive connection may be closed by the server while it is idle in the pool: llama.cpp's server
closes its connection right after every streamed answer (though its headers say `Keep-Alive: timeout=5`),
and servers close idle ones after a while (llama.cpp's and uvicorn's, vLLM's among them, after 5 s). A
request written on such a connection before the client has seen it close fails before any byte of
answer; aiohttp sends it again only for idempotent methods, and a chat completion is a POST. The server
answers nothing on a connection it is closing: the request is sent again at once, on another connection,
and nothing is counted as a failed call. One that fails so on a new connection is the server's failure.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx2

log = logging.getLogger(__name__)

# How long an idle connection is kept for the next request: less than the servers people run keep theirs
# (llama.cpp's server and uvicorn 5 s; Ollama and OpenAI longer), so that the client lets one go before
# its server does, rather than at the same moment.
KEEPALIVE_EXPIRY_S = 3.0

# How a request fails on a connection the server closed before answering: the write fails (on a closing
# transport, or with an OS error on the closed socket) or the server's end of file comes instead of the answer.
_CLOSED_BEFORE_ANSWER = (aiohttp.ClientConnectionResetError, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)

# The most specific kind first: aiohttp's connect timeout is also a "server timeout", a refused
# connection also a "connection error".
_KINDS: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx2.ReadTimeout),
    (TimeoutError, httpx2.ReadTimeout),
    (aiohttp.ClientProxyConnectionError, httpx2.ProxyError),
    (aiohttp.ClientConnectorError, httpx2.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx2.ReadError),
    (aiohttp.ClientResponseError, httpx2.RemoteProtocolError),  # a response that is not HTTP
    (aiohttp.InvalidURL, httpx2.UnsupportedProtocol),
    (aiohttp.ClientError, httpx2.NetworkError),
)


def transport_error(exc: aiohttp.ClientError | TimeoutError) -> httpx2.TransportError:
    """`exc` as the `httpx2` kind it is."""
    kind = next(ours for kind, ours in _KINDS if isinstance(exc, kind))
    return kind(str(exc) or type(exc).__name__)


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """One aiohttp session (its pool of keep-alive connections), made in the loop of the first request.
    Its TLS context (the system's certificates read, ~0.2 s in a new process) is made with it, at the
    service's start, not in its first call."""

    def __init__(self, limits: httpx2.Limits) -> None:
        self._limits = limits
        self._ssl = httpx2.create_ssl_context(trust_env=True)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry,
            ssl=self._ssl,
        )
        # aiohttp says, per request, whether it took a pooled connection (its trace of the request).
        reuse = aiohttp.TraceConfig()
        reuse.on_connection_reuseconn.append(_mark_reused)
        reuse.freeze()
        return aiohttp.ClientSession(connector=connector, auto_decompress=False, trace_configs=[reuse])

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._session is None or self._session.closed:
            self._session = self._open()
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()  # requests are small (a prompt; a batch file within its cap)
        # The body goes whole, its length set by aiohttp, whatever the request had planned to stream.
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "transfer-encoding"]
        timeouts = aiohttp.ClientTimeout(
            total=None,
            connect=timeout.get("pool"),
            sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
        )
        while True:
            attempt = SimpleNamespace(reused=False)
            try:
                response = await self._session.request(
                    request.method,
                    str(request.url),
                    headers=headers,
                    data=body or None,
                    allow_redirects=False,
                    compress=False,
                    timeout=timeouts,
                    trace_request_ctx=attempt,
                )
                break
            except (TimeoutError, aiohttp.ClientError) as exc:
                # A pooled connection the server had closed, or closed as the request came: it answers
                # nothing there. Sent again; the failed connection has left the pool, so this ends within
                # the pool's idle connections, on a new one at the latest.
                if attempt.reused and isinstance(exc, _CLOSED_BEFORE_ANSWER):
                    log.debug("%s closed a kept-alive connection before answering (%s): sent again", request.url, exc)
                    continue
                raise transport_error(exc) from exc
        return httpx2.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _mark_reused(_: aiohttp.ClientSession, context: SimpleNamespace, __: Any) -> None:
    context.trace_request_ctx.reused = True
