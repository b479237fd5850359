"""One bad item in batch mode fails alone: the batch driver, run in this process on the real PostgreSQL
and Kafka against the stand-in's Batch API, drives two owners' tasks in the same rounds. Bob's carries a
fault — a deadline in year 1, an answer holding NUL or half a surrogate pair, an output line nested
deeper than a parser recurses or of a shape no provider should send, a batch or file or listing the
provider refuses with a 4xx — and Alice's batch completes all the same, no line of hers paid twice,
while Bob's bad line or batch ends with a reason a user can read (his lines go realtime instead)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import openai
import pytest
from aiokafka import AIOKafkaProducer

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.client import OpenAIBackend
from docsum_shared.kafka import KafkaPublish, ensure_topics, make_producer
from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.driver import BatchDriver
from docsum_summarizer.batches.policy import LineStatus, batch_endpoint, request_json
from docsum_summarizer.batches.repository import BatchRepository
from docsum_summarizer.settings import SummarizerSettings
from tests.fake_llm import FakeLLM, FakeLLMServer
from tests.integration.helpers import eventually, new_marker

pytestmark = pytest.mark.integration

MODEL = "stand-in-1"
# A provider second lasts 1/3600 s: validating 30 s -> 8 ms, each line 2 s -> 0.6 ms, finalizing -> 8 ms.
SCALE = 1 / 3600
LINES = 3  # each owner's lines


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture
def fake(provider: FakeLLMServer) -> Iterator[FakeLLM]:
    provider.llm.reset(config=True)
    provider.llm.configure(batch_time_scale=SCALE)
    yield provider.llm
    provider.llm.reset(config=True)


@pytest.fixture(scope="module")
async def settings(infra: dict[str, str], provider: FakeLLMServer) -> SummarizerSettings:
    made = SummarizerSettings(
        kafka_bootstrap_servers=infra["KAFKA_BOOTSTRAP_SERVERS"],
        topic_prefix=f"test-{uuid.uuid4().hex[:8]}.",
        llm_batch_gather_s=0,
        llm_batch_poll_s=0.1,
        llm_model=MODEL,
        OPENAI_BASE_URL=provider.base_url,
        OPENAI_API_KEY="test-key",
    )  # the default deadline margin (900 s): a deadline in year 1 minus it is no date
    await ensure_topics(made, wait_s=30)
    return made


@pytest.fixture(scope="module")
async def producer(settings: SummarizerSettings) -> AsyncIterator[AIOKafkaProducer]:
    started = make_producer(settings)
    await started.start()
    yield started
    await started.stop()


@pytest.fixture
async def driver(
    repository_db: asyncpg.Pool, settings: SummarizerSettings, producer: AIOKafkaProducer, provider: FakeLLMServer
) -> AsyncIterator[BatchDriver]:
    # An endpoint of its own per test: no other test's batches are in its rounds.
    backend = OpenAIBackend(MODEL, base_url=provider.base_url, api_key="test-key")
    repo = BatchRepository(repository_db, f"{provider.base_url}|{MODEL}|{uuid.uuid4().hex[:8]}")
    driver = BatchDriver(repo, backend, KafkaPublish(producer, settings), settings)
    yield driver
    await driver.aclose()
    await backend.aclose()


@dataclass(frozen=True)
class Seeded:
    task_id: str
    marker: str


async def _task(db: asyncpg.Pool, endpoint: str, owner: str, options: dict[str, Any] | None = None) -> Seeded:
    """A batch task of `owner` whose LINES chunks are queued as lines (their texts carry its marker)."""
    marker, task_id = new_marker(), f"t-{uuid.uuid4().hex[:12]}"
    document_id = f"{task_id}-d"
    stored = {**TaskOptions(mode="batch").model_dump(mode="json"), **(options or {})}
    await db.execute(
        "INSERT INTO tasks (id, owner, status, options) VALUES ($1, $2, $3, $4::jsonb)",
        task_id, owner, TaskStatus.PROCESSING, json.dumps(stored),
    )  # fmt: skip
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'd.txt', $3)",
        document_id, task_id, DocumentStatus.SUMMARIZING,
    )  # fmt: skip
    for i in range(LINES):
        text = f"Sentence {i} of {owner}'s document {marker}. It says one more thing about {marker}."
        chunk_id = f"{document_id}-c{i}"
        await db.execute(
            "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, failures)"
            " VALUES ($1, $2, $3, 0, $4, $5, $6, 0)",
            chunk_id, document_id, i, len(text), text, ChunkStatus.SUMMARIZING,
        )  # fmt: skip
        request = request_json(SummaryRequest(kind=SummaryKind.CHUNK, texts=(text,)))
        await db.execute(
            "INSERT INTO batch_lines (chunk_id, task_id, owner, custom_id, request, status, endpoint, created_at)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, now() - interval '1 minute')",
            chunk_id, task_id, owner, f"key-{chunk_id}", json.dumps(request), LineStatus.QUEUED, endpoint,
        )  # fmt: skip
    return Seeded(task_id, marker)


async def _lines(db: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT status, error FROM batch_lines WHERE task_id = $1 ORDER BY chunk_id", task_id)


async def _batches(db: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT state, outcome, error FROM llm_batches WHERE task_id = $1 ORDER BY created_at", task_id
    )


async def _drive_until_settled(driver: BatchDriver, db: asyncpg.Pool, *task_ids: str) -> None:
    """Rounds of the driver (each must end without raising) until no line of the tasks is queued or in a batch."""

    async def settled() -> bool:
        await driver.drive_once()
        live = await db.fetchval(
            "SELECT count(*) FROM batch_lines WHERE task_id = ANY($1::text[]) AND status = ANY($2::text[])",
            list(task_ids), [LineStatus.QUEUED, LineStatus.SUBMITTED],
        )  # fmt: skip
        return live == 0

    await eventually(settled, timeout=60, interval=0.05, message="every line answered or sent back")


async def _alice_completed(fake: FakeLLM, db: asyncpg.Pool, alice: Seeded) -> None:
    """Alice's batch ended completed, each of her lines answered and paid once."""
    assert [(b["state"], b["outcome"]) for b in await _batches(db, alice.task_id)] == [("ended", "completed")]
    assert [line["status"] for line in await _lines(db, alice.task_id)] == [LineStatus.ANSWERED] * LINES
    paid = Counter(
        e.custom_id for e in fake.ledger if e.tier == "batch" and e.status == 200 and alice.marker in e.prompt
    )
    assert len(paid) == LINES and set(paid.values()) == {1}


def _readable(error: str | None) -> bool:
    return bool(error) and "\x00" not in (error or "") and len(error or "") <= 500


async def test_a_deadline_in_year_1_sends_its_tasks_lines_realtime_and_every_other_batch_goes_on(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool
) -> None:
    db, endpoint = repository_db, driver.repo.endpoint
    bob = await _task(db, endpoint, "bob", {"deadline": "0001-01-01T00:00:00Z"})
    alice = await _task(db, endpoint, "alice")
    await _drive_until_settled(driver, db, alice.task_id, bob.task_id)
    await _alice_completed(fake, db, alice)
    # Its deadline has long passed: its lines go realtime at once, never into a batch.
    assert [line["status"] for line in await _lines(db, bob.task_id)] == [LineStatus.REALTIME] * LINES
    assert await _batches(db, bob.task_id) == []


@pytest.mark.parametrize(
    "answer",
    ["A summary.\x00 It hides a NUL.", "A summary \ud800 with half a surrogate pair."],
    ids=["nul", "lone-surrogate"],
)
async def test_an_answer_postgresql_cannot_store_fails_its_line_alone(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool, answer: str
) -> None:
    db, endpoint = repository_db, driver.repo.endpoint
    bob, alice = await _task(db, endpoint, "bob"), await _task(db, endpoint, "alice")
    fake.configure(batch_answer_text={bob.marker: answer})
    await _drive_until_settled(driver, db, alice.task_id, bob.task_id)
    await _alice_completed(fake, db, alice)
    assert [(b["state"], b["outcome"]) for b in await _batches(db, bob.task_id)] == [("ended", "completed")]
    for line in await _lines(db, bob.task_id):
        if line["status"] == LineStatus.ANSWERED:  # made storable on its way (NUL dropped, surrogate resolved)
            continue
        assert line["status"] == LineStatus.REALTIME and _readable(line["error"]), line
        assert "could not be" in line["error"], line
    stored = await db.fetch("SELECT result FROM llm_results WHERE key LIKE $1", f"key-{bob.task_id}%")
    assert all("\x00" not in r["result"] for r in stored)


def _nested(depth: int) -> str:
    body = "[" * depth + "]" * depth
    return '{"custom_id": "{custom_id}", "response": {"status_code": 200, "body": ' + body + "}}"


WRONG_SHAPE = (
    '{"custom_id": "{custom_id}", "response": {"status_code": 200, "body":'
    ' {"choices": [{"message": "x", "finish_reason": "stop"}], "usage": []}}}'
)


@pytest.mark.parametrize(
    ("line", "says"),
    [(_nested(1_000), "not answered by the provider's batch"), (WRONG_SHAPE, "could not be read")],
    ids=["nested-1000-deep", "wrong-shape"],
)
async def test_an_output_line_that_cannot_be_read_fails_alone(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool, line: str, says: str
) -> None:
    db, endpoint = repository_db, driver.repo.endpoint
    bob, alice = await _task(db, endpoint, "bob"), await _task(db, endpoint, "alice")
    fake.configure(batch_answer_line={bob.marker: line})
    await _drive_until_settled(driver, db, alice.task_id, bob.task_id)
    await _alice_completed(fake, db, alice)
    lines = await _lines(db, bob.task_id)
    assert [r["status"] for r in lines] == [LineStatus.REALTIME] * LINES
    assert all(_readable(r["error"]) and says in r["error"] for r in lines), lines


@pytest.mark.parametrize("point", ["retrieve", "content"])
async def test_a_batch_the_provider_refuses_to_show_fails_alone(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool, point: str
) -> None:
    db, endpoint = repository_db, driver.repo.endpoint
    bob, alice = await _task(db, endpoint, "bob"), await _task(db, endpoint, "alice")
    fake.configure(batch_refuse=[{"point": point, "status": 403, "marker": bob.marker}])
    await _drive_until_settled(driver, db, alice.task_id, bob.task_id)
    await _alice_completed(fake, db, alice)
    [batch] = await _batches(db, bob.task_id)
    assert (batch["state"], batch["outcome"]) == ("ended", "failed") and "403" in batch["error"], batch
    lines = await _lines(db, bob.task_id)
    assert [r["status"] for r in lines] == [LineStatus.REALTIME] * LINES
    assert all(_readable(r["error"]) and "its batch failed" in r["error"] for r in lines), lines


async def _creating(driver: BatchDriver, db: asyncpg.Pool, task_id: str) -> str:
    """Rounds until the task's batch waits to be found (its create performed, the answer lost); its id."""

    async def creating() -> str | None:
        await driver.drive_once()
        row = await db.fetchrow("SELECT id, state FROM llm_batches WHERE task_id = $1", task_id)
        return row["id"] if row is not None and row["state"] == "creating" else None

    found: str = await eventually(creating, timeout=30, interval=0.05, message="the batch waiting to be found")
    return found


async def test_a_batch_whose_search_the_provider_refuses_fails_alone(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool
) -> None:
    db, endpoint = repository_db, driver.repo.endpoint
    bob = await _task(db, endpoint, "bob")
    fake.configure(batch_lose_create_next=1)  # created at the provider, its answer lost: it is looked for
    await _creating(driver, db, bob.task_id)
    alice = await _task(db, endpoint, "alice")
    fake.configure(batch_refuse=[{"point": "list", "status": 400, "marker": None}])
    await _drive_until_settled(driver, db, alice.task_id, bob.task_id)
    await _alice_completed(fake, db, alice)
    [batch] = await _batches(db, bob.task_id)
    assert (batch["state"], batch["outcome"]) == ("ended", "failed") and "400" in batch["error"], batch
    assert [r["status"] for r in await _lines(db, bob.task_id)] == [LineStatus.REALTIME] * LINES


# --- whose batches a driver drives ---------------------------------------------------------------------


async def test_two_accounts_on_one_url_each_drive_only_their_own_batches(
    fake: FakeLLM,
    repository_db: asyncpg.Pool,
    settings: SummarizerSettings,
    producer: AIOKafkaProducer,
    provider: FakeLLMServer,
) -> None:
    # The provider shows an account only its own batches (another key is answered 404): a driver that
    # polled the other account's batch would find it lost and send its lines again, paid twice.
    db, drivers, seeded = repository_db, [], []
    for owner in ("alice", "bob"):
        key = f"key-of-{owner}-{uuid.uuid4().hex[:6]}"
        theirs = settings.model_copy(update={"openai_api_key": key})
        endpoint = batch_endpoint(theirs)
        assert key not in endpoint  # a hash of the key names the account, never the key
        backend = OpenAIBackend(MODEL, base_url=provider.base_url, api_key=key)
        drivers.append(BatchDriver(BatchRepository(db, endpoint), backend, KafkaPublish(producer, theirs), theirs))
        seeded.append(await _task(db, endpoint, owner))
    assert drivers[0].repo.endpoint != drivers[1].repo.endpoint
    try:

        async def settled() -> bool:
            for driver in drivers:
                await driver.drive_once()
            live = await db.fetchval(
                "SELECT count(*) FROM batch_lines WHERE task_id = ANY($1::text[]) AND status = ANY($2::text[])",
                [s.task_id for s in seeded], [LineStatus.QUEUED, LineStatus.SUBMITTED],
            )  # fmt: skip
            return live == 0

        await eventually(settled, timeout=60, interval=0.05, message="both accounts' lines answered")
    finally:
        for driver in drivers:
            await driver.aclose()
            await driver.backend.aclose()
    for task in seeded:
        await _alice_completed(fake, db, task)  # each account's batch completed, each line paid once


async def test_a_batch_found_by_its_metadata_is_adopted_only_when_made_of_its_input_file(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool, provider: FakeLLMServer
) -> None:
    db = repository_db
    alice = await _task(db, driver.repo.endpoint, "alice")
    fake.configure(batch_lose_create_next=1)  # created at the provider, its answer lost: it is looked for
    ours = await _creating(driver, db, alice.task_id)
    # Someone else's batch, newer, whose metadata names ours: metadata is anyone's to write.
    async with openai.AsyncOpenAI(base_url=provider.base_url, api_key="test-key", max_retries=0) as other:
        line = {"custom_id": "not-ours", "method": "POST", "url": "/v1/chat/completions"}
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Another text."}]}
        content = (json.dumps({**line, "body": body}) + "\n").encode()
        uploaded = await other.files.create(file=("other.jsonl", content), purpose="batch")
        decoy = await other.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"docsum_batch": ours},
        )
    await _drive_until_settled(driver, db, alice.task_id)
    provider_id = await db.fetchval("SELECT provider_id FROM llm_batches WHERE id = $1", ours)
    assert provider_id is not None and provider_id != decoy.id
    await _alice_completed(fake, db, alice)  # the batch made of its file adopted: no line paid twice


async def test_batches_recorded_before_the_endpoint_named_the_account_are_taken_over(
    driver: BatchDriver, fake: FakeLLM, repository_db: asyncpg.Pool
) -> None:
    earlier = f"{driver.repo.endpoint}-as-before"  # base_url|model, as it was recorded before
    alice = await _task(repository_db, earlier, "alice")
    driver.earlier_endpoint = earlier
    await _drive_until_settled(driver, repository_db, alice.task_id)
    await _alice_completed(fake, repository_db, alice)
    assert await repository_db.fetchval("SELECT count(*) FROM llm_batches WHERE endpoint = $1", earlier) == 0
