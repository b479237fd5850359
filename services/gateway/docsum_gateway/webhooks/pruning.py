"""The webhooks' delivery log kept to DOCSUM_WEBHOOK_RETAIN_S: a loop of the gateway, beside the sending."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from docsum_shared.retry import keep_running

from ..settings import GatewaySettings
from . import repository

log = logging.getLogger(__name__)


async def prune_until(stop: asyncio.Event, pool: asyncpg.Pool, settings: GatewaySettings) -> None:
    """Delete the deliveries done over webhook_retain_s ago, every half of it (at most hourly): the outbox
    holds the last days' deliveries and those still being tried, not every one ever sent. Every replica
    prunes; a delete another replica made first deletes nothing."""
    retain_s = settings.webhook_retain_s
    every = min(3600.0, max(1.0, retain_s / 2))

    async def prune() -> None:
        while deleted := await repository.prune_deliveries(pool, retain_s):
            log.info("webhooks: pruned %d deliveries done over %gs ago", deleted, retain_s)

    await keep_running("webhooks: pruning", prune, every_s=every, stop=stop)
