"""The summarizer service: chunk-created → one LLM summary per chunk, stored → chunk-summarized.

A chunk is summarized under a lease in Postgres, renewed while the call runs: a second consumer that
gets the same chunk (a rebalance, a redelivery) waits for the first instead of paying again, and the
chunk of a process that died is taken over once its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from docsum_shared.consumer import Consumer, run_service, serve
from docsum_shared.errors import PermanentError
from docsum_shared.events import ChunkCreated, ChunkRetry, Event, Topic
from docsum_shared.settings import Settings
from docsum_shared.summarizers import Summarizing
from docsum_shared.summarizers.base import PermanentLLMError, RetriableLLMError, SummaryRequest
from docsum_shared.summarizers.cache import CallContext

from . import repository
from .handler import backoff_s, needs_summary, report, request_for, should_report
from .repository import Claim

log = logging.getLogger("docsum_summarizer")

# Rate limits (429) are waited out, not counted; this bounds how long one chunk waits for them.
MAX_RATE_LIMIT_WAITS = 100


def build_handlers(settings: Settings, pool: asyncpg.Pool) -> list[Consumer]:
    llm = Summarizing.from_settings(settings, pool)
    process = f"{socket.gethostname()}:{os.getpid()}"
    calls = asyncio.Semaphore(settings.llm_max_inflight)  # LLM calls in flight in this process

    async def on_chunk(event: Event) -> list[Event]:
        assert isinstance(event, ChunkCreated)
        failed_before = 0
        if isinstance(event, ChunkRetry):
            failed_before = event.failures
            await asyncio.sleep(max(0.0, (event.not_before - datetime.now(UTC)).total_seconds()))
        # Each handling claims under its own name: two deliveries of one chunk in this process (a
        # re-drive beside a delayed retry) exclude each other as two processes would.
        lease = f"{process}:{uuid.uuid4().hex[:12]}"
        while True:
            chunk = await repository.load(pool, event.chunk_id)
            if chunk is None:
                raise PermanentError(f"chunk {event.chunk_id} of document {event.document_id} is not stored")
            if not needs_summary(chunk):
                return [report(event)] if should_report(chunk) else []
            claim = await repository.claim(pool, event.chunk_id, lease, settings.lease_ttl_s)
            if claim is Claim.TAKEN:
                later = await summarize_under_lease(event, llm.fit_chunk(request_for(chunk)), failed_before, lease)
                if later is not None:
                    return [later]
            elif claim is Claim.HELD:
                await asyncio.sleep(min(2.0, settings.lease_ttl_s / 4))  # another process is on it

    async def summarize_under_lease(
        event: ChunkCreated, request: SummaryRequest, failed_before: int, lease: str
    ) -> ChunkRetry | None:
        renewer = asyncio.create_task(keep_lease(event.chunk_id, lease))
        try:
            later = await call_with_retries(event, request, failed_before)
            if later is not None:  # through the retry topic: free the chunk until then
                await repository.release(pool, event.chunk_id, lease)
            return later
        except asyncio.CancelledError:
            # Shutting down mid-call: hand the chunk back so its next owner starts at once.
            await asyncio.shield(repository.release(pool, event.chunk_id, lease))
            raise
        finally:
            renewer.cancel()

    async def keep_lease(chunk_id: str, lease: str) -> None:
        while True:
            await asyncio.sleep(settings.lease_ttl_s / 3)
            with contextlib.suppress(Exception):  # a missed renewal is retried; expiry is the backstop
                await repository.renew(pool, chunk_id, lease, settings.lease_ttl_s)

    async def call_with_retries(event: ChunkCreated, request: SummaryRequest, failed_before: int) -> ChunkRetry | None:
        """Summarize and store; returns the retry event when the failures should wait for a later round."""
        context = CallContext(event.task_id, event.document_id, event.chunk_id)
        failures = waits = 0  # in this round
        while True:
            try:
                async with calls:
                    result, cached = await llm.summarize(request, context)
            except PermanentLLMError as exc:
                await repository.fail(pool, event.chunk_id, str(exc))
                log.warning("chunk %s failed: %s", event.chunk_id, exc)
                return None
            except RetriableLLMError as exc:
                if exc.counts:
                    failures += 1
                else:
                    waits += 1
                total = failed_before + failures
                if total >= settings.llm_max_attempts or waits >= MAX_RATE_LIMIT_WAITS:
                    await repository.fail(pool, event.chunk_id, f"gave up after {total + waits} attempts: {exc}")
                    log.warning("chunk %s failed for good: %s", event.chunk_id, exc)
                    return None
                later = exc.counts and failures >= settings.llm_inplace_attempts
                # Retried here and now, a failed call makes another attempt; a rate limit does not (the
                # request was fine, its timing was not), nor a retry round, whose claim counts it.
                await repository.record_error(pool, event.chunk_id, str(exc), next_attempt=exc.counts and not later)
                if later:
                    log.info("chunk %s: %s; retrying in %.0fs", event.chunk_id, exc, settings.llm_retry_delay_s)
                    return ChunkRetry(
                        **event.model_dump(exclude={"event_id", "occurred_at", "not_before", "failures"}),
                        not_before=datetime.now(UTC) + timedelta(seconds=settings.llm_retry_delay_s),
                        failures=total,
                    )
                delay = backoff_s(exc, failures)
                log.info("chunk %s: %s; retrying in %.1fs", event.chunk_id, exc, delay)
                await asyncio.sleep(delay)
            else:
                await repository.complete(pool, event.chunk_id, event.task_id, result.text, result.model)
                log.info("chunk %s summarized%s", event.chunk_id, " (from cache)" if cached else "")
                return None

    return [
        Consumer({Topic.CHUNK_CREATED: on_chunk}, max_inflight=settings.llm_max_inflight),
        # Delayed retries wait in their own group, so that waiting never takes a slot from fresh work.
        Consumer({Topic.CHUNK_RETRY: on_chunk}, max_inflight=64, group_suffix="-retry"),
    ]


def main() -> None:
    run_service(lambda stop: serve("summarizer", stop, build_handlers))


if __name__ == "__main__":
    main()
