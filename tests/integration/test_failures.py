"""Failures that are not service crashes: the broker or the database going away mid-task, poison
messages, a provider that errs, rate-limits or refuses, and work that must never be paid for twice.

Every test finds its own LLM requests in the stand-in's ledger by a marker word that each sentence of
its documents carries (`marked_text`: chunk prompts and merge prompts alike contain it), and resets any
failure it configures on the shared stand-in.

The provider's errors and the result cache run in-process (what is tested is what the summarizer does with
an answer, not processes or the broker); the outages, poison messages on the topics and foreign writes to
them run the services as processes on Kafka.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from docsum_shared.events import (
    ChunkCreated,
    ChunkSummarized,
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    Event,
    TaskEvent,
    Topic,
)
from docsum_shared.kafka import DLQ_SUFFIX
from docsum_shared.states import TaskStatus
from tests.fake_llm import FakeLLMServer
from tests.integration.conftest import AnyStack, Stack, StackFactory
from tests.integration.helpers import (
    CONSUMED,
    calls,
    chunks_of,
    clear_forced,
    dlq_names,
    eventually,
    kafka_options,
    marked_text,
    new_marker,
    read_topics,
    submit,
    txt,
    wait_for_task,
)

pytestmark = pytest.mark.integration

# The topics that have a consumer, and the service that consumes each.
# --- helpers ----------------------------------------------------------------------------------------


def by_name(task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["filename"]: d for d in task["documents"]}


def pids(stack: Stack) -> dict[str, int]:
    return {name: process.pid for name, process in stack.processes.items()}


async def committed(env: dict[str, str], service: str) -> dict[TopicPartition, int]:
    """The offsets `service`'s consumer group has committed."""
    admin = AIOKafkaAdminClient(**kafka_options(env))
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(f"{env['DOCSUM_TOPIC_PREFIX']}docsum-{service}")
        return {tp: meta.offset for tp, meta in offsets.items()}
    finally:
        await admin.close()


def with_attempts(make_stack: StackFactory, attempts: int) -> AnyStack:
    """A pipeline whose summarizer gives each chunk `attempts` tries, the other retry settings default."""
    return make_stack.in_process(DOCSUM_LLM_MAX_ATTEMPTS=str(attempts))


async def forced_task(
    stack: AnyStack, llm: FakeLLMServer, force: Callable[[], None], filename: str, seed: int, marker: str
) -> dict[str, Any]:
    """A one-chunk task run to its end, the provider told `force` (fail_next, rate_limit_next, ...)
    just before it and nothing more after it."""
    force()
    try:
        async with stack.client() as client:
            task_id = await submit(client, [txt(filename, marked_text(1_500, seed, marker))])
            return await wait_for_task(client, task_id, stack)
    finally:
        clear_forced(llm)


# --- 2. poison messages ------------------------------------------------------------------------------


def _poison(topic: Topic, marker: str) -> list[tuple[bytes, bytes, str]]:
    """(key, value, what the error must mention) of the bad messages for `topic`."""
    task_id, document_id = str(uuid.uuid4()), str(uuid.uuid4())
    chunk_id = f"{document_id}-c00000"
    missing: Event = {
        Topic.DOCUMENT_SUBMITTED: DocumentSubmitted(
            task_id=task_id,
            document_id=document_id,
            owner="alice",
            filename="ghost.txt",
            blob_sha256="0" * 64,
            size_bytes=5,
        ),
        Topic.DOCUMENT_PARSED: DocumentParsed(
            task_id=task_id, document_id=document_id, text_chars=5, size_level="SMALL"
        ),
        Topic.CHUNK_CREATED: ChunkCreated(task_id=task_id, document_id=document_id, chunk_id=chunk_id, chunk_index=0),
        Topic.CHUNK_SUMMARIZED: ChunkSummarized(
            task_id=task_id, document_id=document_id, chunk_id=chunk_id, chunk_index=0
        ),
        Topic.DOCUMENT_MERGED: DocumentMerged(
            task_id=task_id, document_id=document_id, outcome=DocumentOutcome.COMPLETED
        ),
        Topic.TASK_EVENTS: TaskEvent(task_id=task_id, status=TaskStatus.COMPLETED),
    }[topic]
    # The handlers name what they could not find: the task for the task-keyed topics, the document otherwise.
    missing_id = task_id if topic in (Topic.DOCUMENT_MERGED, Topic.TASK_EVENTS) else document_id
    key = f"{marker}-{topic}"
    return [
        (f"{key}-garbage".encode(), b"\xff\xfe\x00 not json at all " + marker.encode(), "malformed"),
        (f"{key}-shape".encode(), json.dumps({"task_id": 42, "note": marker}).encode(), "malformed"),
        (f"{key}-list".encode(), json.dumps([marker, 1, 2]).encode(), "malformed"),
        (f"{key}-missing".encode(), missing.to_bytes(), missing_id),
    ]


async def test_poison_messages_are_dead_lettered(stack: Stack, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    env, marker = stack.env, new_marker()
    sent: dict[bytes, tuple[str, int, int, str, str]] = {}  # key -> topic, partition, offset, service, mention
    producer = AIOKafkaProducer(**kafka_options(env), acks="all")
    await producer.start()
    try:
        for topic, service in CONSUMED.items():
            name = env["DOCSUM_TOPIC_PREFIX"] + topic
            for key, value, mention in _poison(topic, marker):
                metadata = await producer.send_and_wait(name, value, key=key)
                sent[key] = (name, metadata.partition, metadata.offset, service, mention)
    finally:
        await producer.stop()

    async def dead_lettered() -> dict[bytes, ConsumerRecord]:
        found = {r.key: r for r in await read_topics(env, dlq_names(env)) if r.key in sent}
        return found if len(found) == len(sent) else {}

    found = await eventually(
        dead_lettered, timeout=90, message=f"{len(sent)} messages in the dead-letter topics", stack=stack
    )
    for key, (name, partition, offset, service, mention) in sent.items():
        record = found[key]
        headers = {k: v.decode() for k, v in record.headers}
        assert record.topic == name + DLQ_SUFFIX, (key, record.topic)
        assert headers["source-topic"] == name, (key, headers)
        assert headers["source-partition"] == str(partition), (key, headers)
        assert headers["source-offset"] == str(offset), (key, headers)
        assert headers["service"] == service, (key, headers)
        assert mention in headers["error"], (key, headers)
    assert not [r.key for r in found.values() if r.value is None]  # the original bytes travel along

    # Every consumer kept going: a normal task through all five topics completes...
    text = marked_text(9_000, seed=41, marker=marker)  # MEDIUM: several chunks and a merge
    async with stack.client() as client:
        task_id = await submit(client, [txt("after-poison.txt", text), txt("note.txt", b"A short note. Nothing more.")])
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED", task
    assert by_name(task)["after-poison.txt"]["chunks"]["total"] > 1

    # ... and each consumer group committed past its poison; nothing was stored for it.
    async def committed_past() -> bool:
        groups = {service: await committed(env, service) for service in set(CONSUMED.values())}
        return all(
            groups[service].get(TopicPartition(name, partition), -1) > offset
            for name, partition, offset, service, _ in sent.values()
        )

    await eventually(committed_past, message="the consumers to commit past the poison", stack=stack)
    ghost_tasks = [json.loads(found[k].value)["task_id"] for k in found if k.endswith(b"-missing")]
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE id = ANY($1::text[])", ghost_tasks) == 0
    assert {name: p.poll() for name, p in stack.processes.items()} == dict.fromkeys(stack.processes)


# --- 3. never pay twice across tasks ---------------------------------------------------------------------


async def test_same_files_again_cost_nothing(pipeline: AnyStack, llm: FakeLLMServer) -> None:
    stack, marker = pipeline, new_marker()
    files = [
        txt("again-long.txt", marked_text(9_000, seed=51, marker=marker)),
        txt("again-short.txt", marked_text(1_200, seed=52, marker=marker)),
    ]
    async with stack.client() as client:
        first = await wait_for_task(client, await submit(client, files, title="same files"), stack)
        answered = len(calls(llm, marker, 200))
        assert first["status"] == "COMPLETED" and answered == first["usage"]["llm_calls"] > 2, first["usage"]

        second = await wait_for_task(client, await submit(client, files, title="same files"), stack)

    assert second["status"] == "COMPLETED", second
    assert second["summary"] == first["summary"]
    assert {n: d["summary"] for n, d in by_name(second).items()} == {n: d["summary"] for n, d in by_name(first).items()}
    assert len(calls(llm, marker)) == answered  # not a single request more, answered or not
    assert second["usage"]["llm_calls"] == 0 and second["usage"]["prompt_tokens"] == 0
    assert second["usage"]["cached_calls"] == first["usage"]["llm_calls"]
    assert second["recovery"]["calls_saved"] == second["usage"]["cached_calls"] > 0


# --- 4. retriable provider errors -----------------------------------------------------------------------


async def test_server_error_is_retried_in_place(make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    two_attempts, marker = with_attempts(make_stack, 2), new_marker()
    # Only this test's task is running: the failure is its chunk's first try.
    task = await forced_task(two_attempts, llm, lambda: llm.llm.fail_next(1), "flaky.txt", 61, marker)

    assert task["status"] == "COMPLETED", task
    entries = calls(llm, marker)
    assert [e.status for e in entries] == [500, 200]
    assert entries[0].prompt_sha256 == entries[1].prompt_sha256  # the same chunk, retried
    (chunk,) = await chunks_of(db, task["task_id"])
    assert chunk["status"] == "COMPLETED" and chunk["error"] is None
    assert chunk["attempts"] == 2
    assert task["recovery"]["attempts"] == 2


async def test_failed_chunks_then_retry(make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    two_attempts, marker = with_attempts(make_stack, 2), new_marker()
    warm = txt("warm.txt", marked_text(1_000, 71, marker))
    async with two_attempts.client() as client:
        # Summarized once beforehand, warm.txt is answered from the cache below and completes despite the failures.
        warmed = await wait_for_task(client, await submit(client, [warm]), two_attempts)
        assert warmed["status"] == "COMPLETED"
        files = [
            warm,
            txt("long.txt", marked_text(9_000, 72, marker)),
            txt("short.txt", marked_text(1_000, 73, marker)),
        ]
        fail_rate = llm.llm.config()["fail_rate"]
        llm.llm.configure(fail_rate=1.0)
        try:
            task_id = await submit(client, files)
            task = await wait_for_task(client, task_id, two_attempts)
        finally:
            llm.llm.configure(fail_rate=fail_rate)

    assert task["status"] == "COMPLETED_WITH_ERRORS", task
    docs = by_name(task)
    assert docs["warm.txt"]["status"] == "COMPLETED" and docs["warm.txt"]["summary"] == warmed["summary"]
    chunks = await chunks_of(db, task_id)
    failed_chunks = [c for c in chunks if c["filename"] != "warm.txt"]
    assert len(failed_chunks) > 2
    for c in failed_chunks:
        assert c["status"] == "FAILED" and c["attempts"] == 2, dict(c)
        assert "500" in c["error"] and "2 attempts" in c["error"], c["error"]
    for name in ("long.txt", "short.txt"):
        total = docs[name]["chunks"]["total"]
        assert docs[name]["status"] == "FAILED" and docs[name]["chunks"]["failed"] == total
        assert f"{total} of {total} parts could not be summarized" in docs[name]["error"], docs[name]["error"]
        assert "part 1:" in docs[name]["error"] and "500" in docs[name]["error"]
    async with two_attempts.client() as client:
        listed = (await client.get(f"/v1/tasks/{task_id}/failures")).json()
    assert sorted((f["filename"], f["chunk_index"]) for f in listed) == sorted(
        (c["filename"], c["chunk_index"]) for c in failed_chunks
    )
    assert all(f["attempts"] == 2 and "500" in f["error"] for f in listed), listed
    # Each failed prompt was tried exactly twice; nothing was answered.
    before = calls(llm, marker)
    tries = Counter(e.prompt_sha256 for e in before if e.status == 500)
    assert len(tries) == len(failed_chunks) and set(tries.values()) == {2}, tries
    answered_before = {e.prompt_sha256 for e in before if e.status == 200}

    async with two_attempts.client() as client:
        retried = await client.post(f"/v1/tasks/{task_id}/retry")
        assert retried.status_code == 200, retried.text
        assert retried.json()["redriven_events"] >= len(failed_chunks)
        task = await wait_for_task(client, task_id, two_attempts)

    assert task["status"] == "COMPLETED", task
    assert all(d["status"] == "COMPLETED" and d["summary"] for d in task["documents"])
    assert by_name(task)["warm.txt"]["summary"] == warmed["summary"]
    sent = calls(llm, marker)[len(before) :]
    assert all(e.status == 200 for e in sent), [e.status for e in sent]
    once = Counter(e.prompt_sha256 for e in sent)
    assert set(once.values()) == {1}  # no request paid twice
    assert set(tries) <= set(once)  # every failed chunk sent again...
    assert not set(once) & answered_before  # ... and nothing answered before
    extra = [e for e in sent if e.prompt_sha256 not in tries]  # ... besides the merges that had not happened yet
    assert extra and all("<text>" not in e.user for e in extra), [e.user[:200] for e in extra]
    assert all(c["status"] == "COMPLETED" and c["attempts"] == 1 for c in await chunks_of(db, task_id))


# --- 5. rate limits ------------------------------------------------------------------------------------


async def test_a_chunk_waits_for_its_next_round_in_its_row_and_holds_no_slot(
    make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer
) -> None:
    stack = make_stack(DOCSUM_LLM_INPLACE_ATTEMPTS="1", DOCSUM_LLM_RETRY_DELAY_S="1", DOCSUM_LLM_MAX_ATTEMPTS="3")
    # What used to park every delayed-retry slot: far-future "retries" from anyone who can write to
    # Kafka. Now a due time is never taken from the wire; these name no chunk and are dead-lettered.
    # It runs on Kafka: the bus has no foreign writers, and keyless messages would share one lane there.
    producer = AIOKafkaProducer(**kafka_options(stack.env), acks="all")
    await producer.start()
    try:
        for i in range(64):
            far = {"task_id": "t", "document_id": "d", "chunk_id": f"far-{i}", "chunk_index": 0,
                   "not_before": "2999-01-01T00:00:00Z", "failures": 1}  # fmt: skip
            await producer.send(stack.env["DOCSUM_TOPIC_PREFIX"] + Topic.CHUNK_CREATED, json.dumps(far).encode())
        await producer.flush()
    finally:
        await producer.stop()
    marker = new_marker()
    # The chunk's first round fails; its second, a second later, is answered.
    task = await forced_task(stack, llm, lambda: llm.llm.fail_next(1), "flaky.txt", 62, marker)

    assert task["status"] == "COMPLETED", task
    assert [e.status for e in calls(llm, marker)] == [500, 200]
    (chunk,) = await chunks_of(db, task["task_id"])
    assert chunk["status"] == "COMPLETED" and chunk["failures"] == 1 and chunk["attempts"] == 2, dict(chunk)
    assert chunk["retry_at"] is None


async def test_rate_limits_do_not_count_as_failures(
    make_stack: StackFactory, db: asyncpg.Pool, llm: FakeLLMServer
) -> None:
    one_attempt, marker = with_attempts(make_stack, 1), new_marker()
    task = await forced_task(
        one_attempt, llm, lambda: llm.llm.rate_limit_next(3, retry_after=0.5), "busy.txt", 81, marker
    )

    assert task["status"] == "COMPLETED", task
    entries = calls(llm, marker)
    assert [e.status for e in entries] == [429, 429, 429, 200]
    assert len({e.prompt_sha256 for e in entries}) == 1
    (chunk,) = await chunks_of(db, task["task_id"])
    assert chunk["status"] == "COMPLETED" and chunk["attempts"] == 1 and chunk["error"] is None, dict(chunk)


# --- 6. permanent provider errors -----------------------------------------------------------------------


async def test_rejected_prompt_fails_at_once(pipeline: AnyStack, db: asyncpg.Pool, llm: FakeLLMServer) -> None:
    stack, marker = pipeline, new_marker()
    reject = llm.llm.config()["reject_marker"]
    if not reject:
        llm.llm.configure(reject_marker="FAKE_LLM_REJECT")
    try:
        refused = f"{marked_text(1_000, 91, marker)}\n\n{marker} {llm.llm.reject_marker} {marker}."
        files = [
            txt("refused.txt", refused),
            txt("fine-1.txt", marked_text(1_000, 92, marker)),
            txt("fine-2.txt", marked_text(1_000, 93, marker)),
        ]
        async with stack.client() as client:
            task = await wait_for_task(client, await submit(client, files), stack)
        rejected_by = llm.llm.reject_marker
    finally:
        llm.llm.configure(reject_marker=reject)

    assert task["status"] == "COMPLETED_WITH_ERRORS", task
    docs = by_name(task)
    assert docs["fine-1.txt"]["status"] == docs["fine-2.txt"]["status"] == "COMPLETED"
    assert docs["refused.txt"]["status"] == "FAILED"
    assert "1 of 1 parts could not be summarized" in docs["refused.txt"]["error"]
    assert "rejected" in docs["refused.txt"]["error"] and "400" in docs["refused.txt"]["error"]
    (chunk,) = [c for c in await chunks_of(db, task["task_id"]) if c["filename"] == "refused.txt"]
    assert chunk["status"] == "FAILED" and chunk["attempts"] == 1
    assert "rejected" in chunk["error"] and "400" in chunk["error"], chunk["error"]
    # One request, no retry.
    assert rejected_by is not None  # configured above when the stand-in had none
    asked = [e for e in calls(llm, marker) if rejected_by in e.prompt]
    assert [e.status for e in asked] == [400]
    async with stack.client() as client:
        listed = (await client.get(f"/v1/tasks/{task['task_id']}/failures")).json()
    assert [(f["filename"], f["chunk_index"], f["attempts"]) for f in listed] == [("refused.txt", 0, 1)]
    # The task summary merges the two documents that completed.
    assert task["summary"] and task["summary"] not in (docs["fine-1.txt"]["summary"], docs["fine-2.txt"]["summary"])
