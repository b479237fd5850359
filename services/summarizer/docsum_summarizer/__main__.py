"""The summarizer service: wiring only (the handlers are in handlers.py)."""

from __future__ import annotations

import asyncio
import os
import socket

import asyncpg

from docsum_shared.consumer import Consumer, run_service, serve
from docsum_shared.events import ChunkCreated, ChunkRetry
from docsum_shared.settings import Settings
from docsum_shared.summarizers import Summarizing

from .handlers import Deps, handlers
from .repository import ChunkRepository


def consumers(settings: Settings, pool: asyncpg.Pool) -> list[Consumer]:
    deps = Deps(
        ChunkRepository(pool),
        Summarizing.from_settings(settings, pool),
        settings,
        holder=f"{socket.gethostname()}:{os.getpid()}",
        calls=asyncio.Semaphore(settings.llm_max_inflight),  # one cap for fresh work and retries
    )
    return [
        Consumer(handlers.bind(deps, ChunkCreated), max_inflight=settings.llm_max_inflight),
        # Delayed retries wait in their own group, so that waiting never takes a slot from fresh work.
        Consumer(handlers.bind(deps, ChunkRetry), max_inflight=64, group_suffix="-retry"),
    ]


def main() -> None:
    run_service(lambda stop: serve("summarizer", stop, consumers))


if __name__ == "__main__":
    main()
