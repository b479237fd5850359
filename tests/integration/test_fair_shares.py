"""Fair shares between owners, on the real stack: one owner's backlog never freezes another's.

Alice's long document is admitted a few chunks at a time (DOCSUM_ADMISSION_WINDOW); bob's one-chunk note,
submitted behind her backlog, is admitted at the next free slot, as his counter is the lowest: served
after at most the chunks admitted before it was ready, not after alice's backlog.
"""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fake_llm import FakeLLMServer
from tests.integration.conftest import SERVICES, StackFactory
from tests.integration.helpers import (
    chunk_calls,
    chunks_of,
    eventually,
    marked_text,
    new_marker,
    submit,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

WINDOW = 3  # chunks admitted and unfinished at once
INFLIGHT = 2  # calls in flight per summarizer
FAIR = {
    "DOCSUM_ADMISSION_WINDOW": str(WINDOW),
    "DOCSUM_LLM_MAX_INFLIGHT": str(INFLIGHT),
    "DOCSUM_MAX_INFLIGHT": "4",
    "DOCSUM_CHUNK_CHARS": "600",
    "DOCSUM_OVERLAP_CHARS": "50",
}


@pytest.fixture
def slow_calls(llm: FakeLLMServer) -> Iterator[None]:
    """Each call takes a while, so that alice's backlog is still long when bob arrives."""
    llm.llm.configure(latency_s=0.1)
    try:
        yield
    finally:
        llm.llm.configure(latency_s=0.0)


async def test_a_one_chunk_task_behind_another_owners_backlog_is_served_at_the_next_free_slot(
    make_stack: StackFactory, llm: FakeLLMServer, db: asyncpg.Pool, slow_calls: None
) -> None:
    stack = make_stack(SERVICES, **FAIR)
    alices_marker, bobs_marker = new_marker(), new_marker()
    backlog = marked_text(30_000, seed=33, marker=alices_marker)
    async with stack.client("alice") as alice, stack.client("bob") as bob:
        alices = await submit(alice, [txt("backlog.txt", backlog)])

        async def alice_under_way() -> bool:
            return len(chunk_calls(llm, alices_marker)) >= 2

        await eventually(alice_under_way, timeout=60, message="alice's first calls", stack=stack)
        bobs = await submit(bob, [txt("note.txt", f"{bobs_marker} A short note of bob's. {bobs_marker}")])
        bobs_task = await wait_for_task(bob, bobs, stack)
        alices_task = await wait_for_task(alice, alices, stack)
    assert bobs_task["status"] == alices_task["status"] == "COMPLETED"

    alices_chunks = await chunks_of(db, alices)
    [bobs_chunk] = await chunks_of(db, bobs)
    ready = await db.fetchval("SELECT extract(epoch FROM ready_at) FROM chunks WHERE id = $1", bobs_chunk["id"])
    [bobs_call] = chunk_calls(llm, bobs_marker)
    # Alice's calls that started after bob's chunk was ready and before bob's call: at most those of her
    # chunks admitted already (the window), not the rest of her backlog.
    between = [e for e in chunk_calls(llm, alices_marker) if float(ready) <= e.started < bobs_call.started]
    assert len(alices_chunks) > 40
    assert len(between) <= WINDOW, f"{len(between)} of alice's {len(alices_chunks)} chunks went before bob's"


async def test_an_urgent_task_behind_its_owners_normal_backlog_goes_first(
    make_stack: StackFactory, llm: FakeLLMServer, db: asyncpg.Pool, slow_calls: None
) -> None:
    stack = make_stack(SERVICES, **FAIR)
    backlog_marker, urgent_marker = new_marker(), new_marker()
    async with stack.client("alice") as alice:
        backlog = await submit(alice, [txt("backlog.txt", marked_text(30_000, seed=34, marker=backlog_marker))])

        async def under_way() -> bool:
            return len(chunk_calls(llm, backlog_marker)) >= 2

        await eventually(under_way, timeout=60, message="the backlog's first calls", stack=stack)
        note = f"{urgent_marker} An urgent note. {urgent_marker}"
        urgent = await submit(alice, [txt("urgent.txt", note)], priority="urgent")
        assert (await wait_for_task(alice, urgent, stack))["status"] == "COMPLETED"
        assert (await wait_for_task(alice, backlog, stack))["status"] == "COMPLETED"
    [urgent_chunk] = await chunks_of(db, urgent)
    ready = await db.fetchval("SELECT extract(epoch FROM ready_at) FROM chunks WHERE id = $1", urgent_chunk["id"])
    [urgent_call] = chunk_calls(llm, urgent_marker)
    between = [e for e in chunk_calls(llm, backlog_marker) if float(ready) <= e.started < urgent_call.started]
    assert len(between) <= WINDOW, f"{len(between)} of the backlog's chunks went before the urgent one"

    # Seen: the tokens served per priority, the work waiting per priority (none now), and no owner label.
    async with httpx.AsyncClient() as http:
        page = (await http.get(f"http://127.0.0.1:{stack.health_ports['summarizer']}/metrics")).text
    samples = [
        s
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name in ("docsum_tokens_served_total", "docsum_ready_chunks")
    ]
    assert {label for s in samples for label in s.labels} == {"priority"}
    served = {s.labels["priority"]: s.value for s in samples if s.name == "docsum_tokens_served_total"}
    assert served["normal"] > served["urgent"] > 0
    waiting = {s.labels["priority"] for s in samples if s.name == "docsum_ready_chunks"}
    assert waiting == {"urgent", "normal", "background"}
