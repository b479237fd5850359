"""The `openai` package's HTTP calls carried by aiohttp: its connections are reused without a check of
every pooled socket per request, and its responses are read by a C parser. The package, its requests,
its errors and its reading of answers stay as they are; only the transport under its `httpx2` client
changes (about 40 % less of the client's CPU per call; bench/README.md).

What an `httpx2` transport must keep: the request's timeouts (connect; read, between two bytes of the
answer), a streamed answer read piece by piece, and failures raised as `httpx2`'s own kinds, which the
package turns into `APITimeoutError` (a timeout) or `APIConnectionError` (anything else) as it would.
Certificates are checked as `httpx2` checks them; a proxy from the environment (HTTPS_PROXY, …) is
`httpx2`'s own transport's to use, as before (a client mounts one for the URLs a proxy serves).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx2

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
        return aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._session is None or self._session.closed:
            self._session = self._open()
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()  # requests are small (a prompt; a batch file within its cap)
        # The body goes whole, its length set by aiohttp, whatever the request had planned to stream.
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "transfer-encoding"]
        try:
            response = await self._session.request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),  # fmt: skip
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
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
