"""The summarizer service: wiring only (the handler is in handlers.py, the round scheduler in rounds.py)."""

from __future__ import annotations

import os
import socket

import asyncpg

from docsum_shared.consumer import Background, Consumer, run_service, serve
from docsum_shared.summarizers import Summarizing

from .handlers import Deps, handlers
from .repository import ChunkRepository
from .rounds import schedule_rounds
from .settings import SummarizerSettings


def consumers(settings: SummarizerSettings, pool: asyncpg.Pool) -> list[Consumer]:
    deps = Deps(
        ChunkRepository(pool, reconcile_idle_s=settings.reconcile_idle_s),
        Summarizing.from_settings(settings, pool),
        settings,
        holder=f"{socket.gethostname()}:{os.getpid()}",
    )
    return [Consumer(handlers.bind(deps), max_inflight=settings.llm_max_inflight)]


def rounds(settings: SummarizerSettings, pool: asyncpg.Pool) -> Background:
    return lambda producer: schedule_rounds(ChunkRepository(pool), producer, settings)


def main() -> None:
    run_service(lambda stop: serve("summarizer", stop, SummarizerSettings, consumers, background=rounds))


if __name__ == "__main__":
    main()
