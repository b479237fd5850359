"""A TCP proxy in front of the gateway that loses answers, as a dropped connection or a load balancer's
timeout does: the request reaches the gateway whole, the gateway answers, and the client's connection is
closed without a byte of that answer.

One request per connection (each answer says `Connection: close`): the proxy
reads the request's head to know it, passes the rest through, reads the answer in full (uvicorn's JSON
answers carry Content-Length), records it, and forwards it or drops it as `drop(head)` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Exchange:
    """One request through the proxy and the gateway's answer to it."""

    head: dict[str, str]  # the request's header fields, names lower-case
    status: int
    headers: dict[str, str]  # the answer's, names lower-case
    body: bytes
    dropped: bool

    def json(self) -> Any:
        return json.loads(self.body)


def _fields(head: bytes) -> tuple[str, dict[str, str]]:
    first, *lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return first, fields


@dataclass
class LossyProxy:
    upstream_port: int
    drop: Callable[[dict[str, str]], bool]  # of a request's header fields: lose its answer?
    exchanges: list[Exchange] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        upstream_in, upstream_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            head = await client_in.readuntil(b"\r\n\r\n")
            _, request = _fields(head)
            upstream_out.write(head)
            forward = asyncio.create_task(self._pipe(client_in, upstream_out))
            try:
                answer_head = await upstream_in.readuntil(b"\r\n\r\n")
                status_line, answer = _fields(answer_head)
                body = await upstream_in.readexactly(int(answer.get("content-length", "0")))
            finally:
                forward.cancel()
            dropped = self.drop(request)
            self.exchanges.append(Exchange(request, int(status_line.split()[1]), answer, body, dropped))
            if dropped:
                client_out.transport.abort()  # the connection resets: no answer at all
                return
            # It serves one request per connection, and says so: a client (a browser) then never sends a
            # request on a connection the proxy is closing, which it would send again by itself.
            client_out.write(answer_head[:-2] + b"Connection: close\r\n\r\n" + body)
            await client_out.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            client_out.transport.abort()
        finally:
            upstream_out.close()
            client_out.close()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while block := await source.read(64 * 1024):
                sink.write(block)
                await sink.drain()
