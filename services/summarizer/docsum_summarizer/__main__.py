"""The summarizer service: wiring only (the handler is in handlers.py, the round scheduler in rounds.py,
batch mode's driver in batches/)."""

from __future__ import annotations

import asyncio
import os
import socket

import asyncpg

from docsum_shared.consumer import Background, Consumer, run_service, serve
from docsum_shared.handlers import Publish
from docsum_shared.summarizers import Summarizing, endpoint_key
from docsum_shared.summarizers.base import SummarizerBackend
from docsum_shared.summarizers.openai_backend import OpenAIBackend

from .batches.driver import BatchDriver
from .batches.policy import batch_endpoint
from .batches.repository import BatchRepository
from .handlers import Deps, handlers
from .repository import ChunkRepository
from .rounds import schedule_rounds
from .settings import SummarizerSettings


def consumers(settings: SummarizerSettings, pool: asyncpg.Pool) -> list[Consumer]:
    llm = Summarizing.from_settings(settings, pool)
    deps = Deps(
        ChunkRepository(pool, reconcile_idle_s=settings.reconcile_idle_s),
        llm,
        settings,
        holder=f"{socket.gethostname()}:{os.getpid()}",
    )
    # Twice as many chunks in hand as calls in flight: while some store their answers and report them,
    # the others are claimed and waiting, and a call ending lets the next one start at once.
    return [
        Consumer(
            handlers.bind(deps),
            max_inflight=2 * settings.llm_max_inflight,
            close=llm.aclose,
            background=background(settings, pool, llm.backend),
        )
    ]


def background(settings: SummarizerSettings, pool: asyncpg.Pool, backend: SummarizerBackend) -> Background:
    """The round scheduler, and the batch driver where the backend (the handlers' own) has the provider's
    Batch API."""

    async def run(publish: Publish) -> None:
        async with asyncio.TaskGroup() as both:
            both.create_task(schedule_rounds(ChunkRepository(pool), publish, settings))
            if isinstance(backend, OpenAIBackend):
                batches = BatchRepository(pool, batch_endpoint(settings))
                driver = BatchDriver(batches, backend, publish, settings, earlier_endpoint=endpoint_key(settings))
                both.create_task(driver.run())

    return run


def main() -> None:
    run_service(lambda stop: serve("summarizer", stop, SummarizerSettings, consumers))


if __name__ == "__main__":
    main()
