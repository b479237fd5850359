"""The result cache keeps an answer's sentences with it: an answer from the cache cites as the backend's did."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import asyncpg
import pytest

from docsum_llm.base import Span, SummaryKind, SummaryRequest, SummarySentence
from docsum_llm.cache import ResultCache, sentences_from_json, sentences_json, summarize_cached
from docsum_llm.extractive import ExtractiveBackend
from tests.documents import english_prose


def test_cached_sentences_round_trip_and_none_are_stored_as_null() -> None:
    sentences = (
        SummarySentence.quoting("第一句。", 0, 3, 7),
        SummarySentence("Two and three.", (Span(2, 10, 14), Span(1, 0, 6)), "aligned"),
        SummarySentence("Both together.", (), "synthesis"),
    )
    assert sentences_from_json(sentences_json(sentences)) == sentences
    assert sentences_json(()) is None and sentences_from_json(None) == ()


def test_a_row_stored_with_one_range_a_sentence_reads_as_one_cited_range() -> None:
    old = json.dumps([["第一句。", 0, 3, 7], ["Two.", 2, 10, 14]], ensure_ascii=False)
    assert sentences_from_json(old) == (
        SummarySentence("第一句。", (Span(0, 3, 7),), "cited"),
        SummarySentence("Two.", (Span(2, 10, 14),), "cited"),
    )
    with pytest.raises(ValueError, match="support"):
        sentences_from_json(json.dumps([["Two.", [[2, 10, 14]], "guessed"]]))


@dataclass
class _Pool:
    """The statements the cache sends, and the row it reads back."""

    row: dict[str, Any] | None = None
    executed: list[tuple[object, ...]] | None = None

    async def execute(self, sql: str, *args: object) -> None:
        self.executed = [*(self.executed or []), (sql, *args)]

    async def fetch(self, sql: str, keys: list[str]) -> list[dict[str, Any]]:
        return [] if self.row is None else [{**self.row, "key": key} for key in keys]


async def test_the_cache_stores_an_answer_with_its_sentences_and_gives_them_back() -> None:
    backend = ExtractiveBackend()
    request = SummaryRequest(SummaryKind.CHUNK, (english_prose(1500, seed=4),))
    pool = _Pool()
    cache = ResultCache(cast(asyncpg.Pool, pool))
    result, cached = await summarize_cached(cache, backend, request)
    assert not cached and result.sentences
    [(sql, *args)] = pool.executed or []
    [stored] = cast(list[str], args[14])  # a column a parameter ($15: the sentences): one call stored
    assert "sentences" in str(sql) and sentences_from_json(stored) == result.sentences
    pool.row = {
        "result": result.text,
        "model": result.model,
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "truncated": False,
        "sentences": stored,
    }
    again = await cache.stored("key")
    assert again is not None and again.sentences == result.sentences and again.text == result.text
    pool.row["sentences"] = None  # a row stored before the column, or by a backend that does not say
    before = await cache.stored("key")
    assert before is not None and before.sentences == ()
