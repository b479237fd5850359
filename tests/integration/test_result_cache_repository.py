"""The result cache against PostgreSQL: answers stored at about the same time go as one statement, and
one answer PostgreSQL refuses fails alone; the others are stored, each once."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from docsum_llm.base import SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.cache import CallContext, ResultCache
from docsum_shared.errors import ItemFailed

pytestmark = pytest.mark.integration

REQUEST = SummaryRequest(SummaryKind.CHUNK, ("Kafka stores events in topics.",))
# What PostgreSQL cannot hold, in the answer's text or in its sentences (the `jsonb` column).
BAD = {
    "a NUL in the text": SummaryResult("Kafka stores events.\x00", "m", 10, 5),
    "a lone surrogate in the text": SummaryResult("Kafka stores events.\ud800", "m", 10, 5),
    "a NUL in a sentence": SummaryResult(
        "Kafka stores events.", "m", 10, 5, sentences=(SummarySentence("Kafka stores events.\x00", (), "synthesis"),)
    ),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
async def test_one_answer_postgres_refuses_fails_alone_and_its_round_mates_are_stored(
    repository_db: asyncpg.Pool, bad: SummaryResult
) -> None:
    cache = ResultCache(repository_db)
    task = f"t-{uuid.uuid4().hex[:8]}"
    keys = [f"{task}-{i}" for i in range(5)]
    results = [SummaryResult(f"Summary {i}.", "m", 10, 5) for i in range(5)]
    results[2] = bad
    stores = [
        cache.store(CallContext(task, f"d-{i}", f"c-{i}", owner=f"owner-{i}"), REQUEST, key, result, 7)
        for i, (key, result) in enumerate(zip(keys, results, strict=True))
    ]
    outcomes = await asyncio.gather(*stores, return_exceptions=True)  # made in one turn: one round

    failed = outcomes[2]
    assert isinstance(failed, ItemFailed), outcomes
    assert str(failed).startswith("the LLM provider's answer could not be stored: ")
    assert len(str(failed)) < 300  # readable: not the whole round's values quoted
    assert [o for i, o in enumerate(outcomes) if i != 2] == [None] * 4
    for i, key in enumerate(keys):
        stored = await cache.stored(key)
        assert (stored is None) if i == 2 else (stored is not None and stored.text == f"Summary {i}.")
    lines = await repository_db.fetch("SELECT chunk_id FROM llm_calls WHERE task_id = $1 ORDER BY chunk_id", task)
    assert [r["chunk_id"] for r in lines] == ["c-0", "c-1", "c-3", "c-4"]  # each paid answer booked once
