"""Fair shares between owners, on the real stack: one owner's backlog never freezes another's.

Alice's long document is admitted a few chunks at a time (DOCSUM_ADMISSION_WINDOW); bob's one-chunk note,
submitted behind her backlog, is admitted at the next free slot, as his counter is the lowest: served
after at most the chunks admitted before it was ready, not after alice's backlog.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import asyncpg
import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from docsum_shared.events import Topic
from tests.fake_llm import FakeLLMServer, LedgerEntry
from tests.integration.conftest import SERVICES, Server, Stack, StackFactory, create_database, drop_database
from tests.integration.helpers import (
    chunk_calls,
    chunks_of,
    eventually,
    marked_text,
    new_marker,
    paid_twice,
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


async def stored_at(db: asyncpg.Pool, task_id: str, stack: Stack) -> float:
    """When a query of this test first found the task's chunks stored: its snapshot began after the
    chunker's commit, so any admission round that began later sees them too."""

    async def stored() -> bool:
        return bool(await chunks_of(db, task_id))

    await eventually(stored, timeout=60, interval=0.02, message=f"task {task_id}'s chunks", stack=stack)
    return time.time()


async def admitted_ahead(db: asyncpg.Pool, task_id: str, since: float, chunk_id: str) -> int:
    """How many of `task_id`'s chunks rounds that began after `since` admitted before chunk `chunk_id`
    (the round that admitted it may have admitted some of theirs too, at the same instant: not counted)."""
    ahead: int = await db.fetchval(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.task_id = $1 AND c.admitted_at > to_timestamp($2)"
        " AND c.admitted_at < (SELECT admitted_at FROM chunks WHERE id = $3)",
        task_id, since, chunk_id,
    )  # fmt: skip
    return ahead


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
        seen = await stored_at(db, bobs, stack)
        bobs_task = await wait_for_task(bob, bobs, stack)
        alices_task = await wait_for_task(alice, alices, stack)
    assert bobs_task["status"] == alices_task["status"] == "COMPLETED"

    alices_chunks = await chunks_of(db, alices)
    [bobs_chunk] = await chunks_of(db, bobs)
    # Bob's chunk took the next free slot: once it was stored, no round admitted any of alice's before
    # it (those admitted already, the window, went first; not the rest of her backlog).
    assert len(alices_chunks) > 40
    assert await admitted_ahead(db, alices, seen, bobs_chunk["id"]) == 0
    assert any(c["admitted_at"] > bobs_chunk["admitted_at"] for c in alices_chunks)  # her backlog was not over


@pytest.fixture
def slower_calls(llm: FakeLLMServer) -> Iterator[None]:
    """Calls long beside a chunk's way from its admission to its summarizer, so that the backlog's spare
    chunks in hand when the newcomer's reaches the summarizer are those in hand when it was admitted."""
    llm.llm.configure(latency_s=0.3)
    try:
        yield
    finally:
        llm.llm.configure(latency_s=0.0)


async def test_a_newcomers_chunk_is_called_before_the_backlogs_spare_chunks_already_in_hand(
    make_stack: StackFactory, llm: FakeLLMServer, db: asyncpg.Pool, slower_calls: None
) -> None:
    """With the default spare (three times the calls in flight, announced behind them), the summarizer
    holds every chunk admitted to it and calls them in their rank's order: bob's chunk, admitted after
    alice's spare but ahead of it in the fair order, is called before them, not after all of them."""
    spare = 3 * INFLIGHT
    stack = make_stack(SERVICES, **{k: v for k, v in FAIR.items() if k != "DOCSUM_ADMISSION_WINDOW"})
    alices_marker, bobs_marker = new_marker(), new_marker()
    async with stack.client("alice") as alice, stack.client("bob") as bob:
        alices = await submit(alice, [txt("backlog.txt", marked_text(30_000, seed=35, marker=alices_marker))])

        async def spare_in_hand() -> bool:
            in_hand = await db.fetchval(
                "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id"
                " WHERE d.task_id = $1 AND c.admitted_at IS NOT NULL AND c.status IN ('PENDING', 'SUMMARIZING')",
                alices,
            )
            # The window less its last slot, which waits for whoever arrives once alice's calls run.
            return len(chunk_calls(llm, alices_marker)) >= 2 and in_hand >= INFLIGHT + spare - 1

        await eventually(spare_in_hand, timeout=60, interval=0.02, message="alice's spare admitted", stack=stack)
        bobs = await submit(bob, [txt("note.txt", f"{bobs_marker} A short note of bob's. {bobs_marker}")])
        assert (await wait_for_task(bob, bobs, stack))["status"] == "COMPLETED"
        assert (await wait_for_task(alice, alices, stack))["status"] == "COMPLETED"

    [bobs_chunk] = await chunks_of(db, bobs)
    [bobs_call] = chunk_calls(llm, bobs_marker)
    called_at = {_called_text(e): e.started for e in reversed(chunk_calls(llm, alices_marker))}  # its first
    before_his = [c for c in await chunks_of(db, alices) if c["admitted_at"] < bobs_chunk["admitted_at"]]
    called_after_his = [c for c in before_his if called_at[" ".join(c["text"].split())] > bobs_call.started]
    # Alice's chunks admitted before his (her calls running and her spare in hand, as he was admitted
    # when one of hers finished): most of her spare is called after his chunk, not before it. In the
    # order they reached the summarizer, none would be (his came last).
    assert len(called_after_his) >= spare // 2, (len(before_his), len(called_after_his))


# The chunk's text in a chunk's prompt, each sentence after its id ("[S1] "): matched to its chunk's.
_SHOWN = re.compile(r"<text>\n(.*?)\n</text>", re.S)
_IDS = re.compile(r"\[S\d+\] ")


def _called_text(entry: LedgerEntry) -> str:
    shown = _SHOWN.search(entry.prompt)
    assert shown is not None, entry.prompt[:200]
    return " ".join(_IDS.sub("", shown.group(1)).split())


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
        seen = await stored_at(db, urgent, stack)
        assert (await wait_for_task(alice, urgent, stack))["status"] == "COMPLETED"
        assert (await wait_for_task(alice, backlog, stack))["status"] == "COMPLETED"
    [urgent_chunk] = await chunks_of(db, urgent)
    backlog_chunks = await chunks_of(db, backlog)
    assert await admitted_ahead(db, backlog, seen, urgent_chunk["id"]) == 0
    assert any(c["admitted_at"] > urgent_chunk["admitted_at"] for c in backlog_chunks)  # the backlog was not over

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


# --- the schedule survives kill -9, and replicas share it ------------------------------------------------


@pytest_asyncio.fixture
async def own_db(infra: dict[str, str]) -> AsyncIterator[tuple[str, asyncpg.Pool]]:
    """A database of this test's own: the owners' counters start at nothing, and hold only its work."""
    url = await create_database(infra["DATABASE_URL"], "docsum_fair")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        yield url, pool
    finally:
        await pool.close()
        await drop_database(url)


async def _backlogs(stack: Stack, seeds: dict[str, int]) -> dict[str, tuple[str, str]]:
    """Each owner's backlog submitted at once: owner -> (task id, marker)."""
    out: dict[str, tuple[str, str]] = {}
    for owner, seed in seeds.items():
        marker = new_marker()
        async with stack.client(owner) as client:
            out[owner] = (await submit(client, [txt(f"{owner}.txt", marked_text(15_000, seed, marker))]), marker)
    return out


async def _finished(stack: Stack, tasks: dict[str, tuple[str, str]]) -> None:
    for owner, (task_id, _) in tasks.items():
        async with stack.client(owner) as client:
            assert (await wait_for_task(client, task_id, stack))["status"] == "COMPLETED"


async def _consistent(
    db: asyncpg.Pool, deployment: str | None = None, weights: dict[str, float] | None = None
) -> dict[str, tuple[float, float]]:
    """Each owner's counter in `deployment` (the only one there is when None), and what its chunks there
    were charged and its merges' paid calls cost, over its weight, plus its lifts: equal when every
    charge and correction was made exactly once."""
    rows = await db.fetch(
        "SELECT s.owner, s.counter, s.lifted,"
        " (SELECT coalesce(sum(c.charged), 0) FROM tasks t JOIN documents d ON d.task_id = t.id"
        "   JOIN chunks c ON c.document_id = d.id WHERE t.owner = s.owner AND t.deployment = s.deployment)"
        "   AS chunks,"
        " (SELECT coalesce(sum(l.prompt_tokens + 2 * l.completion_tokens), 0) FROM tasks t"
        "   JOIN llm_calls l ON l.task_id = t.id WHERE t.owner = s.owner AND t.deployment = s.deployment"
        "   AND l.kind <> 'chunk' AND NOT l.cached) AS merges"
        " FROM owner_shares s WHERE $1::text IS NULL OR s.deployment = $1",
        deployment,
    )
    weight = (weights or {}).get
    return {
        r["owner"]: (r["counter"], r["lifted"] + (r["chunks"] + r["merges"]) / weight(r["owner"], 1.0)) for r in rows
    }


def _a_third_done(db: asyncpg.Pool) -> Callable[[], Awaitable[bool]]:
    """Whether a third of the chunks (of the test's own database) are summarized."""

    async def done() -> bool:
        completed = await db.fetchval("SELECT count(*) FROM chunks WHERE status = 'COMPLETED'")
        return completed >= await db.fetchval("SELECT count(*) FROM chunks") // 3 > 0

    return done


def _each_accounted(counters: dict[str, tuple[float, float]], owners: set[str]) -> None:
    """Every owner's counter (`_consistent`) equals what it was accounted, and is not zero."""
    assert set(counters) == owners
    for owner, (counter, accounted) in counters.items():
        assert counter == pytest.approx(accounted, rel=1e-9), owner
        assert counter > 0


async def test_kill_9_of_the_summarizer_mid_run_leaves_the_counters_consistent_and_pays_nothing_twice(
    make_stack: StackFactory, llm: FakeLLMServer, own_db: tuple[str, asyncpg.Pool], slow_calls: None
) -> None:
    url, db = own_db
    stack = make_stack(SERVICES, **FAIR, DATABASE_URL=url, DOCSUM_LEASE_TTL_S="3", DOCSUM_ADMISSION_HOLD_S="5")
    tasks = await _backlogs(stack, {"alice": 35, "bob": 36})

    await eventually(_a_third_done(db), timeout=90, interval=0.05, message="a third of the chunks", stack=stack)
    stack.kill("summarizer")
    stack.start("summarizer")
    await _finished(stack, tasks)

    _each_accounted(await _consistent(db), {"alice", "bob"})
    # Every answer charged at its usage, and none twice: what the chunks were charged is what the
    # stand-in's distinct answers cost, less at most the answers in flight at the kill (their holder
    # stored them in the result cache and died: the next holder's answer from there costs nothing).
    entries = [e for _, marker in tasks.values() for e in chunk_calls(llm, marker)]
    costs = {e.prompt_sha256: e.usage_prompt_tokens + 2 * e.completion_tokens for e in entries}
    charged = await db.fetchval("SELECT sum(charged) FROM chunks")
    assert charged <= sum(costs.values())
    assert sum(costs.values()) - charged <= INFLIGHT * max(costs.values())
    assert paid_twice(entries) <= INFLIGHT  # at most the calls in flight when it was killed


async def test_kill_9_of_postgresql_mid_run_leaves_the_counters_consistent_and_pays_nothing_twice(
    make_stack: StackFactory, llm: FakeLLMServer, own_database: Server, slow_calls: None
) -> None:
    """The database itself killed -9 amid two owners' backlogs (its postmaster: the backends follow), down a
    few seconds, started again (crash recovery): every charge and correction was made exactly once, in
    the statements that committed before the kill or after the restart."""
    url = own_database.settings["DATABASE_URL"]
    stack = make_stack(SERVICES, **FAIR, DATABASE_URL=url, DOCSUM_LEASE_TTL_S="3", DOCSUM_ADMISSION_HOLD_S="5")
    # Across the outage: a connection the pool lost is made again when next used.
    async with asyncpg.create_pool(url, min_size=1, max_size=2) as db:
        tasks = await _backlogs(stack, {"alice": 37, "bob": 38})

        await eventually(_a_third_done(db), timeout=90, interval=0.05, message="a third of the chunks", stack=stack)
        postmaster = re.search(r"\(pid (\d+)\)", await own_database.run("status"))
        assert postmaster is not None
        os.kill(int(postmaster.group(1)), signal.SIGKILL)
        await asyncio.sleep(3)  # the outage itself, not a synchronization
        await own_database.run("start")
        await _finished(stack, tasks)

        counters = await _consistent(db)
        entries = [e for _, marker in tasks.values() for e in chunk_calls(llm, marker)]
        charged = await db.fetchval("SELECT sum(charged) FROM chunks")
    _each_accounted(counters, {"alice", "bob"})
    # Every chunk charged what its answer cost; an answer is paid again only if it could not be stored: a
    # chunk in hand when the database went away (called then, or at a slot freed meanwhile), once each.
    costs = {e.prompt_sha256: e.usage_prompt_tokens + 2 * e.completion_tokens for e in entries}
    assert charged <= sum(costs.values())
    assert paid_twice(entries) <= WINDOW


async def test_two_summarizer_replicas_share_one_schedule(
    make_stack: StackFactory, llm: FakeLLMServer, own_db: tuple[str, asyncpg.Pool], slow_calls: None
) -> None:
    url, db = own_db
    stack = make_stack(SERVICES, **FAIR, DATABASE_URL=url)
    stack.start("summarizer-2")

    def second_assigned() -> bool:
        path = stack.logs / "summarizer-2.log"
        return path.exists() and any(
            "assigned" in line and "chunk-created" in line for line in path.read_text(errors="replace").splitlines()
        )

    await eventually(second_assigned, timeout=60, message="the second replica's partitions", stack=stack)
    tasks = await _backlogs(stack, {"alice": 37})
    most = 0

    async def admitted_now() -> int:
        return await db.fetchval(
            "SELECT count(*) FROM chunks WHERE admitted_at IS NOT NULL AND (status = 'SUMMARIZING'"
            " OR status = 'PENDING' AND retry_at IS NULL)"
        )

    async def bob_under_way() -> bool:
        nonlocal most
        most = max(most, await admitted_now())
        return len(chunk_calls(llm, tasks["alice"][1])) >= 4

    await eventually(bob_under_way, timeout=60, interval=0.02, message="alice's first calls", stack=stack)
    bobs_marker = new_marker()
    async with stack.client("bob") as bob:
        tasks["bob"] = (await submit(bob, [txt("note.txt", f"{bobs_marker} Bob's note. {bobs_marker}")]), bobs_marker)
    seen = await stored_at(db, tasks["bob"][0], stack)

    async def all_done() -> bool:
        nonlocal most
        most = max(most, await admitted_now())
        return await db.fetchval("SELECT count(*) FROM chunks WHERE status NOT IN ('COMPLETED', 'FAILED')") == 0

    await eventually(all_done, timeout=120, interval=0.02, message="every chunk", stack=stack)
    await _finished(stack, tasks)
    # One window for both replicas: never more chunks admitted and unfinished than it holds.
    assert 0 < most <= WINDOW
    # Both replicas summarized, and bob's note went at the next free slot all the same.
    logs = {name: (stack.logs / f"{name}.log").read_text() for name in ("summarizer", "summarizer-2")}
    assert all("summarized" in text for text in logs.values())
    [bobs_chunk] = await chunks_of(db, tasks["bob"][0])
    assert await admitted_ahead(db, tasks["alice"][0], seen, bobs_chunk["id"]) == 0
    counters = await _consistent(db)
    for owner, (counter, accounted) in counters.items():
        assert counter == pytest.approx(accounted, rel=1e-9), (owner, counter, accounted)


# --- deployments sharing one database ----------------------------------------------------------------------


async def test_two_deployments_on_one_database_each_admit_only_their_own_tasks_chunks(
    make_stack: StackFactory, llm: FakeLLMServer, own_db: tuple[str, asyncpg.Pool], slow_calls: None
) -> None:
    """Two deployments (each its own topic prefix, summarizers and window) on one database, alice's
    backlog waiting in both at once: each deployment's admission announces only its own tasks' chunks, on
    its own topics, and keeps alice's counter of its own; both backlogs complete."""
    url, db = own_db
    stacks = [make_stack(SERVICES, **FAIR, DATABASE_URL=url) for _ in range(2)]
    backlogs = [await _backlogs(stack, {"alice": 40 + i}) for i, stack in enumerate(stacks)]
    for stack, tasks in zip(stacks, backlogs, strict=True):
        await _finished(stack, tasks)

    for stack, tasks in zip(stacks, backlogs, strict=True):
        deployment = stack.env["DOCSUM_TOPIC_PREFIX"]
        [(task_id, _)] = tasks.values()
        own = {c["id"] for c in await chunks_of(db, task_id)}
        records = await stack.read_topics([deployment + Topic.CHUNK_CREATED])
        announced = {json.loads(r.value)["chunk_id"] for r in records}
        assert announced == own, f"{len(announced - own)} chunks of the other deployment announced on {deployment}"
        assert await db.fetchval("SELECT deployment FROM tasks WHERE id = $1", task_id) == deployment
        # alice's counter there is what her chunks there were charged, not a sum over both deployments.
        [(counter, accounted)] = (await _consistent(db, deployment)).values()
        assert counter == pytest.approx(accounted, rel=1e-9) and counter > 0
    assert await db.fetchval("SELECT count(*) FROM owner_shares WHERE owner = 'alice'") == 2


async def test_an_owners_merges_are_charged_to_its_share_at_its_weight(
    make_stack: StackFactory, llm: FakeLLMServer, own_db: tuple[str, asyncpg.Pool]
) -> None:
    """The merger's calls take no admission's slot, but they are served to their owner all the same: each
    paid merge is charged to its owner's counter, at its weight, with its line in the ledger. Otherwise
    an owner splitting its work over many tasks, each with merges of its own, is served more than its
    share (uncharged, the counter holds only the chunks' charges: it falls short by the merges' cost)."""
    url, db = own_db
    stack = make_stack.in_process(
        DATABASE_URL=url, DOCSUM_OWNER_WEIGHTS="alice=2", DOCSUM_CHUNK_CHARS="600", DOCSUM_OVERLAP_CHARS="50"
    )
    marker = new_marker()
    files = [txt(f"part-{n}.txt", marked_text(10_000, seed=37 + n, marker=marker)) for n in range(2)]
    async with stack.client("alice") as alice:
        task = await wait_for_task(alice, await submit(alice, files), stack, timeout=60)
    assert task["status"] == "COMPLETED", task
    merges = await db.fetchval(
        "SELECT count(*) FROM llm_calls WHERE task_id = $1 AND kind <> 'chunk' AND NOT cached", task["task_id"]
    )
    assert merges >= 3  # each document's merge and the task's
    counter, accounted = (await _consistent(db, weights={"alice": 2.0}))["alice"]
    assert counter == pytest.approx(accounted, rel=1e-9)


async def test_stored_chunks_are_admitted_at_once_not_at_the_admissions_next_look(
    make_stack: StackFactory, llm: FakeLLMServer
) -> None:
    """The chunker's transaction notifies the admission: with a look only every 10 minutes, a task made
    after the stack started completes all the same (without the notification it would wait that long)."""
    stack = make_stack.in_process(DOCSUM_ADMISSION_INTERVAL_S="600")
    marker = new_marker()
    async with stack.client("alice") as alice:
        task_id = await submit(alice, [txt("note.txt", marked_text(3_000, seed=35, marker=marker))])
        task = await wait_for_task(alice, task_id, stack, timeout=60)
    assert task["status"] == "COMPLETED", task
    assert chunk_calls(llm, marker)


async def test_a_chunk_finishing_admits_the_next_at_once_not_at_the_admissions_next_look(
    make_stack: StackFactory, llm: FakeLLMServer, own_db: tuple[str, asyncpg.Pool]
) -> None:
    """A chunk finishing in a summarizer wakes that summarizer's admission: with a window of one chunk and
    a look only every 10 minutes, a task of 26 chunks completes all the same (without the wake its first
    chunk alone would be admitted, by the chunker's notification, and the next ones 10 minutes later),
    each chunk admitted in a round of its own once the one before it had finished."""
    url, db = own_db
    stack = make_stack.in_process(
        DATABASE_URL=url,
        DOCSUM_ADMISSION_INTERVAL_S="600",
        DOCSUM_ADMISSION_WINDOW="1",
        DOCSUM_CHUNK_CHARS="600",
        DOCSUM_OVERLAP_CHARS="50",
    )
    marker = new_marker()
    async with stack.client("alice") as alice:
        task_id = await submit(alice, [txt("note.txt", marked_text(10_000, seed=36, marker=marker))])
        task = await wait_for_task(alice, task_id, stack, timeout=60)
    assert task["status"] == "COMPLETED", task
    chunks = sorted(await chunks_of(db, task_id), key=lambda c: c["admitted_at"])
    assert len(chunks) >= 4
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after["admitted_at"] >= before["updated_at"], "admitted while the window's one slot was taken"
    assert len(chunk_calls(llm, marker)) == len(chunks)


async def test_each_summarizer_records_its_calls_in_flight_while_it_runs_and_not_once_stopped(
    make_stack: StackFactory, own_db: tuple[str, asyncpg.Pool]
) -> None:
    """The admission's window follows the live summarizers: each one records itself with its
    DOCSUM_LLM_MAX_INFLIGHT while it runs, and a clean stop takes its row away at once (not a few
    heartbeats later): its calls no longer count."""
    url, db = own_db
    stack = make_stack.in_process(DATABASE_URL=url, DOCSUM_LLM_MAX_INFLIGHT="3")
    deployment = stack.env["DOCSUM_TOPIC_PREFIX"]

    async def live() -> list[int]:
        rows = await db.fetch("SELECT llm_max_inflight FROM summarizer_replicas WHERE deployment = $1", deployment)
        return [r["llm_max_inflight"] for r in rows]

    async def recorded() -> bool:
        return await live() == [3]

    await eventually(recorded, timeout=30, interval=0.05, message="the summarizer's row", stack=stack)
    stack.stop_all()
    assert await live() == []
