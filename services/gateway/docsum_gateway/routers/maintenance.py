"""/v1/reconcile: re-drive the caller's unfinished tasks from Postgres (what start-up recovery does)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from docsum_shared.lifecycle import idle_unfinished
from docsum_shared.redrive import redrive_task

from ..deps import OwnerDep, PoolDep, ProducerDep, SettingsDep
from ..responses import errors

router = APIRouter(prefix="/v1", tags=["maintenance"])


class ReconcileResult(BaseModel):
    tasks: list[str]
    redriven_events: int


@router.post("/reconcile", response_model=ReconcileResult, responses=errors(401))
async def reconcile(owner: OwnerDep, pool: PoolDep, producer: ProducerDep, settings: SettingsDep) -> ReconcileResult:
    tasks = await idle_unfinished(pool, 0.0, owner)
    published = 0
    for task_id in tasks:
        published += await redrive_task(pool, producer, settings, task_id)
    return ReconcileResult(tasks=tasks, redriven_events=published)
