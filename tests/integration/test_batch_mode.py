"""Batch mode through the running services, against the stand-in's Batch API on a scaled clock (a "24 h"
window lasts seconds): the same documents end as in realtime for at most 0.56x the price; a batch whose
create answer is lost is adopted, not paid twice; the summarizer killed -9 at each step of a batch's life
ends with every chunk done and no line paid twice; an expired batch keeps its answered lines and the rest
finish in realtime; cancelling a task cancels its batch.

The tests run their own stand-in provider, so its ledger belongs to them alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import asyncpg
import pytest

from tests.fake_batches import cost_by_tier
from tests.fake_llm import FakeLLM, FakeLLMServer, LedgerEntry
from tests.integration.conftest import SERVICES, Stack, StackFactory
from tests.integration.helpers import calls, eventually, get_task, marked_text, new_marker, submit, txt, wait_for_task

pytestmark = pytest.mark.integration

PRICES = {"stand-in-1": [2.0, 8.0]}
# A provider second lasts 1/3600 s: validating 30 s -> 8 ms, each line 2 s -> 0.6 ms, finalizing -> 8 ms.
SCALE = 1 / 3600
BATCH_ENV = {
    "DOCSUM_LLM_PRICES": '{"stand-in-1": [2.0, 8.0]}',
    "DOCSUM_LLM_BATCH_POLL_S": "0.2",
    "DOCSUM_LLM_BATCH_GATHER_S": "0.3",
    "DOCSUM_LLM_BATCH_DEADLINE_MARGIN_S": "0",
}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        server.llm.configure(prices=PRICES, batch_time_scale=SCALE)
        yield server


def _statuses(task: dict) -> tuple[str, list[tuple[str, str]]]:
    return task["status"], [(d["filename"], d["status"]) for d in task["documents"]]


def _paid_twice(entries: list[LedgerEntry]) -> list[str]:
    """custom_ids the provider answered (and billed) more than once."""
    answered = Counter(e.custom_id for e in entries if e.tier == "batch" and e.status == 200)
    return [custom_id for custom_id, n in answered.items() if custom_id and n > 1]


async def _batches_in(db: asyncpg.Pool, task_id: str, state: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM llm_batches WHERE task_id = $1 AND state = $2", task_id, state))


def _stack(make_stack: StackFactory, server: FakeLLMServer, **env: str) -> Stack:
    return make_stack(SERVICES, **{**BATCH_ENV, **env, "OPENAI_BASE_URL": server.base_url})


async def test_batch_mode_ends_as_realtime_does_for_at_most_056_of_its_price(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    stack = _stack(make_stack, server)
    marker = new_marker()
    files = [txt("a.txt", marked_text(12_000, seed=91, marker=marker)), txt("b.txt", marked_text(3_000, 92, marker))]
    async with stack.client("alice") as client:
        realtime = await wait_for_task(client, await submit(client, files), stack)
    assert provider.wait_idle()
    realtime_paid = cost_by_tier(calls(provider, marker), PRICES)
    # Another owner: the result cache is per owner, so the batch task pays for every call too.
    async with stack.client("bob") as client:
        batch = await wait_for_task(client, await submit(client, files, mode="batch"), stack)
    assert provider.wait_idle()
    entries = calls(provider, marker)
    paid = cost_by_tier(entries, PRICES)

    assert _statuses(realtime) == _statuses(batch) and batch["status"] == "COMPLETED"
    assert batch["options"]["mode"] == "batch"
    chunk_lines = [e for e in entries if e.tier == "batch"]
    chunks = sum(d["chunks"]["total"] for d in batch["documents"])
    assert len(chunk_lines) == chunks and all(e.status == 200 for e in chunk_lines)
    assert _paid_twice(entries) == []
    batch_cost = paid["batch"]["cost_usd"] + paid.get("flex", {}).get("cost_usd", 0.0)
    assert batch["usage"]["cost_usd"] == pytest.approx(batch_cost)
    assert realtime["usage"]["cost_usd"] == pytest.approx(realtime_paid["realtime"]["cost_usd"])
    assert batch["usage"]["cost_usd"] <= 0.56 * realtime["usage"]["cost_usd"]
    print(f"batch/realtime cost: {batch['usage']['cost_usd'] / realtime['usage']['cost_usd']:.3f}")
    rows = await db.fetch("SELECT state, outcome FROM llm_batches WHERE task_id = $1", batch["task_id"])
    assert rows and {(r["state"], r["outcome"]) for r in rows} == {("ended", "completed")}


async def test_a_batch_whose_create_answer_was_lost_is_adopted_not_created_again(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_lose_create_next=1)
    stack = _stack(make_stack, server)
    marker = new_marker()
    async with stack.client("alice") as client:
        task = await wait_for_task(
            client, await submit(client, [txt("c.txt", marked_text(6_000, 93, marker))], mode="batch"), stack
        )
    assert task["status"] == "COMPLETED"
    entries = calls(provider, marker)
    assert _paid_twice(entries) == [] and {e.tier for e in entries if "<text>\n" in e.prompt} == {"batch"}
    batches = await db.fetch("SELECT outcome FROM llm_batches WHERE task_id = $1", task["task_id"])
    assert [r["outcome"] for r in batches] == ["completed"]  # one batch: the lost create's, adopted


@pytest.mark.parametrize("point", ["upload", "create", "created", "retrieve", "content"])
async def test_the_summarizer_killed_at_each_step_of_a_batch_pays_no_line_twice(
    make_stack: StackFactory, server: FakeLLMServer, point: str
) -> None:
    provider = server.llm
    stack = _stack(make_stack, server, DOCSUM_LEASE_TTL_S="4")
    marker = new_marker()
    provider.configure(batch_hold=[point])
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("d.txt", marked_text(6_000, 94, marker))], mode="batch")
        assert provider.wait_held(point, timeout=60), stack.log_tail()
        stack.kill("summarizer")
        provider.configure(batch_hold=[])
        stack.start("summarizer")
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED", task
    entries = calls(provider, marker)
    assert _paid_twice(entries) == []
    assert {e.tier for e in entries if "<text>\n" in e.prompt and e.status == 200} == {"batch"}


async def test_an_expired_batch_keeps_its_answered_lines_and_the_rest_finish_in_realtime(
    make_stack: StackFactory, server: FakeLLMServer
) -> None:
    provider = server.llm
    provider.configure(batch_expire_after_lines=2)
    stack = _stack(make_stack, server)
    marker = new_marker()
    async with stack.client("alice") as client:
        task = await wait_for_task(
            client, await submit(client, [txt("e.txt", marked_text(12_000, 95, marker))], mode="batch"), stack
        )
    assert task["status"] == "COMPLETED"
    entries = [e for e in calls(provider, marker, 200) if "<text>\n" in e.prompt]
    tiers = Counter(e.tier for e in entries)
    assert tiers["batch"] == 2 and tiers["realtime"] >= 1 and set(tiers) == {"batch", "realtime"}
    batch_prompts = {e.prompt_sha256 for e in entries if e.tier == "batch"}
    assert not batch_prompts & {e.prompt_sha256 for e in entries if e.tier == "realtime"}  # none asked again


async def test_cancelling_a_batch_task_cancels_its_batch_and_no_later_line_is_paid(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_in_progress_s=3600 * 2)  # two provider hours: ~2 s for all its lines
    stack = _stack(make_stack, server)
    marker = new_marker()
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("f.txt", marked_text(12_000, 96, marker))], mode="batch")

        async def submitted() -> bool:
            return bool(
                await db.fetchval(
                    "SELECT count(*) FROM llm_batches WHERE task_id = $1 AND state = 'submitted'", task_id
                )
            )

        await eventually(submitted, timeout=60)
        response = await client.post(f"/v1/tasks/{task_id}/cancel")
        assert response.status_code < 300, response.text

        async def ended() -> bool:
            return bool(
                await db.fetchval("SELECT count(*) FROM llm_batches WHERE task_id = $1 AND state = 'ended'", task_id)
            )

        await eventually(ended, timeout=60)
        cancelled_at = await db.fetchval("SELECT updated_at FROM tasks WHERE id = $1", task_id)
        task = await get_task(client, task_id)
    assert task["status"] == "CANCELLED"
    outcome = await db.fetchval("SELECT outcome FROM llm_batches WHERE task_id = $1", task_id)
    assert outcome == "cancelled"
    assert provider.wait_idle()
    later = [e for e in calls(provider, marker, 200) if e.tier == "batch" and e.finished > cancelled_at.timestamp() + 1]
    assert later == []
