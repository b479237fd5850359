"""The gateway's stage of the pipeline: its routes publish what users submit and ask for (document-
submitted, task-events, and their re-drives); its progress recorder reads every pipeline topic into
each task's progress log (progress/recorder/), whose old entries its loop prunes; its other loop sends
the webhooks' deliveries (webhooks/delivery.py). Its front is the
application (app.py): served by `__main__` with the recorder on Kafka, or mounted by the in-process
runner on its bus (the plan names it: the application wires this stage, not the other way)."""

from __future__ import annotations

import asyncio

import asyncpg

from docsum_shared.consumer import Background
from docsum_shared.handlers import Publish
from docsum_shared.redrive import REDRIVES
from docsum_shared.stage import Stage

from .progress.recorder.handlers import Deps, handlers
from .progress.recorder.pruning import prune_until
from .progress.recorder.repository import ProgressLog
from .routers.tasks import GATEWAY
from .settings import GatewaySettings
from .webhooks.delivery import deliver_until
from .webhooks.pruning import prune_until as prune_deliveries_until


def deps(settings: GatewaySettings, pool: asyncpg.Pool) -> Deps:
    return Deps(ProgressLog(pool, settings))


def loops(settings: GatewaySettings, pool: asyncpg.Pool, deps: Deps) -> Background:
    async def run(publish: Publish) -> None:  # publishes nothing: ends when cancelled
        stop = asyncio.Event()
        await asyncio.gather(
            prune_until(stop, pool, settings.progress_retain_s, settings.idempotency_key_ttl_s),
            deliver_until(stop, pool, settings),
            prune_deliveries_until(stop, pool, settings),
        )

    return run


STAGE = Stage(
    "gateway",
    GatewaySettings,
    handlers,
    deps,
    loops=loops,
    senders=(GATEWAY, REDRIVES),
)
