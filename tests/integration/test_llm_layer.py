"""The LLM layer against a provider with limits: concurrency, a shared rate limit, budgets, usage.

Each test runs its own stand-in provider, so its limits and its ledger belong to that test alone. Usage
and cost run the pipeline in-process (what is tested is what the prices and the provider's answers add
up to); the others run the services as processes on Kafka: a crash of the summarizer and of the merger
mid-way, one partition of the chunk topic, two summarizer replicas sharing one rate.
"""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import pytest

from tests.documents import english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer
from tests.integration.conftest import StackFactory
from tests.integration.helpers import eventually, resolved_sentences, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


async def test_one_partition_keeps_the_in_flight_limit_busy(make_stack: StackFactory, server: FakeLLMServer) -> None:
    provider = server.llm
    provider.configure(latency_s=0.6)
    stack = make_stack(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_CHUNK_TOPIC_PARTITIONS="1",
        DOCSUM_LLM_MAX_INFLIGHT="8",
        DOCSUM_LEASE_TTL_S="4",
        # A kill between the admission's commit and its publish loses that round's announcements: sent
        # again once unleased this long (the default minute would be most of the test's time).
        DOCSUM_ADMISSION_HOLD_S="5",
    )
    async with stack.client() as client:
        task_id = await submit(client, [txt("wide.txt", english_prose(70_000, seed=41))])
        await eventually(
            lambda: provider.count() >= 16, timeout=120, interval=0.2, message="16 answered calls", stack=stack
        )
        stack.kill("summarizer")  # a crash mid-way...
        stack.start("summarizer")
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED"  # ... loses nothing
    assert provider.max_in_flight == 8  # the limit is filled from one partition, and never exceeded
    assert provider.repeats() <= 8  # at most what was in flight at the crash is paid twice


async def test_usage_and_cost_add_up_to_the_providers_ledger(make_stack: StackFactory, server: FakeLLMServer) -> None:
    provider = server.llm
    stack = make_stack.in_process(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_LLM_PRICES='{"stand-in-1": [2.0, 8.0]}',
    )
    files = [txt("a.txt", english_prose(30_000, seed=51)), txt("b.txt", english_prose(3_000, seed=52))]
    async with stack.client() as client:
        task = await wait_for_task(client, await submit(client, files), stack)
    assert task["status"] == "COMPLETED"
    prompt, completion = provider.tokens()
    usage = task["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt, completion)
    assert usage["llm_calls"] == provider.count() and usage["cached_calls"] == 0
    assert usage["cost_usd"] == pytest.approx((prompt * 2.0 + completion * 8.0) / 1e6)
    per_document = sum(d["usage"]["prompt_tokens"] for d in task["documents"])
    assert 0 < per_document < usage["prompt_tokens"]  # the task merge is booked to the task only
    assert task["estimate"]["remaining_chunks"] == 0


async def test_a_rate_limited_provider_refuses_few_calls_from_two_replicas(
    make_stack: StackFactory, server: FakeLLMServer
) -> None:
    # The provider accepts 10 requests per 5 s (120/min); the cluster is told 120/min.
    provider = server.llm
    provider.configure(rpm_limit=10, rate_window_s=5.0, latency_s=0.05)
    stack = make_stack(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_LLM_RPM="120",
        DOCSUM_LLM_MAX_INFLIGHT="4",
        DOCSUM_LLM_MAX_ATTEMPTS="2",
    )
    stack.start("summarizer-2")
    async with stack.client() as client:
        task_id = await submit(client, [txt("paced.txt", english_prose(50_000, seed=61))])
        task = await wait_for_task(client, task_id, stack, timeout=240)
    assert task["status"] == "COMPLETED"
    assert all(d["chunks"]["failed"] == 0 for d in task["documents"])
    refused, answered = provider.count(429), provider.count(200)
    assert answered >= 25
    assert refused < 0.05 * (refused + answered), f"{refused} of {refused + answered} calls refused"


async def test_a_thousand_chunks_merge_in_a_tree_within_the_budget(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    budget = 1_500
    provider = server.llm
    # The chunks' calls answer in 0.02 s (a thousand of them at 0.2 s, 16 at a time, were 14 s of the test);
    # the tree's merges take 0.2 s each as before, so that the kill lands on merges in flight.
    provider.configure(max_prompt_tokens=budget, latency_s=0.02)
    stack = make_stack(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_CHUNK_CHARS="300",
        DOCSUM_OVERLAP_CHARS="30",
        DOCSUM_CONTEXT_AFTER_CHARS="60",
        DOCSUM_LLM_CONTEXT_TOKENS=str(budget),
        DOCSUM_LLM_MAX_INFLIGHT="16",
    )
    async with stack.client() as client:
        task_id = await submit(client, [txt("book.txt", english_prose(290_000, seed=71))])
        document_id = await db.fetchval("SELECT id FROM documents WHERE task_id = $1", task_id)

        async def every_chunk_summarized() -> bool:
            row = await db.fetchrow("SELECT chunk_total, chunks_completed FROM documents WHERE id = $1", document_id)
            return row["chunk_total"] is not None and row["chunks_completed"] >= row["chunk_total"]

        await eventually(every_chunk_summarized, timeout=300, interval=0.05, message="every chunk summarized")
        provider.configure(latency_s=0.2)

        async def some_nodes_stored() -> bool:
            return (await db.fetchval("SELECT count(*) FROM merge_nodes WHERE scope_id = $1", document_id)) >= 5

        await eventually(some_nodes_stored, timeout=300, interval=0.2, message="the first merge nodes", stack=stack)
        stack.kill("merger")  # mid-tree
        nodes_before = await db.fetchval("SELECT count(*) FROM merge_nodes WHERE scope_id = $1", document_id)
        stack.start("merger")
        task = await wait_for_task(client, task_id, stack, timeout=300)

    assert task["status"] == "COMPLETED"
    assert task["documents"][0]["chunks"]["total"] >= 1_000
    levels = await db.fetch(
        "SELECT level, count(*) AS nodes FROM merge_nodes WHERE scope_id = $1 GROUP BY level ORDER BY level",
        document_id,
    )
    assert len(levels) > 1, levels  # a real tree
    assert provider.count(400) == 0 and not [e for e in provider.entries() if e.over_budget]
    assert max(e.prompt_tokens for e in provider.entries()) <= budget
    # Nodes finished before the kill were answered from the cache on the way back up: only the node
    # (or nodes) in flight at the kill can have been paid twice.
    assert nodes_before >= 5
    assert provider.repeats() <= 16
    # The resumed tree keeps its sources: every node holds its sentences, and the document's resolve down
    # to ranges of the book's text.
    assert (
        await db.fetchval("SELECT count(*) FROM merge_nodes WHERE scope_id = $1 AND sentences IS NULL", document_id)
        == 0
    )
    sentences = await resolved_sentences(db, task)
    assert sentences and all(s["support"] == "cited" and s["sources"] for s in sentences), sentences
