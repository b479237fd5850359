"""A task's progress as it happens: its progress log, over SSE (`GET /v1/tasks/{task_id}/events` with
`Accept: text/event-stream`) or a WebSocket (the same path).

Both start with a snapshot — the task as GET /v1/tasks/{task_id} shows it, plus `progress_seq`, the
number of the log's last entry when it was taken — then deliver the log's entries after a point: the
`Last-Event-ID` header (SSE, what EventSource sends when it reconnects) or `?after=N`, from the first
entry when neither is given. Each entry is one step of the task ({"seq": 7, "kind": "chunk-summarized",
"document_id": ..., "percent": 42.5, "eta_s": ..., "usage": {...}, "documents": [...]}) numbered per task
(SSE: its `id:`), so a client that reconnects with the last number it saw loses nothing and repeats
nothing. The stream ends after the task's end (`task-done`, `cancelled`, `expired`). Idle streams get a
heartbeat every DOCSUM_PROGRESS_HEARTBEAT_S: an SSE comment line, a WebSocket ping.

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
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from fastapi import APIRouter, Header, HTTPException, Query, Request, WebSocket, WebSocketDisconnect, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from docsum_shared.readmodel import queries, views
from docsum_shared.states import TASK_FINAL

from .. import keystore
from ..deps import OwnerDep, PoolDep, SettingsDep, TaskIdDep, owner_of
from ..inputs import is_task_id
from ..progress import ProgressFeed
from ..recorder import repository
from ..recorder.policy import TERMINAL_KINDS
from ..responses import errors
from ..security import TICKET_PREFIX, Tickets, bearer_token

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

SUBPROTOCOL = "docsum"
BEARER_SUBPROTOCOL = "bearer."
SSE = "text/event-stream"


class Ticket(BaseModel):
    ticket: str  # for one stream connection to this task: ?ticket= (SSE, WebSocket) or subprotocol "bearer.<ticket>"
    expires_in_s: float


@router.post(
    "/{task_id}/ticket",
    status_code=status.HTTP_201_CREATED,
    response_model=Ticket,
    responses=errors(401, 404, 422),
    description="A ticket for one connection to `/v1/tasks/{task_id}/events`, for clients that cannot send"
    " an Authorization header (browsers): `?ticket=<ticket>` (SSE or WebSocket), or the WebSocket"
    " subprotocols `docsum` and `bearer.<ticket>`. It expires after `expires_in_s` seconds and is good for"
    " one connection.",
)
async def ticket(request: Request, owner: OwnerDep, task_id: TaskIdDep, pool: PoolDep, settings: SettingsDep) -> Ticket:
    if not await queries.owns(pool, owner, task_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    tickets: Tickets = request.app.state.tickets
    return Ticket(ticket=tickets.issue(owner, task_id), expires_in_s=settings.ws_ticket_ttl_s)


async def _caller(websocket: WebSocket, task_id: str) -> tuple[str | None, str | None]:
    """(owner, subprotocol to answer) from the header, a subprotocol, a ticket or a token, in that order."""
    app = websocket.app
    keys: dict[str, str] = app.state.api_keys
    pool: asyncpg.Pool = app.state.pool
    tickets: Tickets = app.state.tickets
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    answer = SUBPROTOCOL if SUBPROTOCOL in offered else None
    token = bearer_token(websocket.headers.get("authorization"))
    if token is not None:
        return await owner_of(keys, pool, token), answer
    for protocol in offered:
        if protocol.lower().startswith(BEARER_SUBPROTOCOL):
            credential = protocol[len(BEARER_SUBPROTOCOL) :]
            if credential.startswith(TICKET_PREFIX + "."):
                return await _redeem(keys, pool, tickets, credential, task_id), answer
            return await owner_of(keys, pool, credential), answer
    if ticket := websocket.query_params.get("ticket"):
        return await _redeem(keys, pool, tickets, ticket, task_id), answer
    if token := websocket.query_params.get("token"):
        return await owner_of(keys, pool, token), answer
    return None, answer


async def _redeem(keys: dict[str, str], pool: asyncpg.Pool, tickets: Tickets, ticket: str, task_id: str) -> str | None:
    owner = tickets.redeem(ticket, task_id)
    if owner is None:
        return None
    # A ticket dies with its owner's keys: one in DOCSUM_API_KEYS, or a stored one not revoked.
    return owner if owner in keys.values() or await keystore.has_live_key(pool, owner) else None


# --------------------------------------------------------------------------------------------------
# The stream both transports send: a snapshot, then the log's entries, then the end


async def _snapshot(app: Any, owner: str, task_id: str) -> dict[str, Any] | None:
    head = await repository.head(app.state.pool, task_id)  # first: the view shows at least what it numbers
    view = await views.task_view(app.state.pool, app.state.settings, owner, task_id)
    if view is None:
        return None
    return {**json.loads(view.model_dump_json()), "progress_seq": head}


async def _over(app: Any, task_id: str, seen: int) -> bool:
    """The task is final and the client has seen its last entry, its end (or the task has no log)."""
    task_status, last, kind = await repository.stream_state(app.state.pool, task_id)
    if task_status is None:
        return True
    return task_status in TASK_FINAL and (last == 0 or (seen >= last and kind in TERMINAL_KINDS))


async def _entries(app: Any, task_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
    """Batches of entries after `after` until the task is over; [] for a heartbeat."""
    feed: ProgressFeed = app.state.progress
    if await _over(app, task_id, after):
        return
    async for batch in feed.follow(task_id, after):
        if not batch:
            yield []
            continue
        yield [entry.payload() for entry in batch]
        after = batch[-1].seq
        if batch[-1].body.get("kind") in TERMINAL_KINDS and await _over(app, task_id, after):
            return


def _last_event_id(value: str | None) -> int | None:
    """The number EventSource sends back; anything else (no number) is as if none were sent."""
    text = (value or "").strip()
    return int(text) if text.isdigit() else None


def _accepts_sse(accept: str | None) -> bool:
    """The client asks for an event stream by name (EventSource always does): a client that accepts
    anything (`*/*`) may not expect a response that never ends."""
    return any(part.split(";")[0].strip().lower() == SSE for part in (accept or "").split(","))


def _sse(event: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@router.get(
    "/{task_id}/events",
    responses={200: {"content": {SSE: {}}, "description": "An SSE stream: `snapshot`, then `progress` events"},
               **errors(401, 404, 406, 422)},
    response_class=StreamingResponse,
    description="The task's progress as Server-Sent Events: `event: snapshot` (the task, plus `progress_seq`),"
    " then one `event: progress` per entry of its progress log (`id:` its number), from `Last-Event-ID`"
    " or `?after=N`; a comment line every DOCSUM_PROGRESS_HEARTBEAT_S while idle; the stream ends after"
    " the task's end. Authenticate with the header, or `?ticket=` (POST /v1/tasks/{task_id}/ticket).",
)  # fmt: skip
async def task_event_stream(
    request: Request,
    task_id: str,
    after: int = Query(0, ge=0, description="deliver the entries after this number (Last-Event-ID wins)"),
    last_event_id: str | None = Header(None, description="what EventSource sends when it reconnects"),
) -> StreamingResponse:
    app = request.app
    token = bearer_token(request.headers.get("authorization"))
    ticket = request.query_params.get("ticket")
    if token is not None:
        owner = await owner_of(app.state.api_keys, app.state.pool, token)
    elif ticket and is_task_id(task_id):
        owner = await _redeem(app.state.api_keys, app.state.pool, app.state.tickets, ticket, task_id)
    else:
        owner = None
    if owner is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API key (Authorization: Bearer <key>) or ticket (?ticket=) is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    resumed = _last_event_id(last_event_id)
    start = resumed if resumed is not None else after
    snapshot = await _snapshot(app, owner, task_id) if is_task_id(task_id) else None
    if snapshot is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    if not _accepts_sse(request.headers.get("accept")):
        raise HTTPException(status.HTTP_406_NOT_ACCEPTABLE, f"this is an event stream: send Accept: {SSE}")

    async def stream() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n" + _sse("snapshot", snapshot)
        async for batch in _entries(app, task_id, start):
            if not batch:
                yield b": heartbeat\n\n"
            for entry in batch:
                yield _sse("progress", entry, entry["seq"])

    # No proxy may buffer or transform the stream (nginx reads X-Accel-Buffering).
    headers = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type=SSE, headers=headers)


@router.websocket("/{task_id}/events")
async def task_events(websocket: WebSocket, task_id: str) -> None:
    app = websocket.app
    owner, subprotocol = await _caller(websocket, task_id) if is_task_id(task_id) else (None, None)
    if owner is None or not await queries.owns(app.state.pool, owner, task_id):
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
        return
    after = websocket.query_params.get("after", "0").strip()
    if not after.isdigit():
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="after must be a number")
        return
    start = int(after)
    await websocket.accept(subprotocol=subprotocol)
    try:
        snapshot = await _snapshot(app, owner, task_id)
        if snapshot is None:  # gone since the check above (nothing deletes tasks today)
            await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
            return
        await websocket.send_json(snapshot)
        async for batch in _entries(app, task_id, start):
            for entry in batch:  # heartbeats are the server's WebSocket pings (uvicorn's ws_ping_interval)
                await websocket.send_json(entry)
    except WebSocketDisconnect:
        pass
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(websocket.close(), timeout=1)
