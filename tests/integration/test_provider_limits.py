"""What a provider's limits and refusals do to a task: nothing strands it.

A stand-in whose context window is small, with no DOCSUM_LLM_CONTEXT_TOKENS set: docsum learns the
window from the first refusals (stored in Postgres for every replica) and plans every request under
it. A window too small for a part of a chunk fails that chunk with a message naming the setting. A
merge refused for another reason fails its document with the provider's message. Each test runs its
own stand-in, so its learned window and its ledger are its own, and the pipeline in-process (what is
tested is what the settings and the provider's answers do, not processes or the broker).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from tests.documents import chinese_prose, english_prose, make_pdf
from tests.fake_llm import FakeLLM, FakeLLMServer
from tests.integration.conftest import AnyStack, StackFactory
from tests.integration.helpers import dlq_names, wait_for_task

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


async def _run(stack: AnyStack, files: list[tuple[str, bytes, str]], **form: str) -> dict[str, Any]:
    async with stack.client() as client:
        created = await client.post("/v1/tasks", files=[("files", f) for f in files], data=form or None)
        assert created.status_code == 201, created.text
        return await wait_for_task(client, created.json()["task_id"], stack, timeout=300)


def _by_name(task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["filename"]: d for d in task["documents"]}


async def _learned(db: asyncpg.Pool, server: FakeLLMServer) -> int | None:
    return await db.fetchval("SELECT context_tokens FROM llm_endpoints WHERE key LIKE $1", f"{server.base_url}|%")


async def test_a_small_window_is_learned_and_every_document_completes(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    server.llm.configure(max_prompt_tokens=2_000)
    stack = make_stack.in_process(OPENAI_BASE_URL=server.base_url)
    pages = [english_prose(1_100, seed=1000 + i) for i in range(200)]
    files = [
        ("report.pdf", make_pdf(pages), "application/pdf"),
        ("长文.txt", chinese_prose(30_000, seed=7).encode(), "text/plain"),
        ("note.txt", english_prose(1_500, seed=8).encode(), "text/plain"),
    ]
    task = await _run(stack, files)

    assert task["status"] == "COMPLETED", task
    assert all(d["status"] == "COMPLETED" and d["summary"] for d in task["documents"])
    assert len(task["documents"][0]["summary"]) > 0 and task["summary"]
    assert await _learned(db, server) == 2_000  # the window the provider stated, shared by every replica
    refused = server.llm.entries(status=400)
    assert all(e.over_budget for e in refused)
    # A handful of refusals at most (the calls in flight when the first one came back), then none.
    assert 0 < len(refused) <= 6, len(refused)
    last_refusal = max(e.finished for e in refused)
    assert all(not e.over_budget for e in server.llm.entries() if e.started > last_refusal)
    print(f"\nrefused before staying under the window: {len(refused)} of {len(server.llm.entries())} requests")


async def test_a_window_too_small_for_a_part_fails_that_chunk_and_nothing_is_redriven(
    make_stack: StackFactory, server: FakeLLMServer, db: asyncpg.Pool
) -> None:
    # Room for about 190 characters of English per request (beside the ~90 tokens asking for citations), but
    # for only about 60 Chinese characters:
    # English chunks go in parts, a Chinese chunk cannot be cut into parts of a useful size.
    server.llm.configure(max_prompt_tokens=381)
    stack = make_stack.in_process(
        OPENAI_BASE_URL=server.base_url, DOCSUM_RECONCILE_IDLE_S="2", DOCSUM_MAINTENANCE_INTERVAL_S="1"
    )
    mixed = english_prose(6_000, seed=21) + "\n\n" + chinese_prose(2_500, seed=22)
    files = [("mixed.txt", mixed.encode(), "text/plain"), ("short.txt", b"A short note.", "text/plain")]
    lenient, strict = await asyncio.gather(_run(stack, files), _run(stack, files, strict="true"))

    assert lenient["status"] == "COMPLETED_WITH_ERRORS", [(d["chunks"], d["coverage"]) for d in lenient["documents"]]
    doc = _by_name(lenient)["mixed.txt"]
    assert doc["status"] == "COMPLETED" and 0 < doc["coverage"] < 1, doc  # partial, and says so
    assert "could not be read" in doc["summary"]
    async with stack.client() as client:
        listed = (await client.get(f"/v1/tasks/{lenient['task_id']}/failures")).json()
    assert listed and all("DOCSUM_LLM_CONTEXT_TOKENS" in f["error"] for f in listed), listed
    assert all("context window" in f["error"] and "381" in f["error"] for f in listed), listed
    assert _by_name(strict)["mixed.txt"]["status"] == "FAILED" and strict["status"] == "COMPLETED_WITH_ERRORS"

    # Final means final: reconcile (every second here) re-drives nothing more, and nothing is sent.
    ids = [lenient["task_id"], strict["task_id"]]
    query = "SELECT redrives FROM tasks WHERE id = ANY($1::text[]) ORDER BY id"
    sent, redrives = len(server.llm.entries()), [r["redrives"] for r in await db.fetch(query, ids)]
    await asyncio.sleep(5)  # the subject: several reconcile rounds pass with nothing to do
    assert [r["redrives"] for r in await db.fetch(query, ids)] == redrives and len(server.llm.entries()) == sent


async def test_a_merge_refused_for_another_reason_fails_its_document_and_the_task_finishes(
    make_stack: StackFactory, server: FakeLLMServer
) -> None:
    # The provider refuses every document merge (their prompts share these words); chunks pass.
    server.llm.configure(reject_marker="summaries of consecutive parts")
    stack = make_stack.in_process(OPENAI_BASE_URL=server.base_url)
    files = [
        ("long.txt", english_prose(20_000, seed=31).encode(), "text/plain"),
        ("short.txt", english_prose(1_500, seed=32).encode(), "text/plain"),
    ]
    task = await _run(stack, files)

    assert task["status"] == "COMPLETED_WITH_ERRORS", task
    long_doc = _by_name(task)["long.txt"]
    assert long_doc["status"] == "FAILED" and "rejected this prompt" in long_doc["error"], long_doc
    assert "400" in long_doc["error"]
    assert _by_name(task)["short.txt"]["status"] == "COMPLETED"
    refused = [e for e in server.llm.entries(status=400) if "summaries of consecutive parts" in e.prompt]
    assert len(refused) == 1  # a refusal is final: not retried, not re-driven
    assert await stack.read_topics(dlq_names(stack.env)) == []


class _CountedPool:
    """The session's pool, counting the reads sent through it."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool, self.reads = pool, 0

    async def fetchrow(self, query: str, *args: object) -> asyncpg.Record | None:
        self.reads += 1
        return await self.pool.fetchrow(query, *args)


async def test_many_calls_finding_the_budget_stale_read_it_once(repository_db: asyncpg.Pool) -> None:
    """A summarizer's handlings all ask for the budget at once when it goes stale: one query answers them
    all (each sent its own, dozens every REFRESH_S), and each plans under what is stored."""
    from docsum_llm.openai.endpoint import EndpointLimits

    key = f"http://limits.test/{uuid.uuid4().hex}|m"
    await repository_db.execute(
        "INSERT INTO llm_endpoints (key, context_tokens, learned_from) VALUES ($1, 3000, 'refused: test')", key
    )
    counted = _CountedPool(repository_db)
    limits = EndpointLimits(counted, key, configured=8000)  # type: ignore[arg-type]
    budgets = await asyncio.gather(*(limits.budget() for _ in range(32)))
    assert budgets == [3000] * 32
    assert counted.reads == 1


async def test_an_endpoint_that_states_no_window_is_asked_once(
    repository_db: asyncpg.Pool, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI's API answers the probe with no window. Asking again changes nothing, and every call of the
    process waits for the probe: it is asked once, not once a minute (a minute here: at once)."""
    import docsum_llm
    from docsum_llm import Summarizing
    from docsum_shared.settings import LLMSettings

    monkeypatch.setattr(docsum_llm, "PROBE_AGAIN_S", 0.0)
    settings = LLMSettings(
        database_url="postgresql://unused", llm_backend="openai", llm_model="stand-in-1",
        openai_base_url=server.base_url, openai_api_key="k",
    )  # fmt: skip
    llm = Summarizing.from_settings(settings, repository_db)
    probes = 0
    real_probe = llm.backend.probe  # type: ignore[attr-defined]

    async def counted() -> object:
        nonlocal probes
        probes += 1
        return await real_probe()

    llm.backend.probe = counted  # type: ignore[attr-defined]
    try:
        assert [await llm.budget() for _ in range(3)] == [None] * 3
    finally:
        await llm.aclose()
    assert probes == 1
