"""The result cache: an answer to a request already answered comes from Postgres, not the provider."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

import asyncpg

from .base import SummarizerBackend, SummaryRequest, SummaryResult
from .prompts import PROMPT_VERSION


def cache_key(model: str, request: SummaryRequest) -> str:
    payload = json.dumps(
        {"model": model, "prompt_version": PROMPT_VERSION, **asdict(request)}, ensure_ascii=False, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()


async def summarize_cached(
    pool: asyncpg.Pool, backend: SummarizerBackend, request: SummaryRequest
) -> tuple[SummaryResult, bool]:
    """The backend's answer to `request`, and whether it came from the cache."""
    key = cache_key(backend.model, request)
    row = await pool.fetchrow(
        "SELECT result, model, prompt_tokens, completion_tokens FROM llm_results WHERE key = $1", key
    )
    if row is not None:
        return SummaryResult(row["result"], row["model"], row["prompt_tokens"], row["completion_tokens"]), True
    result = await backend.summarize(request)
    await pool.execute(
        "INSERT INTO llm_results (key, model, kind, result, prompt_tokens, completion_tokens)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO NOTHING",
        key,
        result.model,
        str(request.kind),
        result.text,
        result.prompt_tokens,
        result.completion_tokens,
    )
    return result, False
