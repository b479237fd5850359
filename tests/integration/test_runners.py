"""One plan, two runners: the examples through the Kafka runner (five processes) and through the in-process
runner (one asyncio bus) end the same, with the extractive backend: the same statuses, the same summaries
of every document and of the task, sentence for sentence with the same pages. And the in-process bus
delivering every event twice changes nothing either (the handlers are idempotent)."""

from __future__ import annotations

import asyncio
import mimetypes
from typing import Any

import pytest

from tests.integration.conftest import ROOT, StackFactory
from tests.integration.helpers import Logs, submit, txt, wait_for_task

EXAMPLES = sorted((ROOT / "examples").iterdir())


def _files() -> list[tuple[str, tuple[str, bytes, str]]]:
    return [
        ("files", (path.name, path.read_bytes(), mimetypes.guess_type(path.name)[0] or "application/octet-stream"))
        for path in EXAMPLES
    ]


def _outcome(task: dict[str, Any]) -> dict[str, Any]:
    """What a user gets of the task, without what differs by run (ids, times)."""

    def sentences(of: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (
                s["text"],
                s["support"],
                tuple(s["at"]),
                [(r["filename"], r["unit"], r["page"], r["last_page"], r["start"], r["end"]) for r in s["sources"]],
            )
            for s in of.get("sentences") or []
        ]

    documents = sorted(task["documents"], key=lambda d: d["filename"])
    return {
        "status": task["status"],
        "summary": task["summary"],
        "sentences": sentences(task),
        "documents": [
            (d["filename"], d["status"], d.get("summary"), sentences(d), d.get("error")) for d in documents
        ],
    }


async def _run(stack: Any) -> dict[str, Any]:
    async with stack.client() as client:
        task_id = await submit(client, _files(), title="the examples")
        logs: Logs = stack
        return _outcome(await wait_for_task(client, task_id, logs))


@pytest.mark.asyncio
async def test_the_examples_end_the_same_through_either_runner(make_stack: StackFactory) -> None:
    on_kafka = await _run(make_stack(DOCSUM_LLM_BACKEND="extractive"))
    in_process = await _run(make_stack.in_process(DOCSUM_LLM_BACKEND="extractive"))
    twice = await _run(make_stack.in_process(twice=True, DOCSUM_LLM_BACKEND="extractive"))

    assert on_kafka["status"] == "COMPLETED", on_kafka
    assert [d[1] for d in on_kafka["documents"]] == ["COMPLETED"] * len(EXAMPLES)
    assert all(d[3] for d in on_kafka["documents"])  # every document's summary cites its sources
    assert in_process == on_kafka
    assert twice == on_kafka



@pytest.mark.asyncio
async def test_a_stream_left_open_does_not_hold_the_in_process_runners_end(make_stack: StackFactory) -> None:
    # The gateway alone: the task never moves, so its progress stream stays open until the server ends it.
    stack = make_stack.in_process(("gateway",))
    async with stack.client() as client:
        task_id = await submit(client, [txt("note.txt", "A short note.")])
        headers = {"Accept": "text/event-stream"}
        async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as response:
            assert response.status_code == 200
            await asyncio.to_thread(stack.stop_all, 20.0)  # TimeoutError if the open stream held it
