"""The small HTTP port every service can serve: /healthz, /readyz and /metrics.

    /healthz   200 while the process's event loop answers (liveness)
    /readyz    200 once every consumer has joined its group and PostgreSQL answers; 503 with the reason
    /metrics   the Prometheus metrics of metrics.py (prometheus-client's ASGI app)

Nothing listens unless `DOCSUM_HEALTH_PORT` is set (Kubernetes and compose set it), and then only on
`DOCSUM_HEALTH_HOST` (127.0.0.1 unless configured). Served by uvicorn inside the service's own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import make_asgi_app

log = logging.getLogger(__name__)

Ready = Callable[[], Awaitable[str | None]]  # None when ready, else why not
DB_CHECK_S = 2.0


def app(ready: Ready) -> Callable[..., Awaitable[None]]:
    metrics = make_asgi_app()

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            return
        path = scope.get("path", "")
        if path == "/metrics":
            await metrics(scope, receive, send)
            return
        if path == "/healthz":
            status, body = 200, "ok"
        elif path == "/readyz":
            reason = await ready()
            status, body = (200, "ready") if reason is None else (503, reason)
        else:
            status, body = 404, "not found"
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body.encode() + b"\n"})

    return asgi


class _Config(uvicorn.Config):
    def configure_logging(self) -> None:
        """Leave the process's logging alone: uvicorn's own set-up would apply to every uvicorn server of
        the process — the gateway's access log silenced, its lines bypassing the service's format."""


class _QuietProbes(logging.Filter):
    """Drops the access lines of probes and scrapes (every few seconds, on every service)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        path = args[2] if len(args) > 2 and isinstance(args[2], str) else ""
        return path.partition("?")[0] not in ("/healthz", "/readyz", "/metrics")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the service owns SIGTERM and SIGINT: it drains its consumers, then stops this server


class PortTaken(SystemExit):
    """A port the service cannot listen on: one line naming the address and the setting that moves it."""


def listen(host: str, port: int, setting: str, service: str) -> socket.socket:
    """A socket bound to host:port, or PortTaken. Bound before anything else starts, so that a taken
    port stops the service at once with one line — not uvicorn's error in the middle of a start-up."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "is already in use by another process" if exc.errno == errno.EADDRINUSE else f"cannot be bound: {exc}"
        raise PortTaken(f"docsum-{service}: {host}:{port} {why}; set {setting} to another port") from None
    sock.set_inheritable(False)
    return sock


async def serve_health(sock: socket.socket, ready: Ready) -> None:
    """Serve on `sock` (from `listen`) until cancelled."""
    host, port = sock.getsockname()[:2]
    config = _Config(app(ready), lifespan="on")
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _QuietProbes) for f in access.filters):
        access.addFilter(_QuietProbes())
    server = _Server(config)
    log.info("health, readiness and metrics on http://%s:%d", host, port)
    try:
        await server.serve(sockets=[sock])
    except asyncio.CancelledError:
        server.should_exit = True
        raise


def database_ready(pool: Any) -> Ready:
    """A readiness part: PostgreSQL answers within a couple of seconds."""

    async def check() -> str | None:
        try:
            async with asyncio.timeout(DB_CHECK_S):
                await pool.fetchval("SELECT 1")
        except Exception as exc:
            return f"database: {type(exc).__name__}: {exc}"
        return None

    return check
