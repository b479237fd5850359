"""What the batch driver holds of a batch is bounded by its pages, not by the batch: gathering, uploading
and ingesting a 2,000-line batch (four pages of 500) takes no more memory (tracemalloc's peak, in this
process) than a 200-line one (before pages, 20,000 lines peaked at 321.5 MiB and 2,000 at 31.9; with
pages, 200 and 2,000 lines peak at about 5.2 and 7.8, as 3,000 did). The driver runs here on the real PostgreSQL
and Kafka; the stand-in provider runs in a process of its own, so that the files it keeps are not counted
as the driver's."""

from __future__ import annotations

import json
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.client import OpenAIBackend
from docsum_shared.kafka import KafkaPublish, ensure_topics, make_producer
from docsum_shared.options import TaskOptions
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.driver import BatchDriver
from docsum_summarizer.batches.policy import LineStatus, request_json
from docsum_summarizer.batches.repository import BatchRepository
from docsum_summarizer.settings import SummarizerSettings
from tests.fake_llm import FakeLLMProcess
from tests.integration.helpers import eventually

pytestmark = pytest.mark.integration

MODEL = "stand-in-1"
MiB = 1024 * 1024
# Each request's text: about what a chunk holds, so that a 20,000-line input file has ~40 MB.
TEXT = " ".join(f"Sentence {i} of the chunk says one more thing about the subject at hand." for i in range(25))


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """The stand-in in a process of its own; its base URL."""
    with FakeLLMProcess() as process:
        # A provider second lasts 10 µs: 20,000 lines of 2 s each run in 0.4 s.
        process.llm.configure(batch_time_scale=1e-5, seed=1)
        yield process.base_url


@pytest.fixture(scope="module")
async def producer(infra: dict[str, str]) -> AsyncIterator[tuple[AIOKafkaProducer, SummarizerSettings]]:
    settings = SummarizerSettings(
        kafka_bootstrap_servers=infra["KAFKA_BOOTSTRAP_SERVERS"],
        topic_prefix=f"test-{uuid.uuid4().hex[:8]}.",
        llm_batch_gather_s=0,
        llm_batch_poll_s=0.1,
        llm_model=MODEL,
    )
    await ensure_topics(settings, wait_s=30)
    started = make_producer(settings)
    await started.start()
    yield started, settings
    await started.stop()


async def _seed(db: asyncpg.Pool, endpoint: str, lines: int) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    document_id = f"{task_id}-d"
    await db.execute(
        "INSERT INTO tasks (id, owner, status, options) VALUES ($1, 'alice', $2, $3::jsonb)",
        task_id, TaskStatus.PROCESSING, TaskOptions(mode="batch").model_dump_json(),
    )  # fmt: skip
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'd.txt', $3)",
        document_id, task_id, DocumentStatus.SUMMARIZING,
    )  # fmt: skip
    chunks, queued = [], []
    for i in range(lines):
        chunk_id, text = f"{document_id}-c{i:05d}", f"{i}: {TEXT}"
        chunks.append((chunk_id, document_id, i, len(text), text, ChunkStatus.SUMMARIZING))
        request = json.dumps(request_json(SummaryRequest(kind=SummaryKind.CHUNK, texts=(text,))))
        queued.append((chunk_id, task_id, f"key-{chunk_id}", request, LineStatus.QUEUED, endpoint))
    await db.executemany(
        "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, failures)"
        " VALUES ($1, $2, $3, 0, $4, $5, $6, 0)",
        chunks,
    )
    await db.executemany(
        "INSERT INTO batch_lines (chunk_id, task_id, owner, custom_id, request, status, endpoint, created_at)"
        " VALUES ($1, $2, 'alice', $3, $4::jsonb, $5, $6, now() - interval '1 minute')",
        queued,
    )
    return task_id


async def _peak_while_driving(
    db: asyncpg.Pool, provider: str, producer: tuple[AIOKafkaProducer, SummarizerSettings], lines: int
) -> int:
    """tracemalloc's peak while the driver gathers `lines` queued requests into one batch, uploads it,
    polls it and ingests its answers."""
    kafka, settings = producer
    endpoint = f"{provider}|{MODEL}|{uuid.uuid4().hex[:8]}"
    task_id = await _seed(db, endpoint, lines)
    repo = BatchRepository(db, endpoint)
    backend = OpenAIBackend(MODEL, base_url=provider, api_key="test-key")
    one_batch = settings.model_copy(update={"llm_batch_max_lines": lines})
    driver = BatchDriver(repo, backend, KafkaPublish(kafka, one_batch), one_batch)

    async def ingested() -> bool:
        await driver.drive_once()
        return bool(
            await db.fetchval(
                "SELECT count(*) = 0 FROM batch_lines WHERE task_id = $1 AND status = ANY($2::text[])",
                task_id,
                [LineStatus.QUEUED, LineStatus.SUBMITTED],
            )
        )

    tracemalloc.start()
    try:
        await eventually(ingested, timeout=240, interval=0.1, message=f"the {lines}-line batch ingested")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await driver.aclose()
        await backend.aclose()
    answered = await db.fetchval(
        "SELECT count(*) FROM batch_lines WHERE task_id = $1 AND status = $2", task_id, LineStatus.ANSWERED
    )
    assert answered == lines
    print(f"{lines} lines: peak {peak / MiB:.1f} MiB")
    return peak


@pytest.mark.timeout(300)  # 2,200 lines stored and announced
async def test_a_batch_ten_times_larger_takes_no_more_memory_to_upload_and_ingest(
    repository_db: asyncpg.Pool, provider: str, producer: tuple[AIOKafkaProducer, SummarizerSettings]
) -> None:
    # Under a page, then four pages: ten times the lines (under tracemalloc, ingesting takes ~9 ms a line).
    small = await _peak_while_driving(repository_db, provider, producer, 200)
    large = await _peak_while_driving(repository_db, provider, producer, 2_000)
    # Pages of requests and of output lines, not the batch: ten times the lines, about the same peak.
    assert large < 1.5 * small + 2 * MiB, (small, large)
    assert large < 32 * MiB, large
