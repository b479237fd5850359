"""The merger's stage of the pipeline: chunk-summarized, document-merged and task-events in, the
summaries merged and the task finished; expiry and reconcile beside it (maintenance.py)."""

from __future__ import annotations

import asyncpg

from docsum_llm import Summarizing
from docsum_shared.consumer import Background
from docsum_shared.redrive import REDRIVES
from docsum_shared.stage import Stage

from .handlers import Deps, handlers
from .maintenance import EXPIRY, maintain_forever
from .repository import MergeRepository
from .settings import MergerSettings


def deps(settings: MergerSettings, pool: asyncpg.Pool) -> Deps:
    # Its calls take no admission's slot: each is charged to its owner's share as it is answered, so that
    # work split over many tasks, each with merges of its own, costs its owner what it was served.
    return Deps(MergeRepository(pool, settings), Summarizing.from_settings(settings, pool, charged=True), settings)


def maintenance(settings: MergerSettings, pool: asyncpg.Pool, deps: Deps) -> Background:
    """Expiry and reconcile run beside the merger (one process at a time, under a database lock)."""
    return lambda publish: maintain_forever(pool, publish, settings)


async def close(deps: Deps) -> None:
    if isinstance(deps.llm, Summarizing):  # the LLM client `deps` built: its connections
        await deps.llm.aclose()


STAGE = Stage("merger", MergerSettings, handlers, deps, loops=maintenance, senders=(EXPIRY, REDRIVES), close=close)
