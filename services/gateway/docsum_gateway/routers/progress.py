"""WS /v1/tasks/{task_id}/events: a task's progress as it happens.

The first message is the task as GET /v1/tasks/{task_id} shows it; then one message per pipeline
event of the task ({"event": "chunk-summarized", "document_id": ..., ...}); the server closes the
socket after the task reaches a final status.

Authenticate with the usual `Authorization: Bearer <key>` header (the scheme in any case). A client
that cannot set headers (a browser) asks `POST /v1/tasks/{task_id}/ticket` for a ticket, good for one
connection within DOCSUM_WS_TICKET_TTL_S seconds, and sends it as the subprotocol `bearer.<ticket>`
beside `docsum` (`new WebSocket(url, ["docsum", "bearer." + ticket])`: the server answers `docsum`)
or as `?ticket=`. A subprotocol `bearer.<key>` and `?token=<key>` work too; the gateway never writes
a query string's credentials to its log, but a URL carrying a key may be kept by whatever else sees
it (proxies, browser history), so a ticket is the better choice.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
from fastapi import APIRouter, HTTPException, Request, WebSocket, WebSocketDisconnect, status
from pydantic import BaseModel

from docsum_shared.events import TOPIC_OF, TaskEvent
from docsum_shared.readmodel import queries, views
from docsum_shared.states import TASK_FINAL

from .. import keystore
from ..deps import OwnerDep, PoolDep, SettingsDep, TaskIdDep, owner_of
from ..inputs import is_task_id
from ..responses import errors
from ..security import TICKET_PREFIX, Tickets, bearer_token

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])

SUBPROTOCOL = "docsum"
BEARER_SUBPROTOCOL = "bearer."


class Ticket(BaseModel):
    ticket: str  # for one WebSocket connection to this task: subprotocol "bearer.<ticket>" or ?ticket=
    expires_in_s: float


@router.post(
    "/{task_id}/ticket",
    status_code=status.HTTP_201_CREATED,
    response_model=Ticket,
    responses=errors(401, 404, 422),
    description="A ticket for one WebSocket connection to `/v1/tasks/{task_id}/events`, for clients that"
    " cannot send an Authorization header (browsers): subprotocols `docsum` and `bearer.<ticket>`, or"
    " `?ticket=<ticket>`. It expires after `expires_in_s` seconds and is good for one connection.",
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


@router.websocket("/{task_id}/events")
async def task_events(websocket: WebSocket, task_id: str) -> None:
    app = websocket.app
    owner, subprotocol = await _caller(websocket, task_id) if is_task_id(task_id) else (None, None)
    if owner is None or not await queries.owns(app.state.pool, owner, task_id):
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
        return
    await websocket.accept(subprotocol=subprotocol)
    queue = app.state.progress.watch(task_id)
    try:
        snapshot = await views.task_view(app.state.pool, app.state.settings, owner, task_id)
        if snapshot is None:  # gone since the check above (nothing deletes tasks today)
            await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
            return
        await websocket.send_text(snapshot.model_dump_json())
        if snapshot.status in TASK_FINAL:
            return
        while True:
            event = await queue.get()
            payload = {"event": str(TOPIC_OF[type(event)]), **event.model_dump(mode="json")}
            await websocket.send_json(payload)
            if isinstance(event, TaskEvent) and event.status in TASK_FINAL:
                return
    except WebSocketDisconnect:
        pass
    finally:
        app.state.progress.unwatch(task_id, queue)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(websocket.close(), timeout=1)
