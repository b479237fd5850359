"""The retry pump: chunks waiting for their next round (chunks.retry_at) are announced again when due.

The wait is a row in Postgres, not a sleeping handler: no consumer slot is held while a chunk waits,
and nothing on the wire can make a chunk wait longer than the configured delay. Every summarizer
process runs one; two announcing the same chunk is harmless (the lease decides who calls).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer

from docsum_shared.events import ChunkCreated
from docsum_shared.kafka import publish
from docsum_shared.settings import Settings

from .repository import ChunkRepository

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
BATCH = 500


async def pump_due_retries(repo: ChunkRepository, producer: AIOKafkaProducer, settings: Settings) -> None:
    while True:
        due = []
        try:
            due = await repo.due_retries(BATCH)
            if due:
                events = [
                    ChunkCreated(
                        task_id=r["task_id"], document_id=r["document_id"], chunk_id=r["chunk_id"],
                        chunk_index=r["chunk_index"],
                    )
                    for r in due
                ]  # fmt: skip
                await publish(producer, settings, events)
                await repo.retried(due)
                log.info("announced %d chunks due for their next round", len(due))
        except Exception as exc:  # the database or broker is away: next round
            log.warning("retry pump: %s", exc)
        if len(due) < BATCH:
            await asyncio.sleep(INTERVAL_S)
