"""A webhook receiver for tests: a real HTTP server (http.server, in a thread) that records each request
and answers 500 to its first few, as an endpoint that is down a while does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_llm import free_port


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int


@dataclass
class Receiver:
    """An HTTP server that answers 500 to its first `fail_first` requests and 204 after; the request it is
    told to `hold` waits (unanswered) until `release` is set."""

    fail_first: int = 3
    hold: int | None = None  # which request (1 = the first) waits for `release`
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = field(default_factory=free_port)

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            number = len(self.received) + 1
            status = 500 if number <= self.fail_first else 204
            self.received.append(Received(headers, body, status))
        if number == self.hold:
            self.held.set()
            self.release.wait(60)
        return status

    def delivered(self) -> dict[str, Received]:
        """The requests answered 2xx, by webhook-id."""
        with self.lock:
            return {r.headers["webhook-id"]: r for r in self.received if r.answered < 300}


@contextmanager
def serving() -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 until the block ends."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = state.answer({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", state.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
