"""The summarizer's stage of the pipeline: chunk-created in, each chunk summarized; the admission
(admission.py), the round scheduler (rounds.py) and, with the provider's Batch API, batch mode's driver
(batches/) beside it."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid

import asyncpg

from docsum_llm import Summarizing
from docsum_llm.openai.client import OpenAIBackend
from docsum_shared.consumer import Background
from docsum_shared.handlers import Publish
from docsum_shared.settings import endpoint_key
from docsum_shared.stage import Stage

from .admission import ADMISSION, admissions, admit_fairly
from .batches.driver import BATCH_DRIVER, BatchDriver
from .batches.policy import batch_endpoint
from .batches.repository import BatchRepository
from .handlers import Deps, handlers
from .repository import ChunkRepository
from .rounds import ROUND_SCHEDULER, schedule_rounds
from .settings import SummarizerSettings


def deps(settings: SummarizerSettings, pool: asyncpg.Pool) -> Deps:
    return Deps(
        ChunkRepository(pool, reconcile_idle_s=settings.reconcile_idle_s, deployment=settings.deployment),
        Summarizing.from_settings(settings, pool),
        settings,
        holder=f"{socket.gethostname()}:{os.getpid()}",
    )


def loops(settings: SummarizerSettings, pool: asyncpg.Pool, deps: Deps) -> Background:
    """The admission, the round scheduler, and the batch driver where the backend (the handlers' own) has
    the provider's Batch API."""
    backend = deps.llm.backend if isinstance(deps.llm, Summarizing) else None

    async def run(publish: Publish) -> None:
        async with asyncio.TaskGroup() as together:
            rounds = ChunkRepository(pool, deployment=settings.deployment)
            together.create_task(schedule_rounds(rounds, publish, settings))
            # Woken by the handlers' chunks finishing (`deps.admission`) as well as by the chunkers'.
            admission = admissions(pool, settings)
            # Each stage its own name in the live summarizers (two in one process count twice).
            alive = f"{deps.holder}:{uuid.uuid4().hex[:8]}"
            together.create_task(admit_fairly(admission, publish, settings, deps.admission, holder=alive))
            if isinstance(backend, OpenAIBackend):
                batches = BatchRepository(pool, batch_endpoint(settings))
                driver = BatchDriver(batches, backend, publish, settings, earlier_endpoint=endpoint_key(settings))
                together.create_task(driver.run())

    return run


def max_inflight(settings: SummarizerSettings) -> int:
    # Every chunk the admission gives this process in hand at once (its calls in flight and their spare:
    # the window as this process alone counts it), each waiting for a call slot in its rank's turn: a
    # chunk left in Kafka behind the others would be called after all of them whatever its rank, so a
    # newcomer's chunk, admitted ahead of the spare, would still wait for the spare. Plus one a call in
    # flight: a chunk's slot in the window is freed (and refilled) once its answer is stored, before its
    # handling has reported it, and the chunk admitted in its place must not wait for that report.
    return settings.window() + settings.llm_max_inflight


async def close(deps: Deps) -> None:
    if isinstance(deps.llm, Summarizing):  # the LLM client `deps` built: its connections
        await deps.llm.aclose()


STAGE = Stage(
    "summarizer",
    SummarizerSettings,
    handlers,
    deps,
    loops=loops,
    senders=(ROUND_SCHEDULER, ADMISSION, BATCH_DRIVER),
    max_inflight=max_inflight,
    close=close,
)
