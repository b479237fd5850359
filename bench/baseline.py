"""What a user would write instead of docsum: one Python process, map-reduce under a semaphore.

The same chunks docsum would make (the chunker's own cut), the same prompts (docsum's own), the same
OpenAI-compatible endpoint through the `openai` package; every chunk summary in parallel, at most
`concurrency` at once, then one merge of the summaries. No broker, no database, no crash recovery.

    .venv/bin/python bench/baseline.py --base-url http://127.0.0.1:PORT/v1 --concurrency 16 FILE
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from openai import AsyncOpenAI

from docsum_chunker.policy import cut
from docsum_chunker.settings import ChunkerSettings
from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.prompts import build_messages
from docsum_shared.errors import Fail


def chunk_requests(text: str, settings: ChunkerSettings | None = None) -> list[SummaryRequest]:
    rows = cut("document", text, settings or ChunkerSettings())
    if isinstance(rows, Fail):
        raise ValueError(rows.error)
    return [
        SummaryRequest(SummaryKind.CHUNK, (r.chunk.text,), context_before=r.chunk.context_before,
                       context_after=r.chunk.context_after)
        for r in rows
        if r.chunk is not None
    ]  # fmt: skip


async def map_reduce(client: AsyncOpenAI, model: str, requests: list[SummaryRequest], concurrency: int) -> str:
    slots = asyncio.Semaphore(concurrency)

    async def ask(request: SummaryRequest) -> str:
        async with slots:
            answer = await client.chat.completions.create(model=model, messages=build_messages(request), max_tokens=300)
        return answer.choices[0].message.content or ""

    summaries = await asyncio.gather(*(ask(r) for r in requests))
    if len(summaries) == 1:
        return summaries[0]
    return await ask(SummaryRequest(SummaryKind.DOCUMENT, tuple(summaries), title="document"))


async def timed(base_url: str, text: str, concurrency: int, model: str = "stand-in-1") -> tuple[float, int]:
    """Seconds from start to the merged summary, and the number of chunks."""
    requests = chunk_requests(text)
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    try:
        started = time.perf_counter()
        await map_reduce(client, model, requests, concurrency)
        return time.perf_counter() - started, len(requests)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("file", type=Path)
    args = parser.parse_args()
    seconds, chunks = asyncio.run(timed(args.base_url, args.file.read_text(), args.concurrency))
    print(f"{chunks} chunks in {seconds:.2f}s")


if __name__ == "__main__":
    main()
