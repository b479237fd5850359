"""New versions of documents: a task names the task its documents are new versions of (`previous_task`), the
owner's result cache answers every request the edit left as it was, and the new task's view says what was
reused, counted from the calls ledger. The pipeline runs in-process (what is tested is what is paid and
shown, not processes or the broker); the kill -9 of a summarizer re-summarizing a new version is in
test_crash_recovery.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from docsum_chunker.chunking import owned_slices, split_into_chunks
from docsum_parser.repository import DocumentRepository
from docsum_parser.settings import ParserSettings
from docsum_shared.events import DocumentSubmitted
from docsum_shared.options import TaskOptions
from docsum_shared.readmodel import queries
from tests.documents import english_prose
from tests.fake_llm import FakeLLMServer
from tests.inprocess import InProcessStack
from tests.integration.helpers import (
    calls,
    chunk_request,
    chunks_of,
    marked_text,
    new_marker,
    paid_twice,
    resolved_sentences,
    submit,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

TEXT_CHARS = 24_000  # about a dozen chunks


def edited(text: str, marker: str) -> str:
    """`text` with one paragraph in its middle changed: a few words added to its first sentence."""
    paragraphs = text.split("\n\n")
    middle = len(paragraphs) // 2
    paragraphs[middle] = paragraphs[middle].replace(f"{marker} ", f"{marker} In the revised edition, ", 1)
    return "\n\n".join(paragraphs)


async def summarized(stack: InProcessStack, owner: str, name: str, text: str, **form: str) -> dict[str, Any]:
    async with stack.client(owner) as client:
        return await wait_for_task(client, await submit(client, [txt(name, text)], **form), stack)


async def test_a_new_version_pays_only_for_its_changed_chunks_and_says_what_it_reused(
    pipeline: InProcessStack, llm: FakeLLMServer, db: asyncpg.Pool
) -> None:
    marker = new_marker()
    first_text = marked_text(TEXT_CHARS, 71, marker)
    first = await summarized(pipeline, "alice", "report.txt", first_text)
    assert first["status"] == "COMPLETED", first
    assert first["previous_task"] is None and first["documents"][0]["previous_document_id"] is None
    first_doc = first["documents"][0]
    # Nothing was stored before: every chunk summary and merge was paid for, and the view says so.
    assert first_doc["reuse"]["chunk_summaries_reused"] == 0 and first_doc["reuse"]["merges_reused"] == 0

    since = time.time()
    edited_text = edited(first_text, marker)
    second = await summarized(pipeline, "alice", "report.txt", edited_text, previous_task=first["task_id"])
    await asyncio.to_thread(llm.llm.wait_idle, 10)
    assert second["status"] == "COMPLETED", second
    doc = second["documents"][0]
    assert second["previous_task"] == first["task_id"]
    assert second["options"]["previous_task"] == first["task_id"]
    assert doc["previous_document_id"] == first_doc["document_id"]

    # The chunks whose requests the edit left as they were: counted from the two versions' stored chunks.
    before = {chunk_request(c) for c in await chunks_of(db, first["task_id"])}
    chunks = await chunks_of(db, second["task_id"])
    unchanged = sum(chunk_request(c) in before for c in chunks)
    # As many as the chunker, run here on the two texts, leaves as they were: the new version named its previous
    # task, so the chunker kept each of the first version's chunks it found again (`previous`, their owned
    # slices). The one changed paragraph changes its chunk, and its neighbour when the edit lies in the
    # overlap or the context that neighbour reads: 1 or 2 of 16 to 20 in 200 draws of the marker, at most 3
    # (without the previous version's cuts, 1 to 10).
    first_cuts = split_into_chunks(first_text)
    kept = {chunk_request(vars(c)) for c in first_cuts}
    again = split_into_chunks(edited_text, previous=owned_slices(first_cuts))
    predicted = sum(chunk_request(vars(c)) in kept for c in again)
    assert len(chunks) >= 10 and unchanged == predicted and 0 < unchanged < len(chunks), (len(chunks), unchanged)
    assert len(chunks) - unchanged <= 3, (len(chunks), unchanged)

    # What the stand-in answered for the new version: its changed chunks, and the merges above them.
    paid = calls(llm, marker, 200, since=since)
    paid_chunks = [e for e in paid if "<text>\n" in e.prompt]
    assert len(paid_chunks) == len(chunks) - unchanged
    assert paid_twice(calls(llm, marker, 200)) == 0  # nothing of the first version was asked again

    reuse = doc["reuse"]
    assert reuse["chunk_summaries"] == len(chunks)
    assert reuse["chunk_summaries_reused"] == unchanged
    # A merge is paid again only if a summary under it changed: the stand-in's summary of a chunk is its first
    # sentence, which the edit may have left as it was.
    assert reuse["merges"] - reuse["merges_reused"] == len(paid) - len(paid_chunks)
    redone = reuse["merges"] - reuse["merges_reused"]
    expected = f"{unchanged} of {len(chunks)} chunk summaries reused, {redone} merge{'' if redone == 1 else 's'} redone"
    assert reuse["said"].startswith(expected), reuse
    # The task's own figures hold its document's (a task of one document has no merge of its own).
    assert second["reuse"]["chunk_summaries_reused"] == unchanged
    # The reused sentences' sources are ranges of the new version's text, and say what it says there.
    sources = [s for sentence in await resolved_sentences(db, second) for s in sentence["sources"]]
    assert sources and all(s["document_id"] == doc["document_id"] for s in sources)


async def test_another_owners_task_as_previous_is_refused_like_a_missing_one(
    pipeline: InProcessStack, db: asyncpg.Pool
) -> None:
    marker = new_marker()
    secret_name = f"{marker}-merger-plans.txt"
    alice = await summarized(pipeline, "alice", secret_name, marked_text(1_500, 72, marker))
    async with pipeline.client("bob") as client:
        tasks_before = (await client.get("/v1/tasks")).json()
        answers = []
        for previous in (alice["task_id"], str(uuid.uuid4())):
            response = await client.post(
                "/v1/tasks", files=[txt("notes.txt", "Bob's notes.")], data={"previous_task": previous}
            )
            answers.append((response.status_code, response.text.replace(previous, "<id>")))
            assert "merger-plans" not in response.text and alice["status"] not in response.text
        # Alice's task and a task nobody has are refused in the same words: bob learns nothing of hers.
        assert answers[0] == answers[1]
        status, body = answers[0]
        assert status == 422 and "no task <id> of yours" in body and "previous_task" in body
        assert (await client.get("/v1/tasks")).json() == tasks_before  # no task was made
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE previous_task = $1", alice["task_id"]) == 0


def docsum(stack: InProcessStack, owner: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `docsum` command, as the owner (its key in DOCSUM_API_KEY), against the stack's gateway."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DOCSUM_API_KEY", "DOCSUM_ADMIN_KEY")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("docsum")), "--url", stack.gateway_url, *args],
        env={**clean, "DOCSUM_API_KEY": stack.keys[owner], "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_cli_submits_a_new_version_and_prints_what_it_reused(
    pipeline: InProcessStack, tmp_path: Path
) -> None:
    marker = new_marker()
    text = marked_text(TEXT_CHARS, 73, marker)
    path = tmp_path / "minutes.txt"
    path.write_text(text)
    first = await asyncio.to_thread(docsum, pipeline, "alice", "summarize", str(path), "--json")
    assert first.returncode == 0, first.stderr
    first_id = json.loads(first.stdout)["task_id"]
    path.write_text(edited(text, marker))
    second = await asyncio.to_thread(docsum, pipeline, "alice", "summarize", str(path), "--previous", first_id)
    assert second.returncode == 0, second.stderr
    async with pipeline.client("alice") as client:
        listed = (await client.get("/v1/tasks")).json()
        task = (await client.get(f"/v1/tasks/{listed[0]['task_id']}")).json()
    assert task["previous_task"] == first_id
    assert f"reused: {task['documents'][0]['reuse']['said']}" in second.stdout
    assert " chunk summaries reused, " in second.stdout
    refused = await asyncio.to_thread(docsum, pipeline, "bob", "summarize", str(path), "--previous", first_id)
    assert refused.returncode == 2 and f"no task {first_id} of yours" in refused.stderr


def first_sentence(text: str) -> str:
    """The first sentence of a chunk's text, as the stand-in's summary of it quotes it."""
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]


async def one_chunk_edited(db: asyncpg.Pool, task: dict[str, Any], text: str, revised: str) -> tuple[str, str]:
    """`text` (the document of `task`) with one change: the word `revised` put into the first sentence of one of
    its chunks, one whose edit moves no cut (the chunker's, run here, says so); the stand-in sums a chunk up by
    its first sentence, so exactly one sentence of the document's summary changes. And that sentence as the
    new text has it."""
    firsts = [first_sentence(c["text"]) for c in await chunks_of(db, task["task_id"])]
    middle = len(firsts) // 2
    for at in sorted(range(1, len(firsts)), key=lambda i: abs(i - middle)):
        sentence = firsts[at]
        if text.count(sentence) != 1:
            continue
        words = sentence.split(" ")
        changed = " ".join([*words[:3], revised, *words[3:]])
        edited = text.replace(sentence, changed)
        if [first_sentence(c.text) for c in split_into_chunks(edited)] == [*firsts[:at], changed, *firsts[at + 1 :]]:
            return edited, changed
    raise AssertionError("no chunk of the text takes an edit of its first sentence without a cut moving")


async def test_a_new_versions_view_marks_the_sentence_its_edit_changed(
    pipeline: InProcessStack, db: asyncpg.Pool
) -> None:
    text = english_prose(20_000, seed=74)
    first = await summarized(pipeline, "alice", "brief.txt", text)
    edited_text, _ = await one_chunk_edited(db, first, text, "revised")
    second = await summarized(pipeline, "alice", "brief.txt", edited_text, previous_task=first["task_id"])
    (doc,) = second["documents"]
    marks = [s["change"] for s in doc["sentences"]]
    assert marks.count("changed") == 1 and marks.count("unchanged") == len(marks) - 1, marks
    (sentence,) = [s for s in doc["sentences"] if s["change"] == "changed"]
    assert "revised" in sentence["text"] and sentence["was"].replace(" ", "") == sentence["text"].replace(
        " revised", ""
    ).replace(" ", "")
    assert doc["removed_sentences"] == []
    # The previous version's view is no new version: nothing in it is marked.
    assert {s["change"] for s in first["documents"][0]["sentences"]} == {None}


async def test_the_cli_prints_what_changed_before_the_summary(
    pipeline: InProcessStack, db: asyncpg.Pool, tmp_path: Path
) -> None:
    text = english_prose(20_000, seed=76)
    first = await summarized(pipeline, "alice", "memo.txt", text)
    edited_text, _ = await one_chunk_edited(db, first, text, "amended")
    path = tmp_path / "memo.txt"
    path.write_text(edited_text)
    done = await asyncio.to_thread(docsum, pipeline, "alice", "summarize", str(path), "--previous", first["task_id"])
    assert done.returncode == 0, done.stderr
    async with pipeline.client("alice") as client:
        task_id = (await client.get("/v1/tasks")).json()[0]["task_id"]
        task = (await client.get(f"/v1/tasks/{task_id}")).json()
    (sentence,) = [s for s in task["documents"][0]["sentences"] if s["change"] == "changed"]
    shown = await asyncio.to_thread(docsum, pipeline, "alice", "show", task_id)
    for printed in (done.stdout, shown.stdout):
        lines = printed.splitlines()
        said = lines.index(f"  changed: {sentence['text']}")
        assert lines[said + 1] == f"      was: {sentence['was']}"
        unchanged = len(task["documents"][0]["sentences"]) - 1
        assert lines[said - 1] == f"since the previous version: 1 changed, 0 new, 0 removed, {unchanged} unchanged"
        assert lines[said - 2].startswith("reused: ") and " chunk summaries reused, " in lines[said - 2]
        # The changes first, then the summary, which holds the changed sentence too.
        assert any(sentence["text"] in line for line in lines[said + 2 :]), printed


async def test_documents_are_paired_by_their_document_key_else_by_filename(repository_db: asyncpg.Pool) -> None:
    """Intake's documents, on the real database: a new version's document is paired with the previous task's
    of the same document_key whatever its filename, else with the one of the same filename (the n-th of a key
    with the n-th); one with neither in the previous task is paired with none."""
    owner = new_marker()
    db = repository_db
    repo, settings = DocumentRepository(db), ParserSettings(_env_file=None, tasks_per_minute=0)

    async def take_in(task: str, documents: list[tuple[str, str, str | None]], previous: str | None = None) -> None:
        options = TaskOptions(previous_task=previous)
        for document_id, filename, key in documents:
            event = DocumentSubmitted(
                task_id=task, document_id=f"{task}:{document_id}", owner=owner, filename=filename,
                content_base64="eA==", task_documents=len(documents), document_key=key, options=options,
            )  # fmt: skip
            await repo.take_in(event, f"{task} {document_id}".encode(), None, settings)

    first = [("a", "report-2026-q3.pdf", "reports/q3"), ("b", "notes.txt", None), ("c", "notes.txt", None),
             ("d", "gone.txt", None)]  # fmt: skip
    second = [("c", "notes.txt", None), ("a", "report-final.pdf", "reports/q3"), ("b", "notes.txt", None),
              ("e", "new.txt", None)]  # fmt: skip
    await take_in(f"{owner}:v1", first)
    await take_in(f"{owner}:v2", second, previous=f"{owner}:v1")
    paired = {r["id"]: r["previous"] for r in await queries.previous_documents(db, f"{owner}:v2")}
    v1, v2 = f"{owner}:v1:", f"{owner}:v2:"
    # The new version's first notes.txt (its c, taken in first) is the first notes.txt of the previous task.
    assert paired == {v2 + "a": v1 + "a", v2 + "c": v1 + "b", v2 + "b": v1 + "c"}
    assert await db.fetchval("SELECT previous_task FROM tasks WHERE id = $1", f"{owner}:v2") == f"{owner}:v1"
