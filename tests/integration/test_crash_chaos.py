"""Chaos: kill -9 a random service every few seconds while a task of twenty documents runs, restarting
each at once or soon: the task finishes with the same summaries, on the same sources, as a run with no
kill, and no more is paid twice than the calls in flight at the kills.

The stack is the test's own; the documents, the FAST settings, the stand-in's fixture and the checks are
those of test_crash_recovery.py. In a file of its own so that, with the tests run a file per worker
(`--dist loadfile`), it runs beside that file's tests instead of after them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator

import asyncpg
import httpx
import pytest

from tests.documents import chinese_prose, english_prose
from tests.fake_llm import FakeLLM
from tests.integration.conftest import SERVICES, Stack, StackFactory
from tests.integration.helpers import calls, new_marker, paid_twice, submit, tagged, txt, wait_for_task
from tests.integration.test_crash_recovery import FAST, _final, assert_complete, docx, pdf, stand_in

pytestmark = pytest.mark.integration

__all__ = ["stand_in"]  # the fixture, shared with test_crash_recovery.py


@pytest.fixture
def stacks(make_stack: StackFactory) -> Iterator[Callable[..., Stack]]:
    """make_stack, plus: the stacks a test made are gone when it ends (no idle stacks eating the CPU)."""
    made: list[Stack] = []

    def make(services: tuple[str, ...] = SERVICES, **env: str) -> Stack:
        made.append(make_stack(services, **env))
        return made[-1]

    yield make
    for stack in made:
        for name in list(stack.processes):
            stack.kill(name)  # its topics and groups are never used again


CHAOS_INFLIGHT = 2
CHAOS_S = 45.0


def chaos_batch(marker: str) -> list:
    """Twenty documents: two MEDIUM ones (~12 chunks each) and eighteen small ones of four kinds."""
    files = [
        txt(f"{marker}-medium-en.txt", tagged(english_prose(22_000, seed=60), marker)),
        docx(f"{marker}-medium-zh.docx", tagged(chinese_prose(21_000, seed=61), marker)),
    ]
    for i in range(18):
        seed, size = 70 + i, 800 + 200 * i
        kind = i % 4
        if kind == 0:
            files.append(txt(f"{marker}-{i:02d}-en.txt", tagged(english_prose(size, seed=seed), marker)))
        elif kind == 1:
            files.append(txt(f"{marker}-{i:02d}-zh.md", tagged(chinese_prose(size // 2, seed=seed), marker)))
        elif kind == 2:
            files.append(pdf(f"{marker}-{i:02d}.pdf", [tagged(english_prose(size, seed=seed), marker)]))
        else:
            files.append(docx(f"{marker}-{i:02d}.docx", tagged(english_prose(size, seed=seed), marker)))
    return files


async def summaries(client: httpx.AsyncClient, task_id: str, stack: Stack) -> tuple[dict, dict[str, str]]:
    task = await wait_for_task(client, task_id, stack, timeout=180)
    return task, {d["filename"]: d["summary"] for d in task["documents"]}


def cited_by_name(task: dict) -> dict[str, list]:
    """Each summary's sentences with their support and sources, documents named by file (two runs of the
    same files differ in their ids only)."""
    names = {d["document_id"]: d["filename"] for d in task["documents"]}
    return {
        holder.get("filename", ""): [
            (
                s["text"],
                s["support"],
                [(names[x["document_id"]], x["page"], x["start"], x["end"]) for x in s["sources"]],
            )
            for s in holder["sentences"] or ()
        ]
        for holder in [task, *task["documents"]]
    }


async def test_chaos_kill_9_random_services(stacks: Callable[..., Stack], stand_in: FakeLLM, db: asyncpg.Pool) -> None:
    marker = new_marker()
    files = chaos_batch(marker)
    stack = stacks(
        **{**FAST, "DOCSUM_LLM_MAX_INFLIGHT": str(CHAOS_INFLIGHT), "DOCSUM_MAX_INFLIGHT": str(CHAOS_INFLIGHT)}
    )

    # The clean run: no kill, as bob. The result cache is per owner (test_tenants.py), so alice's chaos
    # run below finds none of these answers cached: every one of its summaries is made again.
    async with stack.client("bob") as client:
        expected_task, expected = await summaries(client, await submit(client, files, title=marker), stack)
    assert expected_task["status"] == "COMPLETED", expected_task
    assert expected_task["usage"]["cached_calls"] == 0, expected_task["usage"]

    # The same documents with kills: a random service every few seconds, restarted at once or soon.
    stand_in.configure(latency_s=0.8, jitter_s=0.4)
    started = time.time()
    async with stack.client() as client:
        task_id = await submit(client, files, title=marker)
    rng = random.Random(20_240_611)
    kills: list[str] = []
    chaos_end = time.monotonic() + CHAOS_S
    while time.monotonic() < chaos_end and not await _final(db, task_id):
        await asyncio.sleep(rng.uniform(1.5, 3.5))  # pacing the chaos, not waiting for anything
        victim = rng.choice(SERVICES)
        stack.kill(victim)
        kills.append(victim)
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0.2, 2.0))  # down for a while: the chaos, not a wait
        stack.start(victim)
    stand_in.configure(latency_s=0.1, jitter_s=0.0)
    stack.wait_ready()
    async with stack.client() as client:
        task, got = await summaries(client, task_id, stack)
    await asyncio.to_thread(stand_in.wait_idle, 10)
    print(f"\nchaos: {len(kills)} kills {kills}, {time.time() - started:.0f}s")

    await assert_complete(db, task, marker)
    assert len(kills) >= 5, f"the task finished before the chaos got going: {kills}"
    assert got == expected
    assert task["summary"] == expected_task["summary"]
    assert cited_by_name(task) == cited_by_name(expected_task)  # the same sentences on the same sources
    assert paid_twice(calls(stand_in, marker, since=started)) <= len(kills) * CHAOS_INFLIGHT
