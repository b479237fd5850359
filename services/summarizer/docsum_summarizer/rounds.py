"""The round scheduler: chunks waiting for their next round (chunks.retry_at) are announced again when due.

A chunk whose attempts in place are spent (retry.py's Later) waits for its next round as a row in
Postgres, not as a sleeping handler: no consumer slot is held while it waits, and nothing on the wire
can make it wait longer than the configured delay. Every summarizer process runs one scheduler, for its
own deployment's chunks only (deployments may share a database, not topics); two announcing the same
chunk is harmless (the lease decides who calls).
"""

from __future__ import annotations

import logging
from typing import Protocol

from docsum_shared.events import ChunkCreated
from docsum_shared.handlers import Publish, Sender
from docsum_shared.retry import keep_running

from .repository import DueRound
from .settings import SummarizerSettings

log = logging.getLogger(__name__)
ROUND_SCHEDULER = Sender("the summarizer's round scheduler", emits=(ChunkCreated,))


class Rounds(Protocol):
    """What the scheduler reads and marks (the chunk repository's)."""

    async def due_rounds(self, limit: int) -> list[DueRound]: ...
    async def announced(self, due: list[DueRound]) -> None: ...


INTERVAL_S = 1.0
BATCH = 500


async def schedule_rounds(repo: Rounds, publish: Publish, settings: SummarizerSettings) -> None:
    """Announce the due chunks every second, until cancelled; the database or broker away: next time."""
    await keep_running("round scheduler", lambda: announce_due(repo, publish, settings), every_s=INTERVAL_S)


async def announce_due(repo: Rounds, publish: Publish, settings: SummarizerSettings) -> None:
    """Announce every chunk whose next round is due, BATCH at a time."""
    while due := await repo.due_rounds(BATCH):
        events = [
            ChunkCreated(task_id=r.task_id, document_id=r.document_id, chunk_id=r.chunk_id, chunk_index=r.chunk_index)
            for r in due
        ]
        await publish(events, sender=ROUND_SCHEDULER)
        await repo.announced(due)
        log.info("announced %d chunks due for their next round", len(due))
        if len(due) < BATCH:
            return
