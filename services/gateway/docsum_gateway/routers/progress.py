"""WS /v1/tasks/{task_id}/events: a task's progress as it happens.

The first message is the task as GET /v1/tasks/{task_id} shows it; then one message per pipeline
event of the task ({"event": "chunk-summarized", "document_id": ..., ...}); the server closes the
socket after the task reaches a final status. Authenticate with the usual `Authorization: Bearer`
header, or `?token=` where a client cannot set headers (browsers).
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, WebSocket, WebSocketDisconnect, status

from docsum_shared.events import TOPIC_OF, TaskEvent
from docsum_shared.states import TASK_FINAL

from .. import repository, views
from ..security import owner_for

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


@router.websocket("/{task_id}/events")
async def task_events(websocket: WebSocket, task_id: str) -> None:
    app = websocket.app
    header = websocket.headers.get("authorization", "")
    token = (
        header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else websocket.query_params.get("token")
    )
    owner = owner_for(app.state.api_keys, token) if token else None
    if owner is None or not await repository.owns(app.state.pool, owner, task_id):
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="unknown task or bad API key")
        return
    await websocket.accept()
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
