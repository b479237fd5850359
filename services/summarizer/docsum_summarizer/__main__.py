"""The summarizer service: chunk-created → one LLM summary per chunk, stored → chunk-summarized."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from docsum_shared.consumer import run_service, serve
from docsum_shared.errors import PermanentError
from docsum_shared.events import ChunkCreated, Event, Topic
from docsum_shared.settings import Settings
from docsum_shared.summarizers import make_backend
from docsum_shared.summarizers.base import PermanentLLMError, RetriableLLMError
from docsum_shared.summarizers.cache import summarize_cached

from . import repository
from .handler import needs_summary, report, request_for, should_report

log = logging.getLogger("docsum_summarizer")


def build_handlers(settings: Settings, pool: asyncpg.Pool):
    backend = make_backend(settings)

    async def on_chunk(event: Event) -> list[Event]:
        assert isinstance(event, ChunkCreated)
        chunk = await repository.load(pool, event.chunk_id)
        if chunk is None:
            raise PermanentError(f"chunk {event.chunk_id} of document {event.document_id} is not stored")
        if needs_summary(chunk):
            await repository.start_attempt(pool, event.chunk_id)
            for attempt in range(1, settings.llm_max_attempts + 1):
                try:
                    result, cached = await summarize_cached(pool, backend, request_for(chunk))
                except PermanentLLMError as exc:
                    await repository.fail(pool, event.chunk_id, str(exc))
                    break
                except RetriableLLMError as exc:
                    if attempt == settings.llm_max_attempts:
                        await repository.fail(pool, event.chunk_id, f"gave up after {attempt} attempts: {exc}")
                        break
                    log.warning("chunk %s: %s (attempt %d); retrying", event.chunk_id, exc, attempt)
                    await asyncio.sleep(min(30.0, 2.0**attempt))
                else:
                    await repository.complete(pool, event.chunk_id, result.text, result.model)
                    log.info("chunk %s summarized%s", event.chunk_id, " (cached)" if cached else "")
                    break
        elif not should_report(chunk):
            return []
        return [report(event)]

    return {Topic.CHUNK_CREATED: on_chunk}


def main() -> None:
    run_service(lambda stop: serve("summarizer", stop, build_handlers))


if __name__ == "__main__":
    main()
