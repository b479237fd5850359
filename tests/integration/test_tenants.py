"""Owners are strangers: nothing one owner submits shows in another's answers.

The result cache is per owner, so another owner's guess at a document — right or wrong — is
answered the same way: by the provider, with no cache figure and no shortcut in time. The text a summary
quotes is read through its task: another owner's task, or a document of another task, is as missing as
one that does not exist. The pipeline runs in-process: what is tested is what each owner is answered,
not processes or the broker.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.fake_llm import FakeLLMServer
from tests.inprocess import InProcessStack
from tests.integration.conftest import AnyStack
from tests.integration.helpers import calls, marked_text, new_marker, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


async def _summarized(stack: AnyStack, owner: str, name: str, text: str) -> dict[str, Any]:
    async with stack.client(owner) as client:
        return await wait_for_task(client, await submit(client, [txt(name, text)]), stack)


async def test_another_owners_guess_learns_nothing_from_the_cache(pipeline: InProcessStack, llm: FakeLLMServer) -> None:
    marker = new_marker()
    memo = marked_text(12_000, seed=101, marker=marker)  # a board memo of a few chunks
    theirs = await _summarized(pipeline, "alice", "memo.txt", memo)
    assert theirs["status"] == "COMPLETED" and theirs["usage"]["llm_calls"] > 3

    sent_before = len(calls(llm, marker, 200))
    right = await _summarized(pipeline, "bob", "guess.txt", memo)
    # Wrong by a word in every paragraph, so that it shares no chunk with the right guess either (bob's
    # own cache would rightly answer what bob himself sent before).
    wrong_memo = "\n\n".join(f"Note: {paragraph}" for paragraph in memo.split("\n\n"))
    wrong = await _summarized(pipeline, "bob", "guess.txt", wrong_memo)
    assert right["status"] == wrong["status"] == "COMPLETED"
    for guess in (right, wrong):  # the right guess is answered exactly like the wrong one
        assert guess["usage"]["cached_calls"] == 0 and guess["recovery"]["calls_saved"] == 0, guess["usage"]
        # All paid, none reused: a call for each of its chunks and its document's merge (the wrong guess is
        # cut where its own text says, so its chunks may be fewer or more than theirs).
        chunks = sum(d["chunks"]["total"] for d in guess["documents"])
        assert guess["usage"]["llm_calls"] >= chunks + 1 and chunks > 3, guess["usage"]
    assert right["usage"]["llm_calls"] == theirs["usage"]["llm_calls"]  # the same text: the same requests, paid again
    assert len(calls(llm, marker, 200)) - sent_before == right["usage"]["llm_calls"] + wrong["usage"]["llm_calls"]

    # The owner's own cache still works: the same document again costs nothing.
    again = await _summarized(pipeline, "alice", "memo.txt", memo)
    assert again["usage"]["llm_calls"] == 0 and again["usage"]["cached_calls"] == theirs["usage"]["llm_calls"]
    assert again["summary"] == theirs["summary"]


async def test_another_owners_document_text_is_as_missing_as_none(pipeline: InProcessStack) -> None:
    alices = await _summarized(pipeline, "alice", "private.txt", "What alice keeps to herself. " * 20)
    other = await _summarized(pipeline, "alice", "other.txt", "Another note of alice's. " * 20)
    task_id, doc_id = alices["task_id"], alices["documents"][0]["document_id"]
    params = {"start": 0, "end": 10}
    nobodys = str(uuid.uuid4())

    async def answer(client: httpx.AsyncClient, task: str, doc: str) -> tuple[int, Any]:
        got = await client.get(f"/v1/tasks/{task}/documents/{doc}/text", params=params)
        return got.status_code, got.json()

    async with pipeline.client("bob") as bob, pipeline.client("alice") as alice:
        assert (await answer(alice, task_id, doc_id))[0] == 200
        # bob: alice's task answers as a task that does not exist.
        assert await answer(bob, task_id, doc_id) == (404, {"detail": f"no task {task_id}"})
        assert await answer(bob, nobodys, doc_id) == (404, {"detail": f"no task {nobodys}"})
        # alice: her document under her other task answers as a document that does not exist.
        other_id = other["task_id"]
        assert await answer(alice, other_id, doc_id) == (404, {"detail": f"no document {doc_id} in task {other_id}"})
        assert await answer(alice, other_id, nobodys) == (404, {"detail": f"no document {nobodys} in task {other_id}"})
        assert await answer(alice, task_id, "not-a-document") == (
            404,
            {"detail": f"no document not-a-document in task {task_id}"},
        )
