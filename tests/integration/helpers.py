"""What the integration tests do again and again, in one place.

- Waiting: `eventually` polls a condition until it holds (bounded), `wait_for_task` until a task is final.
- The API and the database: `submit` a task, `get_task` its view, `chunks_of` a task or a document.
- Markers: the stand-in LLM (and its ledger) is shared by the whole session, so a test puts a marker word
  of its own (`new_marker`) into its documents (`tagged`, `marked_text`) and looks only at the requests
  whose prompt carries it (`calls`, `chunk_calls`, `paid_twice`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, Protocol, TypeVar, runtime_checkable

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError

from docsum_shared.events import Topic
from docsum_shared.kafka import DLQ_SUFFIX, client_options, topic_partitions
from docsum_shared.settings import Settings
from tests.documents import english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer, LedgerEntry, RemoteFakeLLM

T = TypeVar("T")
Message = str | Callable[[], str]


class Logs(Protocol):
    """What a failed wait reports beside its message (a conftest.Stack: its services' log tail)."""

    def log_tail(self) -> str: ...


@runtime_checkable
class Topics(Protocol):
    """A stack that reads its own topics (conftest.Stack off the broker, an InProcessStack off its bus)."""

    async def read_topics(self, topics: list[str]) -> list[Any]: ...


FINAL = {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED", "EXPIRED"}


# --- waiting ------------------------------------------------------------------------------------------


async def eventually(
    condition: Callable[[], Any | Awaitable[Any]],
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
    message: Message = "the condition",
    stack: Logs | None = None,
) -> Any:
    """Poll `condition` (plain or async) every `interval` seconds until it returns something truthy, and
    return that. After `timeout` seconds the test fails: "timed out after ...s waiting for <message>"
    (`message` may be a callable, to report the last state seen), with `stack`'s log tail when given."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            _timed_out(timeout, message, stack)
        await asyncio.sleep(interval)


def eventually_blocking(
    condition: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
    message: Message = "the condition",
    stack: Logs | None = None,
) -> T:
    """`eventually` for synchronous callers (`Stack.wait_ready`): it blocks the calling thread."""
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            _timed_out(timeout, message, stack)
        time.sleep(interval)


def _timed_out(timeout: float, message: Message, stack: Logs | None) -> NoReturn:
    what = message() if callable(message) else message
    logs = f"\n{stack.log_tail()}" if stack is not None else ""
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}{logs}")


async def wait_for_task(
    client: httpx.AsyncClient, task_id: str, stack: Logs, timeout: float = 180.0, *, published: bool = False
) -> dict:
    """The task's view once it is final; the test fails (with the services' logs) if it is not in time.
    `published`: a task another system published onto its intake topic, which the gateway knows only once
    the intake has created it on first sight: until then its view is a 404 that is not yet an answer."""
    last: dict[str, Any] | None = None

    async def final() -> dict[str, Any] | None:
        nonlocal last
        response = await client.get(f"/v1/tasks/{task_id}")
        if published and response.status_code == 404:
            return None
        response.raise_for_status()
        last = response.json()
        return last if last["status"] in FINAL else None

    def seen() -> str:
        return f"task {task_id} to finish: {'not created yet' if last is None else last}"

    return await eventually(final, timeout=timeout, interval=0.3, message=seen, stack=stack)


# --- the API and the database -------------------------------------------------------------------------


def txt(name: str, content: str | bytes) -> tuple[str, tuple[str, bytes, str]]:
    """A text/plain file part for `submit`."""
    data = content.encode() if isinstance(content, str) else content
    return ("files", (name, data, "text/plain"))


async def submit(client: httpx.AsyncClient, files: list, **form: str) -> str:
    """POST /v1/tasks: `files` as httpx takes them (see `txt`), `form` as form fields (title=...).
    Returns the new task's id."""
    response = await client.post("/v1/tasks", files=files, data=form or None)
    assert response.status_code == 201, response.text
    return response.json()["task_id"]


async def get_task(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """GET /v1/tasks/{task_id}."""
    response = await client.get(f"/v1/tasks/{task_id}")
    response.raise_for_status()
    return response.json()


def chunk_request(chunk: asyncpg.Record | Mapping[str, Any]) -> tuple[str, str, str]:
    """What a stored chunk's summary request is made of (summarizer policy.request_for, the options aside):
    a chunk whose request a new version left as it was is answered from its owner's result cache."""
    return chunk["text"], chunk["context_before"], chunk["context_after"]


async def chunks_of(db: asyncpg.Pool, task_or_document_id: str) -> list[asyncpg.Record]:
    """The chunk rows of a task (or of one document), each with its document's filename, in document
    and chunk order."""
    return await db.fetch(
        "SELECT d.filename, c.* FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE $1 IN (d.task_id, d.id) ORDER BY d.position, c.chunk_index",
        task_or_document_id,
    )


# --- markers ------------------------------------------------------------------------------------------


def new_marker() -> str:
    """A word no other test uses."""
    return f"mk{uuid.uuid4().hex[:10]}"


def tagged(text: str, marker: str, *, numbered: bool = False) -> str:
    """Every paragraph starts with the marker (numbered: "<marker> note <i>. "), so every chunk (and its
    prompt) carries it."""
    paragraphs = text.split("\n\n")
    if numbered:
        return "\n\n".join(f"{marker} note {i}. {p}" for i, p in enumerate(paragraphs))
    return "\n\n".join(f"{marker} {p}" for p in paragraphs)


def marked_text(n_chars: int, seed: int, marker: str) -> str:
    """English prose in which every sentence starts and ends with `marker`: every prompt made from it
    (a chunk, even one cut mid-sentence, and the merges of their summaries) contains the marker."""
    paragraphs = english_prose(n_chars, seed=seed).split("\n\n")
    return "\n\n".join(
        " ".join(f"{marker} {s[:-1]} {marker}{s[-1]}" for s in re.split(r"(?<=[.!?]) ", p)) for p in paragraphs
    )


def calls(
    llm: FakeLLM | FakeLLMServer | RemoteFakeLLM, marker: str, status: int | None = None, *, since: float = 0.0
) -> list[LedgerEntry]:
    """The stand-in's requests whose prompt carries `marker` (with `status`, started at `since` or later),
    in the order they finished."""
    ledger = llm.llm if isinstance(llm, FakeLLMServer) else llm
    return [e for e in ledger.entries(status) if marker in e.prompt and e.started >= since]


def chunk_calls(llm: FakeLLM | FakeLLMServer, marker: str) -> list[LedgerEntry]:
    """Answered chunk-summary requests carrying `marker` (the ones whose prompt holds a <text> section)."""
    return [e for e in calls(llm, marker, 200) if "<text>\n" in e.prompt]


def paid_twice(entries: list[LedgerEntry]) -> int:
    """Answered requests whose prompt had been answered before."""
    seen: set[str] = set()
    repeated = 0
    for entry in entries:
        if entry.status == 200:
            repeated += entry.prompt_sha256 in seen
            seen.add(entry.prompt_sha256)
    return repeated


def clear_forced(llm: FakeLLM | FakeLLMServer) -> None:
    """Drop fail_next / rate_limit_next / hang_next requests not consumed yet (FakeLLM.reset would also
    clear the ledger), so they cannot hit the next test."""
    ledger = llm.llm if isinstance(llm, FakeLLMServer) else llm
    with ledger._lock:
        ledger._forced.clear()


# --- Kafka: what is on the topics ------------------------------------------------------------------

# Each consumed topic and the consumer group (service) that reads it.
CONSUMED = {
    Topic.DOCUMENT_SUBMITTED: "parser",
    Topic.DOCUMENT_PARSED: "chunker",
    Topic.CHUNK_CREATED: "summarizer",
    Topic.CHUNK_SUMMARIZED: "merger",
    Topic.DOCUMENT_MERGED: "merger",
    Topic.TASK_EVENTS: "merger",
}


def kafka_settings(env: Mapping[str, str]) -> Settings:
    """The Kafka side of the settings a process with environment `env` (a stack's) runs with: the
    broker, its security settings (DOCSUM_KAFKA_*) and the topic prefix."""
    kafka: dict[str, Any] = {
        name.removeprefix("DOCSUM_").lower(): value
        for name, value in env.items()
        if name in ("KAFKA_BOOTSTRAP_SERVERS", "DOCSUM_TOPIC_PREFIX") or name.startswith("DOCSUM_KAFKA_")
    }
    return Settings(**kafka)


def kafka_options(env: Mapping[str, str]) -> dict[str, Any]:
    """How a test's own Kafka client connects to the broker of `env`, as the services do."""
    return client_options(kafka_settings(env))


async def delete_topics(env: Mapping[str, str]) -> list[str]:
    """Delete every topic on the broker of `env` whose name starts with its topic prefix (a deployment's
    topics, its DLQs and intake topics included); the names deleted. A topic gone already (deleted by a
    test, or by a delete that timed out on the client after the broker did it) is no error."""
    prefix = env["DOCSUM_TOPIC_PREFIX"]
    admin = AIOKafkaAdminClient(**kafka_options(env))
    await admin.start()
    try:
        topics = [topic for topic in await admin.list_topics() if topic.startswith(prefix)]
        if not topics:
            return []
        response = await admin.delete_topics(topics)
        failed = {
            topic: code
            for topic, code, *_ in response.topic_error_codes
            if code not in (0, UnknownTopicOrPartitionError.errno)
        }
        if failed:
            raise RuntimeError(f"cannot delete topics (name: Kafka error code): {failed}")
        return topics
    finally:
        await admin.close()


def _partitions(env: dict[str, str], topics: list[str]) -> list[TopicPartition]:
    declared = topic_partitions(Settings(topic_prefix=env["DOCSUM_TOPIC_PREFIX"]))
    return [TopicPartition(t, p) for t in topics for p in range(declared[t])]


async def read_topics(env: dict[str, str], topics: list[str]) -> list[ConsumerRecord]:
    """Every record now on `topics` (full names), from the beginning."""
    consumer = AIOKafkaConsumer(**kafka_options(env), enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = _partitions(env, topics)
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found: list[ConsumerRecord] = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += records
        return found
    finally:
        await consumer.stop()


async def task_finished(env: dict[str, str], task_id: str, stack: Logs | None = None) -> list[dict[str, Any]]:
    """The task-finished messages of `task_id` (their values, without the envelope), once there is one:
    read off `stack`'s topics when it reads its own (an in-process stack's bus), else off the broker."""
    envelope = {"event_id", "schema_version", "occurred_at", "trace_id", "causation_id"}
    topics = [env["DOCSUM_TOPIC_PREFIX"] + Topic.TASK_FINISHED]

    async def published() -> list[dict[str, Any]]:
        records = await (stack.read_topics(topics) if isinstance(stack, Topics) else read_topics(env, topics))
        found = [r for r in records if r.key == task_id.encode()]
        return [{k: v for k, v in json.loads(r.value).items() if k not in envelope} for r in found]

    return await eventually(published, timeout=60, message=f"task-finished for {task_id}", stack=stack)


def dlq_names(env: dict[str, str]) -> list[str]:
    return [env["DOCSUM_TOPIC_PREFIX"] + topic + DLQ_SUFFIX for topic in CONSUMED]


def task_of(record: ConsumerRecord) -> str | None:
    try:
        return json.loads(record.value).get("task_id")
    except (TypeError, ValueError, AttributeError):
        return None


async def read_sse(
    url: str, task_id: str, headers: dict[str, str], *, after: int | None = None, stop_after: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the snapshot, the progress entries) of one SSE connection; it is dropped after `stop_after` entries."""
    sent = {**headers, "Accept": "text/event-stream", **({"Last-Event-ID": str(after)} if after is not None else {})}
    snapshot: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    event, ids = "", []
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=60)) as client:
        async with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=sent) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: "):
                    ids.append(int(line[4:]))
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if event == "snapshot":
                        snapshot = data
                    else:
                        entries.append(data)
                        if stop_after is not None and len(entries) >= stop_after:
                            break  # leaves the stream mid-task: the connection is closed
    assert ids == [e["seq"] for e in entries]  # the SSE id is the entry's number
    return snapshot, entries


async def resolved_sentences(db: asyncpg.Pool, task: dict[str, Any]) -> list[dict[str, Any]]:
    """Every sentence of the task's summaries (its own and each document's, as its view gives them),
    once it is checked that each is labelled, that each source is a range of the extracted text of a
    document of the task, and that a cited sentence is what its sources say (citations.check_sources).
    A summary without sentences fails."""
    from docsum_llm.citations import check_sources
    from docsum_shared.cited import CitedSentence, Source

    ids = [d["document_id"] for d in task["documents"]]
    rows = await db.fetch("SELECT document_id, text FROM document_texts WHERE document_id = ANY($1::text[])", ids)
    texts = {r["document_id"]: r["text"] for r in rows}
    out: list[dict[str, Any]] = []
    for holder in [task, *task["documents"]]:
        if holder.get("summary") is None:
            continue
        assert holder["sentences"], f"no sentences for {holder.get('filename', 'the task')}: {holder['summary']!r}"
        for sentence in holder["sentences"]:
            assert sentence["support"] in ("cited", "aligned", "synthesis", "unsupported"), sentence
            sources = tuple(Source(s["document_id"], s["page"], s["start"], s["end"]) for s in sentence["sources"])
            assert all(s.document_id in texts for s in sources), sentence
            cited = CitedSentence(sentence["text"], sources, sentence["support"], tuple(sentence["at"]))
            assert check_sources(cited, texts), sentence
            assert holder["summary"][cited.at[0] : cited.at[1]] == cited.text, sentence
            out.append(sentence)
    return out
