"""A task over its owner's ceiling never pays first and asks later: it waits, AWAITING_APPROVAL, with its
estimate shown, before any LLM call; resume approves it, cancel drops it. The pipeline runs in-process
(what is tested is what the ceilings do, not processes or the broker)."""

from __future__ import annotations

from functools import partial

import pytest

from tests.fake_llm import FakeLLMServer
from tests.integration.conftest import StackFactory
from tests.integration.helpers import calls, eventually, get_task, marked_text, new_marker, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


async def test_an_expensive_task_waits_for_its_owner(make_stack: StackFactory, llm: FakeLLMServer) -> None:
    stack = make_stack.in_process(DOCSUM_TASK_MAX_CALLS="5", DOCSUM_OWNER_CEILINGS='{"bob": {"calls": 1000}}')
    try:
        marker = new_marker()
        big = txt("big.txt", marked_text(30_000, seed=501, marker=marker))  # ~16 chunks: over 5 calls
        async with stack.client() as client:
            approved_id, dropped_id = await submit(client, [big]), await submit(client, [big])

            async def waiting(task_id: str) -> dict | None:
                task = await get_task(client, task_id)
                return task if task["status"] == "AWAITING_APPROVAL" else None

            for task_id in (approved_id, dropped_id):
                held = await eventually(partial(waiting, task_id), timeout=90, message="the hold", stack=stack)
                assert "DOCSUM_TASK_MAX_CALLS" in held["hold_reason"] and "ceiling of 5" in held["hold_reason"]
                assert held["estimate"]["remaining_chunks"] > 5  # what approving it would take, shown
            assert calls(llm, marker) == []  # not one call before the owner said yes

            assert (await client.post(f"/v1/tasks/{approved_id}/resume")).status_code == 200
            assert (await client.post(f"/v1/tasks/{dropped_id}/cancel")).status_code == 200
            approved = await wait_for_task(client, approved_id, stack)
            dropped = await get_task(client, dropped_id)
        assert approved["status"] == "COMPLETED" and approved["hold_reason"] is None, approved
        assert dropped["status"] == "CANCELLED"
        paid = len(calls(llm, marker, 200))
        assert paid == approved["usage"]["llm_calls"] > 5  # the approved task only

        async with stack.client("bob") as client:  # an owner with a ceiling of his own
            bobs = await wait_for_task(
                client, await submit(client, [txt("b.txt", marked_text(30_000, 502, marker))]), stack
            )
        assert bobs["status"] == "COMPLETED" and bobs["hold_reason"] is None
    finally:
        stack.stop_all()
