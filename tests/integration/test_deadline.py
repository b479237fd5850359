"""A task's deadline through a running gateway: the duration it is given as is stored as the instant, and
the task's view shows that instant. The gateway runs in-process (what is tested is what its routes store
and show, not a process)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import StackFactory
from tests.integration.helpers import get_task, submit, txt

pytestmark = pytest.mark.integration


async def test_a_task_submitted_with_a_deadline_shows_it(make_stack: StackFactory) -> None:
    stack = make_stack.in_process(services=("gateway",))
    async with stack.client("alice") as client:
        task_id = await submit(client, [txt("a.txt", "A short note.")], deadline="6h")
        asked = datetime.now(UTC) + timedelta(hours=6)
        task = await get_task(client, task_id)
        # Nothing summarizes it here, and no other stack's reconcile should take it up: it ends now.
        cancelled = await client.post(f"/v1/tasks/{task_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    deadline = datetime.fromisoformat(task["options"]["deadline"])
    assert deadline.utcoffset() == timedelta(0)
    assert abs(deadline - asked) < timedelta(minutes=1), (deadline, asked)
