"""A task's progress as it happens: its progress log, over SSE (`GET /v1/tasks/{task_id}/events` with
`Accept: text/event-stream`) or a WebSocket (the same path).

Both start with a snapshot — the task as GET /v1/tasks/{task_id} shows it, plus `progress_seq`, the
number of the log's last entry when it was taken — then deliver the log's entries after a point: the
`Last-Event-ID` header (SSE, what EventSource sends when it reconnects) or `?after=N` (up to 18 digits;
anything else is a 400, or a WebSocket policy close), from the first entry when neither is given. Each
entry is one step of the task ({"seq": 7, "kind": "chunk-summarized", "document_id": ..., "percent":
42.5, "eta_s": ..., "usage": {...}, "documents": [...]}) numbered per task (SSE: its `id:`), so a client
that reconnects with the last number it saw loses nothing and repeats nothing. An entry's `documents`
holds only the documents whose state it changed: the snapshot's documents, updated by each entry's,
are the task's documents now. The stream ends after the task's end (`task-done`, `cancelled`,
`expired`), or when the key it was opened with (or the ticket's) is revoked. Idle streams get a
heartbeat every DOCSUM_PROGRESS_HEARTBEAT_S: an SSE comment line, a WebSocket ping. A WebSocket client
sends nothing: one that sends a message is closed (1008; 1009 past DOCSUM_WS_MAX_MESSAGE_BYTES), and one
that leaves frees its stream at once, though nothing was being sent to it.

Streams are capped per owner and per gateway (DOCSUM_PROGRESS_STREAMS_PER_OWNER, _MAX): beyond, SSE
answers 429 and a WebSocket is closed with 1013 (try again later), each with the reason. A client
that takes nothing of what was sent for DOCSUM_PROGRESS_STALL_S is dropped: what a stream holds for a
client that does not read is one batch of entries (DOCSUM_PROGRESS_BATCH_BYTES) and the socket's buffer.

Authenticate with the usual `Authorization: Bearer <key>` header (the scheme in any case). A client
that cannot set headers (a browser: EventSource and WebSocket cannot) asks `POST
/v1/tasks/{task_id}/ticket` for a ticket, good for one connection within DOCSUM_WS_TICKET_TTL_S
seconds, and sends it as `?ticket=` (SSE and WebSocket) or as the WebSocket subprotocol
`bearer.<ticket>` beside `docsum` (`new WebSocket(url, ["docsum", "bearer." + ticket])`: the server
answers `docsum`). A WebSocket also takes a subprotocol `bearer.<key>` and `?token=<key>`; the gateway
never writes a query string's credentials to its log, but a URL carrying a key may be kept by whatever
else sees it (proxies, browser history), so a ticket is the better choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Query, Request, WebSocket, WebSocketDisconnect, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.types import Message, Receive, Scope, Send

from docsum_shared.readmodel import queries, views
from docsum_shared.scope import Scope as TaskScope
from docsum_shared.states import TASK_FINAL

from .. import keystore
from ..deps import PoolDep, ScopeDep, SettingsDep, TaskIdDep, owner_of
from ..inputs import is_task_id
from ..progress.recorder import repository
from ..progress.recorder.policy import TERMINAL_KINDS
from ..progress.recorder.repository import Logged
from ..progress.streams import KeyRevoked, ProgressFeed, Stream, StreamsFull
from ..responses import errors
from ..security import TICKET_PREFIX, Tickets, bearer_token, revocable_key_id
from ..settings import GatewaySettings

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])
log = logging.getLogger(__name__)

SUBPROTOCOL = "docsum"
BEARER_SUBPROTOCOL = "bearer."
SSE = "text/event-stream"
# A log position: what a client sends back. 18 digits always fit PostgreSQL's bigint.
_POSITION = re.compile(r"[0-9]{1,18}")
# What the OpenAPI schema says of it; checked by log_position (a 400 naming it), not by FastAPI (a 422).
POSITION_SCHEMA: dict[str, Any] = {"pattern": "^[0-9]{0,18}$"}
# How soon a client refused for the caps should try again.
RETRY_AFTER_S = 10


class Ticket(BaseModel):
    ticket: str  # for one stream connection to this task: ?ticket= (SSE, WebSocket) or subprotocol "bearer.<ticket>"
    expires_in_s: float


@dataclass(frozen=True)
class Caller:
    owner: str
    key_id: str | None  # the stored key behind the credential: revoking it ends the stream


@router.post(
    "/{task_id}/ticket",
    status_code=status.HTTP_201_CREATED,
    response_model=Ticket,
    responses=errors(401, 404, 422),
    description="A ticket for one connection to `/v1/tasks/{task_id}/events`, for clients that cannot send"
    " an Authorization header (browsers): `?ticket=<ticket>` (SSE or WebSocket), or the WebSocket"
    " subprotocols `docsum` and `bearer.<ticket>`. It expires after `expires_in_s` seconds and is good for"
    " one connection, on any gateway replica.",
)
async def ticket(request: Request, scope: ScopeDep, task_id: TaskIdDep, pool: PoolDep, settings: SettingsDep) -> Ticket:
    if not await queries.owns(pool, scope, task_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    tickets: Tickets = request.app.state.tickets
    token = bearer_token(request.headers.get("authorization")) or ""
    key_id = revocable_key_id(request.app.state.api_keys, token)
    return Ticket(ticket=tickets.issue(scope.owner, task_id, key_id=key_id), expires_in_s=settings.ws_ticket_ttl_s)


async def _with_key(app: Any, token: str) -> Caller | None:
    owner = await owner_of(app.state.api_keys, app.state.pool, token)
    return Caller(owner, revocable_key_id(app.state.api_keys, token)) if owner is not None else None


async def _caller(websocket: WebSocket, task_id: str) -> tuple[Caller | None, str | None]:
    """(the caller, subprotocol to answer) from the header, a subprotocol, a ticket or a token, in that order."""
    app = websocket.app
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    answer = SUBPROTOCOL if SUBPROTOCOL in offered else None
    token = bearer_token(websocket.headers.get("authorization"))
    if token is not None:
        return await _with_key(app, token), answer
    for protocol in offered:
        if protocol.lower().startswith(BEARER_SUBPROTOCOL):
            credential = protocol[len(BEARER_SUBPROTOCOL) :]
            if credential.startswith(TICKET_PREFIX + "."):
                return await _redeem(app, credential, task_id), answer
            return await _with_key(app, credential), answer
    if ticket := websocket.query_params.get("ticket"):
        return await _redeem(app, ticket, task_id), answer
    if token := websocket.query_params.get("token"):
        return await _with_key(app, token), answer
    return None, answer


async def _redeem(app: Any, ticket: str, task_id: str) -> Caller | None:
    tickets: Tickets = app.state.tickets
    claim = tickets.claim(ticket, task_id)
    if claim is None:
        return None
    pool, keys = app.state.pool, app.state.api_keys
    # A ticket dies with the stored key it was issued with; one issued with a key of DOCSUM_API_KEYS,
    # with its owner's keys (one in DOCSUM_API_KEYS, or a stored one not revoked).
    if claim.key_id is not None:
        live = claim.key_id in await keystore.live_key_ids(pool, [claim.key_id])
    else:
        live = claim.owner in keys.values() or await keystore.has_live_key(pool, claim.owner)
    # One connection per ticket, whichever replica it reaches, before or after a restart.
    if not live or not await keystore.use_ticket(pool, claim.nonce, claim.expires):
        return None
    return Caller(claim.owner, claim.key_id)


# --------------------------------------------------------------------------------------------------
# The stream both transports send: a snapshot, then the log's entries, then the end


def _scope(app: Any, owner: str) -> TaskScope:
    """The owner's tasks in this gateway's deployment: what a stream may follow."""
    return TaskScope(app.state.settings.deployment, owner)


async def _snapshot(app: Any, owner: str, task_id: str) -> dict[str, Any] | None:
    head = await repository.head(app.state.pool, task_id)  # first: the view shows at least what it numbers
    view = await views.task_view(app.state.pool, app.state.settings, _scope(app, owner), task_id)
    if view is None:
        return None
    return {**json.loads(view.model_dump_json()), "progress_seq": head}


async def _over(app: Any, task_id: str, seen: int) -> bool:
    """The task is final and the client has seen its last entry, its end (or the task has no log: none
    yet, or pruned long after the task ended)."""
    task_status, last, kind = await repository.stream_state(app.state.pool, task_id)
    if task_status is None:
        return True
    return task_status in TASK_FINAL and (kind is None or (seen >= last and kind in TERMINAL_KINDS))


async def _entries(app: Any, stream: Stream, after: int) -> AsyncIterator[list[Logged]]:
    """Batches of entries after `after` until the task is over; [] for a heartbeat. KeyRevoked when
    the stream's key is revoked."""
    feed: ProgressFeed = app.state.progress
    settings: GatewaySettings = app.state.settings
    if await _over(app, stream.task_id, after):
        return
    async for batch in feed.follow(stream, after, settings.progress_batch_bytes):
        yield batch
        if batch and batch[-1].kind in TERMINAL_KINDS and await _over(app, stream.task_id, batch[-1].seq):
            return


def log_position(value: str | None) -> int | None:
    """A log position a client sent (Last-Event-ID, ?after=): None when none was sent, ValueError for
    anything but up to 18 ASCII digits (`'²'.isdigit()` is true, and bigint ends at 19 digits)."""
    text = (value or "").strip()
    if not text:
        return None
    if not _POSITION.fullmatch(text):
        raise ValueError("must be a number of at most 18 digits (the last entry number the client saw)")
    return int(text)


def _open(app: Any, caller: Caller, task_id: str) -> Stream:
    """A stream under the caps; StreamsFull beyond them."""
    settings: GatewaySettings = app.state.settings
    feed: ProgressFeed = app.state.progress
    per_owner, most = settings.progress_streams_per_owner, settings.progress_streams_max
    return feed.open(caller.owner, task_id, caller.key_id, per_owner=per_owner, most=most)


def _accepts_sse(accept: str | None) -> bool:
    """The client asks for an event stream by name (EventSource always does): a client that accepts
    anything (`*/*`) may not expect a response that never ends."""
    return any(part.split(";")[0].strip().lower() == SSE for part in (accept or "").split(","))


def _sse(event: str, data: str, seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


class _Stalled(Exception):
    """The client took nothing of what was sent for DOCSUM_PROGRESS_STALL_S."""


class ProgressResponse(StreamingResponse):
    """An SSE stream that gives up on a client that stops reading, and gives its slot back however
    it ends (the body may never be started if the client leaves first)."""

    def __init__(
        self, content: AsyncIterator[bytes], *, stall_s: float, release: Callable[[], None], **kw: Any
    ) -> None:
        super().__init__(content, **kw)
        self.stall_s, self.release = stall_s, release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded(message: Message) -> None:
            # The server waits for the socket to drain before it writes more: a client that does not
            # read makes this wait, and holds no more than the socket's buffer meanwhile.
            try:
                await asyncio.wait_for(send(message), self.stall_s)
            except TimeoutError:
                raise _Stalled from None

        try:
            await super().__call__(scope, receive, bounded)
        except _Stalled:
            log.info("progress stream dropped: the client took nothing for %gs", self.stall_s)
        finally:
            self.release()


@router.get(
    "/{task_id}/events",
    responses={200: {"content": {SSE: {}}, "description": "An SSE stream: `snapshot`, then `progress` events"},
               **errors(400, 401, 404, 406, 422, 429)},
    response_class=StreamingResponse,
    description="The task's progress as Server-Sent Events: `event: snapshot` (the task, plus `progress_seq`),"
    " then one `event: progress` per entry of its progress log (`id:` its number; `documents`: those the"
    " entry changed), from `Last-Event-ID` or `?after=N`; a comment line every DOCSUM_PROGRESS_HEARTBEAT_S"
    " while idle; the stream ends after the task's end, or when its key is revoked. Authenticate with the"
    " header, or `?ticket=` (POST /v1/tasks/{task_id}/ticket). 429 (with Retry-After) beyond the open"
    " streams allowed per owner or per gateway.",
)  # fmt: skip
async def task_event_stream(
    request: Request,
    task_id: str,
    # Strings that default to "" rather than optional ones: null is no position a client can send.
    after: str = Query(
        "", description="deliver the entries after this number (Last-Event-ID wins)", json_schema_extra=POSITION_SCHEMA
    ),
    last_event_id: str = Header(
        "", description="what EventSource sends when it reconnects", json_schema_extra=POSITION_SCHEMA
    ),
) -> StreamingResponse:
    app = request.app
    settings: GatewaySettings = app.state.settings
    token = bearer_token(request.headers.get("authorization"))
    ticket = request.query_params.get("ticket")
    if token is not None:
        caller = await _with_key(app, token)
    elif ticket and is_task_id(task_id):
        caller = await _redeem(app, ticket, task_id)
    else:
        caller = None
    if caller is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API key (Authorization: Bearer <key>) or ticket (?ticket=) is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        resumed, asked = log_position(last_event_id), log_position(after)
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"Last-Event-ID and after: {exc}") from None
    start = resumed if resumed is not None else (asked or 0)
    snapshot = await _snapshot(app, caller.owner, task_id) if is_task_id(task_id) else None
    if snapshot is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    if not _accepts_sse(request.headers.get("accept")):
        raise HTTPException(status.HTTP_406_NOT_ACCEPTABLE, f"this is an event stream: send Accept: {SSE}")
    try:
        stream = _open(app, caller, task_id)
    except StreamsFull as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": str(RETRY_AFTER_S)}
        ) from None

    async def events() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n" + _sse("snapshot", json.dumps(snapshot, ensure_ascii=False))
        try:
            async for batch in _entries(app, stream, start):
                if not batch:
                    yield b": heartbeat\n\n"
                for entry in batch:
                    yield _sse("progress", entry.text, entry.seq)
        except KeyRevoked:
            yield _sse("revoked", json.dumps({"detail": "the API key this stream was opened with was revoked"}))

    # No proxy may buffer or transform the stream (nginx reads X-Accel-Buffering).
    headers = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
    release = functools.partial(app.state.progress.close, stream)
    return ProgressResponse(
        events(), stall_s=settings.progress_stall_s, release=release, media_type=SSE, headers=headers
    )


@router.websocket("/{task_id}/events")
async def task_events(websocket: WebSocket, task_id: str) -> None:
    app = websocket.app
    settings: GatewaySettings = app.state.settings
    caller, subprotocol = await _caller(websocket, task_id) if is_task_id(task_id) else (None, None)
    if caller is None or not await queries.owns(app.state.pool, _scope(app, caller.owner), task_id):
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
        return
    try:
        start = log_position(websocket.query_params.get("after")) or 0
    except ValueError as exc:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=f"after {exc}")
        return
    await websocket.accept(subprotocol=subprotocol)
    try:
        stream = _open(app, caller, task_id)
    except StreamsFull as exc:
        await websocket.close(code=status.WS_1013_TRY_AGAIN_LATER, reason=str(exc))
        return
    try:
        await _first_to_end(
            _serve_websocket(websocket, stream, start, settings.progress_stall_s), _read_client(websocket)
        )
    finally:
        app.state.progress.close(stream)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(websocket.close(), timeout=1)


async def _first_to_end(*work: Coroutine[Any, Any, None]) -> None:
    """Run `work` side by side until one of them ends (or fails); the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()  # an error of the one that ended is the route's


async def _read_client(websocket: WebSocket) -> None:
    """Returns when the client leaves, or after closing a client that sends a message. The stream only
    sends; reading the client is how a client that left is noticed while nothing is sent (a paused task,
    one awaiting approval), and keeps the server from holding a message it queued for the route
    (DOCSUM_WS_MAX_MESSAGE_BYTES caps it: a longer one closes the connection with 1009)."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return
    reason = "this stream only sends: send nothing on it (reconnect with ?after= to resume)"
    await asyncio.wait_for(websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=reason), 1)


async def _serve_websocket(websocket: WebSocket, stream: Stream, start: int, stall_s: float) -> None:
    app = websocket.app
    try:
        snapshot = await _snapshot(app, stream.owner, stream.task_id)
        if snapshot is None:  # gone since the check above (nothing deletes tasks today)
            await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
            return
        await asyncio.wait_for(websocket.send_text(json.dumps(snapshot, ensure_ascii=False)), stall_s)
        async for batch in _entries(app, stream, start):
            for entry in batch:  # heartbeats are the server's WebSocket pings (uvicorn's ws_ping_interval)
                await asyncio.wait_for(websocket.send_text(entry.text), stall_s)
    except KeyRevoked:
        reason = "the API key this stream was opened with was revoked"
        await asyncio.wait_for(websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=reason), 1)
    except TimeoutError:
        log.info("progress stream dropped: the client took nothing for %gs", stall_s)
    except WebSocketDisconnect:
        pass
