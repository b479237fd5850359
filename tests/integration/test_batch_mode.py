"""Batch mode through the running services, against the stand-in's Batch API on a scaled clock (a "24 h"
window lasts seconds): the same documents end as in realtime for at most 0.56x the price; a batch whose
create answer is lost is adopted, not paid twice; the summarizer killed -9 at each step of a batch's life
ends with every chunk done and no line paid twice; an expired batch keeps its answered lines and the rest
finish in realtime; cancelling a task cancels its batch.

The tests run their own stand-in provider, so its ledger belongs to them alone, and the pipeline
in-process (what is tested is what batch mode does, not processes or the broker), except the kills: they
run the services as processes on Kafka, with a stand-in of their own (a batch belongs to its endpoint, so
neither stack's driver touches the other's batches)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from docsum_summarizer.batches.policy import batch_endpoint
from docsum_summarizer.batches.repository import BatchRepository
from docsum_summarizer.settings import SummarizerSettings
from tests.fake_batches import cost_by_tier
from tests.fake_llm import FakeLLM, FakeLLMServer, LedgerEntry
from tests.integration.conftest import SERVICES, AnyStack, Stack, StackFactory
from tests.integration.helpers import (
    calls,
    chunk_calls,
    eventually,
    get_task,
    marked_text,
    new_marker,
    read_sse,
    submit,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

PRICES = {"stand-in-1": [2.0, 8.0]}
# A provider second lasts 1/3600 s: validating 30 s -> 8 ms, each line 2 s -> 0.6 ms, finalizing -> 8 ms.
SCALE = 1 / 3600
BATCH_ENV = {
    "DOCSUM_LLM_PRICES": '{"stand-in-1": [2.0, 8.0]}',
    "DOCSUM_LLM_BATCH_POLL_S": "0.2",
    "DOCSUM_LLM_BATCH_GATHER_S": "0.3",
    "DOCSUM_LLM_BATCH_DEADLINE_MARGIN_S": "0",
    "DOCSUM_LEASE_TTL_S": "4",  # a killed summarizer's chunk is taken over within seconds
}


@pytest.fixture(scope="module")
def _provider() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture(scope="module")
def stack(make_stack: StackFactory, _provider: FakeLLMServer) -> Iterator[AnyStack]:
    """One pipeline for the module: each test uses new text (its marker), so no answer is cached across
    tests, and its own knobs of the module's stand-in."""
    stack = make_stack.in_process(None, twice=False, **BATCH_ENV, OPENAI_BASE_URL=_provider.base_url)
    yield stack
    stack.stop_all()


def _configured(provider: FakeLLMServer) -> Iterator[FakeLLMServer]:
    provider.llm.reset(config=True)
    provider.llm.configure(prices=PRICES, batch_time_scale=SCALE)
    yield provider
    provider.llm.configure(batch_hold=[])  # nothing stays held for the next test


@pytest.fixture
def server(_provider: FakeLLMServer) -> Iterator[FakeLLMServer]:
    yield from _configured(_provider)


@pytest.fixture(scope="module")
def _processes_provider() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture(scope="module")
def _processes(make_stack: StackFactory, _processes_provider: FakeLLMServer) -> Iterator[Stack]:
    """The services as processes on Kafka, for the tests that kill one (a stack start is ~10 s)."""
    stack = make_stack(SERVICES, **{**BATCH_ENV, "OPENAI_BASE_URL": _processes_provider.base_url})
    yield stack
    stack.stop_all()


@pytest.fixture
def processes_server(_processes_provider: FakeLLMServer) -> Iterator[FakeLLMServer]:
    yield from _configured(_processes_provider)


@pytest.fixture
def processes(_processes: Stack) -> Stack:
    """The module's stack of processes, every service running (a test may have killed one)."""
    for name in SERVICES:
        process = _processes.processes.get(name)
        if process is None or process.poll() is not None:
            _processes.processes.pop(name, None)
            _processes.start(name)
    _processes.wait_ready()
    return _processes


async def _batch_task(stack: AnyStack, *files: Any, **form: str) -> dict[str, Any]:
    """Alice's task of `files` in batch mode, once it ended."""
    async with stack.client("alice") as client:
        return await wait_for_task(client, await submit(client, list(files), mode="batch", **form), stack)


def _statuses(task: dict) -> tuple[str, list[tuple[str, str]]]:
    return task["status"], [(d["filename"], d["status"]) for d in task["documents"]]


def _paid_twice(entries: list[LedgerEntry]) -> list[str]:
    """custom_ids the provider answered (and billed) more than once."""
    answered = Counter(e.custom_id for e in entries if e.tier == "batch" and e.status == 200)
    return [custom_id for custom_id, n in answered.items() if custom_id and n > 1]


async def _batches_in(db: asyncpg.Pool, task_id: str, state: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM llm_batches WHERE task_id = $1 AND state = $2", task_id, state))


async def test_batch_mode_ends_as_realtime_does_for_at_most_056_of_its_price(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
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
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_lose_create_next=1)
    marker = new_marker()
    task = await _batch_task(stack, txt("c.txt", marked_text(6_000, 93, marker)))
    assert task["status"] == "COMPLETED"
    entries = calls(provider, marker)
    assert _paid_twice(entries) == [] and {e.tier for e in entries if "<text>\n" in e.prompt} == {"batch"}
    batches = await db.fetch("SELECT outcome FROM llm_batches WHERE task_id = $1", task["task_id"])
    assert [r["outcome"] for r in batches] == ["completed"]  # one batch: the lost create's, adopted


@pytest.mark.parametrize("point", ["upload", "create", "created", "retrieve", "content"])
async def test_the_summarizer_killed_at_each_step_of_a_batch_pays_no_line_twice(
    processes: Stack, processes_server: FakeLLMServer, point: str
) -> None:
    stack, provider = processes, processes_server.llm
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
    stack: AnyStack, server: FakeLLMServer
) -> None:
    provider = server.llm
    # Two lines run, then nothing until the window's end: a 24 h window lasts 2.4 s on this clock.
    provider.configure(batch_expire_after_lines=2, batch_time_scale=1 / 36_000)
    marker = new_marker()
    task = await _batch_task(stack, txt("e.txt", marked_text(12_000, 95, marker)))
    assert task["status"] == "COMPLETED"
    entries = chunk_calls(provider, marker)
    tiers = Counter(e.tier for e in entries)
    assert tiers["batch"] == 2 and tiers["realtime"] >= 1 and set(tiers) == {"batch", "realtime"}
    batch_prompts = {e.prompt_sha256 for e in entries if e.tier == "batch"}
    assert not batch_prompts & {e.prompt_sha256 for e in entries if e.tier == "realtime"}  # none asked again


async def test_cancelling_a_batch_task_cancels_its_batch_and_no_later_line_is_paid(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_in_progress_s=3600 * 2)  # two provider hours: ~2 s for all its lines
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


async def test_a_batch_that_would_miss_the_deadline_is_cancelled_and_the_rest_finish_in_realtime_before_it(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    # All its lines take 60 provider hours: a minute here, at the pace of its first lines far past the
    # deadline of 40 s, which the driver sees once a line is done.
    provider.configure(batch_in_progress_s=3600 * 60)
    marker = new_marker()
    task = await _batch_task(stack, txt("g.txt", marked_text(12_000, 97, marker)), deadline="40s")
    assert task["status"] == "COMPLETED"
    deadline = datetime.fromisoformat(task["options"]["deadline"])
    assert datetime.fromisoformat(task["updated_at"]) < deadline
    batches = await db.fetch("SELECT outcome, cancel_reason FROM llm_batches WHERE task_id = $1", task["task_id"])
    assert [(r["outcome"], "deadline" in (r["cancel_reason"] or "")) for r in batches] == [("cancelled", True)]
    entries = chunk_calls(provider, marker)
    tiers = Counter(e.tier for e in entries)
    assert tiers["batch"] >= 1 and tiers["realtime"] >= 1 and set(tiers) == {"batch", "realtime"}
    assert len({e.prompt_sha256 for e in entries}) == len(entries)  # no chunk paid at both tiers
    # Its progress stream told the batch as it went: what it waited for, and its deadline.
    auth = {"Authorization": f"Bearer {stack.keys['alice']}"}
    _, told = await read_sse(stack.gateway_url, task["task_id"], auth, after=0)
    waits = [e["batch"] for e in told if e["kind"] == "batch-moved" and e["batch"]["state"] == "waiting"]
    chunks = sum(d["chunks"]["total"] for d in task["documents"])
    assert waits and all(b["lines"] == chunks and b["deadline"] and b["submitted_at"] for b in waits)


async def test_failed_lines_are_called_in_realtime_and_the_answered_ones_kept(
    stack: AnyStack, server: FakeLLMServer
) -> None:
    provider = server.llm
    provider.configure(batch_fail_lines=[0, 2, 4])  # of its one batch's 9 lines
    marker = new_marker()
    task = await _batch_task(stack, txt("h.txt", marked_text(12_000, 98, marker)))
    assert task["status"] == "COMPLETED"
    entries = [e for e in calls(provider, marker) if "<text>\n" in e.prompt]
    failed = {e.prompt_sha256 for e in entries if e.tier == "batch" and e.status != 200}
    answered = {e.prompt_sha256: e.tier for e in entries if e.status == 200}
    assert failed and all(answered[p] == "realtime" for p in failed)  # each failed line answered in realtime
    assert "batch" in answered.values() and _paid_twice(entries) == []
    assert len(answered) == sum(d["chunks"]["total"] for d in task["documents"])


async def test_a_batch_over_the_enqueued_token_cap_is_split_and_sent_again(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_enqueued_token_limit=2_500)
    marker = new_marker()
    task = await _batch_task(stack, txt("i.txt", marked_text(12_000, 99, marker)))
    assert task["status"] == "COMPLETED"
    outcomes = Counter(
        r["outcome"] for r in await db.fetch("SELECT outcome FROM llm_batches WHERE task_id = $1", task["task_id"])
    )
    assert outcomes["split"] >= 1 and outcomes["completed"] >= 2
    entries = chunk_calls(provider, marker)
    assert _paid_twice(entries) == [] and Counter(e.tier for e in entries)["batch"] >= 2


async def test_pausing_a_batch_task_cancels_its_batch_and_resuming_finishes_it(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_in_progress_s=3600 * 120)  # two minutes here: it is still running when paused
    marker = new_marker()
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("j.txt", marked_text(6_000, 100, marker))], mode="batch")
        await eventually(lambda: _batches_in(db, task_id, "submitted"), timeout=60)
        assert (await client.post(f"/v1/tasks/{task_id}/pause")).status_code < 300
        await eventually(lambda: _batches_in(db, task_id, "ended"), timeout=60)
        provider.configure(batch_in_progress_s=None)  # the next batch runs at the usual pace
        assert (await client.post(f"/v1/tasks/{task_id}/resume")).status_code < 300
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED"
    rows = await db.fetch(
        "SELECT outcome, cancel_reason FROM llm_batches WHERE task_id = $1 ORDER BY created_at", task_id
    )
    assert [r["outcome"] for r in rows] == ["cancelled", "completed"]
    assert "paused" in rows[0]["cancel_reason"]
    entries = chunk_calls(provider, marker)
    assert _paid_twice(entries) == [] and {e.tier for e in entries} == {"batch"}


async def test_the_same_request_is_one_line_and_a_cached_answer_never_enters_a_batch(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    marker = new_marker()
    text = marked_text(6_000, 101, marker)
    # Two copies of one file: each of their chunks asks the same request (one custom_id, one line).
    files = [txt("k.txt", text), txt("k-copy.txt", text)]
    async with stack.client("alice") as client:
        first = await wait_for_task(client, await submit(client, files, mode="batch"), stack)
        second = await wait_for_task(client, await submit(client, files, mode="batch"), stack)
    assert first["status"] == second["status"] == "COMPLETED"
    lines = [e for e in calls(provider, marker) if e.tier == "batch"]
    chunks = sum(d["chunks"]["total"] for d in first["documents"])
    assert len(lines) == chunks // 2 and _paid_twice(lines) == []  # the copy's chunks were not sent
    assert await db.fetchval("SELECT count(*) FROM llm_batches WHERE task_id = $1", second["task_id"]) == 0
    assert second["usage"]["cost_usd"] == 0 and second["usage"]["cached_calls"] >= chunks


async def test_a_batch_the_provider_lost_has_its_lines_sent_again(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_in_progress_s=3600 * 120)  # still running when the provider loses it
    marker = new_marker()
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("l.txt", marked_text(6_000, 102, marker))], mode="batch")
        await eventually(lambda: _batches_in(db, task_id, "submitted"), timeout=60)
        provider.configure(batch_in_progress_s=None)
        lost = await db.fetchval("SELECT provider_id FROM llm_batches WHERE task_id = $1", task_id)
        assert provider.batches.lose(lost)
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED"
    rows = await db.fetch("SELECT outcome FROM llm_batches WHERE task_id = $1 ORDER BY created_at", task_id)
    assert [r["outcome"] for r in rows] == ["lost", "completed"]
    entries = chunk_calls(provider, marker)
    assert {e.tier for e in entries} == {"batch"} and _paid_twice(entries) == []


async def test_a_batch_belongs_to_its_endpoint_and_no_other_driver_touches_it(
    stack: AnyStack, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    provider = server.llm
    provider.configure(batch_in_progress_s=3600 * 120)  # still running while the test looks
    marker = new_marker()
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("m.txt", marked_text(3_000, 103, marker))], mode="batch")
    await eventually(lambda: _batches_in(db, task_id, "submitted"), timeout=60)
    here = SummarizerSettings(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test-key", llm_model="stand-in-1")
    ours = BatchRepository(db, batch_endpoint(here))
    another = BatchRepository(db, batch_endpoint(here.model_copy(update={"openai_base_url": "http://another/v1"})))
    another_account = BatchRepository(db, batch_endpoint(here.model_copy(update={"openai_api_key": "another-key"})))
    assert task_id in [b.task_id for b in await ours.open_batches()]
    assert task_id not in [b.task_id for b in await another.open_batches()]
    assert task_id not in [b.task_id for b in await another_account.open_batches()]
