"""The upload bytes a gateway holds at once are capped, in all (503) and per owner (429), with Retry-After:
a burst of large uploads waits instead of filling the disk they spool to. A request books its file bytes as
they arrive (what its Content-Length declares books nothing: a silent request cannot squat the budget), a
body that sends nothing for DOCSUM_UPLOAD_IDLE_S is dropped (408), and what was booked is given back when
the request ends, whichever way it ends.

The application is built for real, without a database or broker: every answer here comes before either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from docsum_gateway.app import create_app
from docsum_gateway.settings import GatewaySettings
from tests.unit.test_gateway_inputs import Untouchable

KiB = 1024
KEYS = {"alice": "a" * 24, "bob": "b" * 24}
BOUNDARY = b"b0undary"


def _app(idle_s: float = 30.0) -> Any:
    settings = GatewaySettings(
        api_keys=",".join(f"{owner}={key}" for owner, key in KEYS.items()),
        tasks_per_minute=0,
        upload_inflight_bytes=1024 * KiB,
        upload_inflight_bytes_per_owner=700 * KiB,
        upload_idle_s=idle_s,
    )
    app = create_app(settings)
    app.state.pool = Untouchable()
    app.state.publish = Untouchable()
    return app


class Sent:
    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.consumed = 0


async def _post(app: Any, owner: str, blocks: AsyncIterator[bytes], declared: int | None) -> Sent:
    """Drive the ASGI app with a body that arrives block by block, as slowly as `blocks` gives them."""
    sent = Sent()

    async def receive() -> dict:
        try:
            block = await anext(blocks)
        except StopAsyncIteration:
            return {"type": "http.request", "body": b"", "more_body": False}
        sent.consumed += len(block)
        return {"type": "http.request", "body": block, "more_body": True}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            sent.status = message["status"]
            sent.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            sent.body += message.get("body", b"")

    headers = {
        "authorization": f"Bearer {KEYS[owner]}",
        "content-type": f"multipart/form-data; boundary={BOUNDARY.decode()}",
    }
    if declared is not None:
        headers["content-length"] = str(declared)
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/tasks", "raw_path": b"/v1/tasks", "query_string": b"", "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    await app(scope, receive, send)
    return sent


class Stall:
    """A body that stops after `after` bytes of its file: `reached` once the server has taken them and asks
    for more, and the body ends when `released` is set."""

    def __init__(self, after: int = 64 * KiB) -> None:
        self.after = after
        self.reached = asyncio.Event()
        self.released = asyncio.Event()


async def _file(size: int, stall: Stall | None = None) -> AsyncIterator[bytes]:
    """One file part of `size` bytes in 64 KiB blocks; with `stall`, the body stalls after `stall.after`
    bytes of it until released, and then ends without its closing boundary (a client that gave up)."""
    yield b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="files"; filename="big.bin"\r\n\r\n'
    sent = 0
    while True:
        if stall is not None and sent >= stall.after:
            stall.reached.set()
            await stall.released.wait()
            return
        if sent >= size:
            break
        block = min(64 * KiB, size - sent)
        yield b"x" * block
        sent += block
    yield b"\r\n--" + BOUNDARY + b"--\r\n"


async def _fields_only() -> AsyncIterator[bytes]:
    yield b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="title"\r\n\r\nx\r\n--' + BOUNDARY + b"--\r\n"


async def test_uploads_wait_beyond_the_gateways_budget_and_an_owners_share() -> None:
    app = _app()
    stall = Stall(after=600 * KiB)
    first = asyncio.create_task(_post(app, "alice", _file(600 * KiB, stall), declared=601 * KiB))
    await asyncio.wait_for(stall.reached.wait(), 10)  # it has read and booked its 600 KiB
    assert app.state.uploads.held == 600 * KiB

    mine = await _post(app, "alice", _file(200 * KiB), declared=200 * KiB)  # 800 KiB > alice's 700
    assert mine.status == 429 and mine.consumed <= 200 * KiB, mine.body
    assert mine.headers["retry-after"] == "5" and b"DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER" in mine.body

    others = await _post(app, "bob", _file(500 * KiB), declared=500 * KiB)  # 1,100 KiB > the gateway's 1,024
    assert others.status == 503 and others.consumed <= 500 * KiB, others.body
    assert others.headers["retry-after"] == "5" and b"DOCSUM_UPLOAD_INFLIGHT_BYTES" in others.body
    assert b"alice" not in others.body and b"600" not in others.body  # nothing told of another's upload

    fits = await _post(app, "bob", _fields_only(), declared=300 * KiB)
    assert fits.status == 400 and b"no files" in fits.body  # past the budget, refused for what it is
    assert app.state.uploads.held == 600 * KiB  # what the refused ones booked given back

    stall.released.set()
    gave_up = await first
    assert gave_up.status == 400
    assert app.state.uploads.held == 0 and app.state.uploads.by_owner == {}


async def test_a_declared_length_books_nothing_until_its_bytes_arrive() -> None:
    app = _app()
    silent = [Stall(after=0) for _ in range(4)]
    squatters = [
        asyncio.create_task(_post(app, owner, _file(256 * KiB, stall), declared=256 * KiB))
        for owner, stall in zip(["alice", "alice", "bob", "bob"], silent, strict=True)
    ]
    await asyncio.wait_for(asyncio.gather(*(s.reached.wait() for s in silent)), 10)
    assert app.state.uploads.held == 0  # four requests declaring the whole budget (4 x 256 KiB), none sent
    with pytest.raises(AssertionError, match="the database or broker was reached"):  # past the budget
        await _post(app, "bob", _file(60), declared=200)
    for stall in silent:
        stall.released.set()
    assert {s.status for s in await asyncio.gather(*squatters)} == {400}
    assert app.state.uploads.held == 0


async def test_a_body_that_stops_arriving_is_dropped_and_gives_back_what_it_booked() -> None:
    app = _app(idle_s=0.2)
    stall = Stall(after=300 * KiB)
    quiet = await _post(app, "alice", _file(600 * KiB, stall), declared=600 * KiB)  # never released
    assert quiet.status == 408 and b"DOCSUM_UPLOAD_IDLE_S" in quiet.body, quiet.body
    assert quiet.headers["connection"] == "close"
    assert app.state.uploads.held == 0 and app.state.uploads.by_owner == {}


async def test_a_body_without_length_books_its_blocks_as_they_come() -> None:
    app = _app()
    cut = await _post(app, "alice", _file(900 * KiB), declared=None)
    assert cut.status == 429, cut.body
    assert 700 * KiB - 64 * KiB < cut.consumed <= 700 * KiB + 64 * KiB  # stopped at alice's share
    assert app.state.uploads.held == 0
