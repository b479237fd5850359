"""The gateway's stage of the pipeline: its routes publish what users submit and ask for (document-
submitted, task-events, and their re-drives); its progress recorder reads every pipeline topic into
each task's progress log (progress/recorder/). Served by the application (app.py), beside the API."""

from __future__ import annotations

import asyncpg

from docsum_shared.pipeline.stage import Stage
from docsum_shared.redrive import REDRIVES

from .progress.recorder.handlers import Deps, handlers
from .progress.recorder.repository import ProgressLog
from .routers.tasks import GATEWAY
from .settings import GatewaySettings


def deps(settings: GatewaySettings, pool: asyncpg.Pool) -> Deps:
    return Deps(ProgressLog(pool, settings))


STAGE = Stage("gateway", GatewaySettings, handlers, deps, senders=(GATEWAY, REDRIVES))
