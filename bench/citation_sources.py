"""How many sources a top sentence carries when the model cites every id, and what its view costs.

A document of `--chunks` chunks of 2,000 characters, each of `--sentences` sentences (one a line of 50
characters counts as a unit); every chunk summary's sentences cite every sentence of their chunk (the
model told to cite every id does), the chunks are merged in groups of `--group`, the groups' results
merged into one: the top sentence rests on all of them. Prints the sources of the top sentence, and
for its task's view (queries.sentences, then views.sentence_views, on the project's PostgreSQL in a
database of its own): the sources the query expands, the page lookups among them (a source without its
last unit stored is looked up in the document's positions), the sources shown, the query's time.

    .venv/bin/python bench/citation_sources.py [--chunks 1000] [--sentences 20] [--group 20] [--gap 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docsum_llm.base import Span, SummaryResult, SummarySentence  # noqa: E402
from docsum_llm.citations import chunk_sentences, merged_sentences  # noqa: E402
from docsum_shared.cited import CitedSentence, to_json  # noqa: E402
from docsum_shared.db import migrate  # noqa: E402
from docsum_shared.positions import Positions  # noqa: E402
from docsum_shared.readmodel import queries, views  # noqa: E402
from tests.integration.conftest import create_database, drop_database, start_infra  # noqa: E402

CHUNK_CHARS, LINE_CHARS = 2_000, 50


def _every_id(n: int, sentences: int, gap: int) -> SummaryResult:
    """A summary of one chunk (its text i: 0), three sentences each citing all of the chunk's (`gap`
    characters apart: 1, a space between sentences)."""
    step = CHUNK_CHARS // sentences
    spans = tuple(Span(0, step * k, step * (k + 1) - gap) for k in range(sentences))
    said = [f"C{n} point {j}." for j in range(3)]
    return SummaryResult(" ".join(said), "m", sentences=tuple(SummarySentence(t, spans, "cited") for t in said))


def _merge(children: list[tuple[CitedSentence, ...]]) -> tuple[CitedSentence, ...]:
    """A merge whose one sentence rests on everything it merged."""
    spans = tuple(Span(i, 0, 10**6) for i in range(len(children)))
    return merged_sentences(
        SummaryResult("All of it.", "m", sentences=(SummarySentence("All of it.", spans),)), children
    )


async def main(server_url: str, chunks: int, sentences: int, group: int, gap: int) -> None:
    length = chunks * CHUNK_CHARS
    starts = tuple(range(0, length, LINE_CHARS))
    positions = Positions("line", starts)
    document_id = str(uuid.uuid4())
    leaves = [
        chunk_sentences(_every_id(n, sentences, gap), document_id, n * CHUNK_CHARS, positions) for n in range(chunks)
    ]
    groups = [_merge(leaves[i : i + group]) for i in range(0, chunks, group)]
    [top] = _merge(groups)
    said = f"{chunks} chunks x {sentences} sentences {gap} apart, every id cited"
    print(f"{said}: top sentence has {len(top.sources)} sources")

    url = await create_database(server_url, "docsum_citation_sources")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        await migrate(pool)
        task_id = str(uuid.uuid4())
        await pool.execute("INSERT INTO tasks (id, owner, title, status) VALUES ($1, 'o', 't', 'COMPLETED')", task_id)
        await pool.execute(
            "INSERT INTO documents (id, task_id, filename, content_type, status) VALUES ($1, $2, 'book.txt',"
            " 'text/plain', 'COMPLETED')",
            document_id,
            task_id,
        )
        await pool.execute(
            "INSERT INTO document_texts (document_id, text, position_unit, position_starts)"
            " VALUES ($1, $2, 'line', $3)",
            document_id,
            "x" * length,
            list(starts),
        )
        stored = to_json([top])
        await pool.execute("UPDATE tasks SET summary_sentences = $2::jsonb WHERE id = $1", task_id, stored)
        items = json.loads(stored)[0]["sources"]
        lookups = sum(1 for s in items if len(s) == 4)
        await queries.sentences(pool, task_id)  # the connection's first query reads the catalogs
        started = time.perf_counter()
        [row] = await queries.sentences(pool, task_id)
        queried = time.perf_counter() - started
        [shown] = views.sentence_views(row["sentences"], row["places"])
        print(
            f"view: {len(items)} sources expanded, {lookups} page lookups, {len(shown.sources)} shown;"
            f" query {queried * 1000:.0f} ms, {len(row['places']):,} bytes of places"
        )
    finally:
        await pool.close()
        await drop_database(url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--group", type=int, default=20)
    parser.add_argument("--gap", type=int, default=1, help="characters between two cited sentences")
    args = parser.parse_args()
    infra = start_infra("docsum_citation_sources")
    asyncio.run(main(infra["DATABASE_URL"], args.chunks, args.sentences, args.group, args.gap))
