"""Hierarchical merging: summaries that do not fit the model's input budget are merged in groups.

Each level merges consecutive groups that fit, side by side, and stores every group's result (a
merge node); the results are merged the same way, level by level, until one request fits. A crash
costs at most the nodes in flight: every finished node's request is answered from the result cache
on the way back up. It always ends: a level that cannot pair any two texts is trimmed to fit in one
request.
"""

from __future__ import annotations

import asyncio

import asyncpg

from docsum_shared.summarizers import Summarizing
from docsum_shared.summarizers.base import SummaryRequest, SummaryResult
from docsum_shared.summarizers.budget import fits, group_to_fit, next_level, part_of, trim_to_fit
from docsum_shared.summarizers.cache import CallContext, cache_key


async def merge(
    llm: Summarizing, request: SummaryRequest, context: CallContext, scope_id: str, *, parallel: int = 4
) -> SummaryResult:
    budget = llm.budget
    slots = asyncio.Semaphore(parallel)
    level = 0

    async def node(level: int, position: int, part: SummaryRequest, inputs: int) -> str:
        if budget is not None and not fits(part, budget, llm.calibration):
            part = trim_to_fit(part, budget, llm.calibration)
        async with slots:
            result, _ = await llm.summarize(part, context)
        await _store_node(llm.pool, scope_id, level, position, inputs, cache_key(llm.backend.model, part), result)
        return result.text

    while budget is not None and not fits(request, budget, llm.calibration):
        groups = group_to_fit(request, budget, llm.calibration)
        if len(groups) == len(request.texts) and level > 0:
            break  # nothing pairs up any more: trim below and finish in one request
        results = await asyncio.gather(
            *(node(level, i, part_of(request, start, end), end - start) for i, (start, end) in enumerate(groups))
        )
        request = next_level(request, list(results))
        level += 1
    if budget is not None and not fits(request, budget, llm.calibration):
        request = trim_to_fit(request, budget, llm.calibration)
    result, _ = await llm.summarize(request, context)
    if level > 0:
        key = cache_key(llm.backend.model, request)
        await _store_node(llm.pool, scope_id, level, 0, len(request.texts), key, result)
    return result


async def _store_node(
    pool: asyncpg.Pool, scope_id: str, level: int, position: int, inputs: int, key: str, result: SummaryResult
) -> None:
    await pool.execute(
        "INSERT INTO merge_nodes (scope_id, level, position, inputs, cache_key, summary)"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope_id, level, position) DO UPDATE"
        " SET inputs = EXCLUDED.inputs, cache_key = EXCLUDED.cache_key, summary = EXCLUDED.summary",
        scope_id, level, position, inputs, key, result.text,
    )  # fmt: skip
