"""/v1/reconcile: re-drive the caller's idle unfinished tasks from Postgres (what start-up recovery does);
and the gate every re-drive an owner asks for goes through (reconcile here, resume and retry in tasks.py).

A re-drive can publish one event per unfinished chunk of every task of the owner: thousands. So each
owner's re-drives pass a gate in PostgreSQL — one at a time across every gateway replica, at most
DOCSUM_REDRIVES_PER_MINUTE (GCRA, as for task creation), else 429 with Retry-After — and the request only
claims and counts the work: the events are published after the answer, in batches, while the gate
stays held. A re-drive a gateway could not finish (it stopped mid-way) is picked up by the merger's
reconcile once its tasks have been idle for DOCSUM_RECONCILE_IDLE_S.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import asyncpg
from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel

from docsum_shared.handlers import Publish
from docsum_shared.lifecycle import idle_unfinished
from docsum_shared.redrive import Redrive, prepare_redrive, publish_redrives
from docsum_shared.taskrate import Admission

from ..deps import OwnerDep, PoolDep, PublishDep, SettingsDep
from ..repository import Gate, RedriveGates, Running
from ..responses import ErrorBody, errors
from ..settings import GatewaySettings

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["maintenance"])

# How long a gate stays held without a sign of life from its re-drive (renewed after every batch).
GATE_LEASE_S = 60.0
# What a refused caller waits while another re-drive of the owner runs (they take a second or so).
RUNNING_RETRY_AFTER_S = 1

REDRIVE_REFUSED: dict[int | str, dict[str, Any]] = {
    429: {
        "model": ErrorBody,
        "description": "Another re-drive of yours is running, or you are over DOCSUM_REDRIVES_PER_MINUTE:"
        " try again after `Retry-After` seconds.",
        "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
    }
}


class ReconcileResult(BaseModel):
    tasks: list[str]  # the tasks claimed for this re-drive (idle and unfinished)
    redriven_events: int  # the events their re-drive publishes, in the background after this answer


async def claim_gate(pool: asyncpg.Pool, owner: str, settings: GatewaySettings) -> Gate:
    """Take the owner's re-drive gate, or answer 429 (another re-drive of the owner runs, or the rate)."""
    claimed = await RedriveGates(pool).claim(owner, settings.redrives_per_minute, GATE_LEASE_S)
    if isinstance(claimed, Running):
        raise _refused("another re-drive of your tasks is running", RUNNING_RETRY_AFTER_S)
    if isinstance(claimed, Admission):
        raise _refused(f"over {settings.redrives_per_minute} re-drives a minute", claimed.retry_after_s)
    return claimed


def _refused(why: str, retry_after_s: int) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"{why}; try again in {retry_after_s} s",
        headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))},
    )


async def release_gate(pool: asyncpg.Pool, gate: Gate) -> None:
    await RedriveGates(pool).release(gate)


# Re-drives publishing after their answer: referenced here so that the loop does not drop them.
_publishing: set[asyncio.Task[None]] = set()


def publish_after_answer(
    pool: asyncpg.Pool, publish: Publish, settings: GatewaySettings, gate: Gate, redrives: list[Redrive]
) -> None:
    """Publish the re-drives' events in batches once the request is answered, then release the gate."""

    async def run() -> None:
        try:
            await publish_redrives(publish, settings, redrives, lambda: RedriveGates(pool).renew(gate, GATE_LEASE_S))
        except Exception as exc:  # the claimed tasks stay idle: the merger's reconcile takes them up
            log.warning("re-drive of %s's tasks stopped before its end: %s", gate.owner, exc)
        finally:
            try:
                await release_gate(pool, gate)
            except Exception as exc:  # noqa: BLE001 - the gate's lease runs out by itself
                log.warning("could not release %s's re-drive gate (its lease runs out): %s", gate.owner, exc)

    task = asyncio.create_task(run())
    _publishing.add(task)
    task.add_done_callback(_publishing.discard)


@router.post("/reconcile", response_model=ReconcileResult, responses={**errors(401), **REDRIVE_REFUSED})
async def reconcile(owner: OwnerDep, pool: PoolDep, publish: PublishDep, settings: SettingsDep) -> ReconcileResult:
    """Re-drive your unfinished tasks that nothing moved for DOCSUM_REDRIVE_IDLE_S: their events are
    published after the answer (`redriven_events` says how many). Work that is moving (a chunk being
    summarized, a document or task active within that time) is left alone."""
    gate = await claim_gate(pool, owner, settings)
    try:
        redrives = []
        for task_id in await idle_unfinished(pool, settings.redrive_idle_s, owner, deployment=settings.deployment):
            redrive = await prepare_redrive(pool, settings, task_id, idle_s=settings.redrive_idle_s)
            if redrive is not None:  # else another re-drive took it meanwhile
                redrives.append(redrive)
    except BaseException:
        await release_gate(pool, gate)
        raise
    publish_after_answer(pool, publish, settings, gate, redrives)
    return ReconcileResult(tasks=[r.task_id for r in redrives], redriven_events=sum(len(r.events) for r in redrives))
