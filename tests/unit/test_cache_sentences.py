"""The result cache keeps an answer's sentences with it: an answer from the cache cites as the backend's did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import asyncpg

from docsum_shared.summarizers.base import SummaryKind, SummaryRequest, SummarySentence
from docsum_shared.summarizers.cache import sentences_from_json, sentences_json, stored_answer, summarize_cached
from docsum_shared.summarizers.extractive import ExtractiveBackend
from tests.documents import english_prose


def test_cached_sentences_round_trip_and_none_are_stored_as_null() -> None:
    sentences = (SummarySentence("第一句。", 0, 3, 7), SummarySentence("Two.", 2, 10, 14))
    assert sentences_from_json(sentences_json(sentences)) == sentences
    assert sentences_json(()) is None and sentences_from_json(None) == ()


@dataclass
class _Pool:
    """The statements the cache sends, and the row it reads back."""

    row: dict[str, Any] | None = None
    executed: list[tuple[object, ...]] | None = None

    async def execute(self, sql: str, *args: object) -> None:
        self.executed = [*(self.executed or []), (sql, *args)]

    async def fetchrow(self, sql: str, *args: object) -> dict[str, Any] | None:
        return self.row


async def test_the_cache_stores_an_answer_with_its_sentences_and_gives_them_back() -> None:
    backend = ExtractiveBackend()
    request = SummaryRequest(SummaryKind.CHUNK, (english_prose(1500, seed=4),))
    pool = _Pool()
    result, cached = await summarize_cached(cast(asyncpg.Pool, pool), backend, request)
    assert not cached and result.sentences
    [(sql, *args)] = pool.executed or []
    assert "sentences" in str(sql) and sentences_from_json(cast(str, args[-1])) == result.sentences
    pool.row = {
        "result": result.text,
        "model": result.model,
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "truncated": False,
        "sentences": args[-1],
    }
    again = await stored_answer(cast(asyncpg.Pool, pool), "key")
    assert again is not None and again.sentences == result.sentences and again.text == result.text
    pool.row["sentences"] = None  # a row stored before the column, or by a backend that does not say
    before = await stored_answer(cast(asyncpg.Pool, pool), "key")
    assert before is not None and before.sentences == ()
