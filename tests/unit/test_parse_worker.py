"""The parse worker: one warm process; a document that overstays, overeats or kills it fails alone, with a
message naming the setting, and the next document gets a fresh worker."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import replace

import pytest

from docsum_parser import handlers as parser
from docsum_parser.limits import Limits
from docsum_parser.parse_error import ParseError
from docsum_parser.policy import StoredDocument
from docsum_parser.worker import Job, ParseWorker, WorkerClosed
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed
from docsum_shared.states import DocumentStatus
from tests.fakes.parser import FakeParserRepository
from tests.integration.helpers import eventually_blocking
from tests.unit.test_parser_chunker_handle import PARSER, SUBMITTED
from tests.unit.worker_jobs import misbehave

GOOD = Job(b"A short note. It has two sentences.", "note.txt", "text/plain", Limits(), "doc-good")


@pytest.fixture(scope="module")
def worker() -> Iterator[ParseWorker]:
    """One worker for the module, as in the service: each test leaves it able to take the next document."""
    worker = ParseWorker(timeout_s=3.0, memory_bytes=512 * 2**20, run=misbehave)
    worker.start()
    yield worker
    worker.close()


def pid(worker: ParseWorker) -> int | None:
    process = worker._process
    return process.pid if process is not None else None


def test_documents_are_parsed_by_one_warm_worker(worker: ParseWorker) -> None:
    first = worker(GOOD)
    started = pid(worker)
    assert first.text == "A short note. It has two sentences." and worker(GOOD) == first
    assert pid(worker) == started != os.getpid()


def test_parse_errors_come_back_as_they_are(worker: ParseWorker) -> None:
    with pytest.raises(ParseError) as info:
        worker(replace(GOOD, data=b""))
    assert info.value.kind == "empty"
    with pytest.raises(ParseError) as info:
        worker(replace(GOOD, data=b"x" * 10_000, limits=Limits(max_chars=1_000)))
    assert info.value.kind == "too_large" and "DOCSUM_MAX_DOCUMENT_CHARS" in str(info.value)


def test_a_document_over_the_memory_limit_fails_and_the_worker_is_replaced(worker: ParseWorker) -> None:
    before = pid(worker)
    with pytest.raises(ParseError) as info:
        worker(replace(GOOD, filename="hungry.txt"))
    assert info.value.kind == "out_of_memory"
    assert "more memory than the limit of 512 MiB (DOCSUM_PARSE_MEMORY_BYTES)" in str(info.value)
    assert worker(GOOD).text and pid(worker) != before


def test_a_library_error_at_the_memory_limit_is_reported_as_the_limit(worker: ParseWorker) -> None:
    with pytest.raises(ParseError) as info:
        worker(replace(GOOD, filename="greedy.txt"))
    assert info.value.kind == "out_of_memory" and "DOCSUM_PARSE_MEMORY_BYTES" in str(info.value)
    assert worker(GOOD).text


def test_a_worker_that_dies_fails_its_document_only(worker: ParseWorker) -> None:
    with pytest.raises(ParseError) as info:
        worker(replace(GOOD, filename="fatal.txt"))
    assert info.value.kind == "worker_stopped"
    assert "SIGKILL" in str(info.value) and "DOCSUM_PARSE_MEMORY_BYTES" in str(info.value)
    assert worker(GOOD).text


def test_a_worker_killed_between_documents_is_rebuilt(worker: ParseWorker) -> None:
    worker(GOOD)
    process = worker._process
    assert process is not None and process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)  # the worker is this process's child: wait returns once it is gone
    assert process.poll() is not None, "the killed worker still runs"
    assert worker(GOOD).text and pid(worker) != process.pid


def test_a_bug_in_the_worker_is_not_the_document_s_fault(worker: ParseWorker) -> None:
    with pytest.raises(RuntimeError, match="KeyError"):
        worker(replace(GOOD, filename="buggy.txt"))
    assert worker(GOOD).text


def test_an_idle_worker_stops_and_the_next_document_starts_another() -> None:
    worker = ParseWorker(timeout_s=3.0, memory_bytes=512 * 2**20, idle_s=0.5, run=misbehave)
    try:
        assert pid(worker) is None  # nothing runs before the first document
        assert worker(GOOD).text and (first := worker._process) is not None
        eventually_blocking(
            lambda: worker._process is None and first.poll() is not None,
            timeout=10,
            interval=0.05,
            message="the idle worker to stop",
        )
        assert worker(GOOD).text and pid(worker) not in (None, first.pid)
    finally:
        worker.close()


def test_a_worker_started_ahead_stops_when_no_document_comes() -> None:
    worker = ParseWorker(timeout_s=3.0, memory_bytes=512 * 2**20, idle_s=0.5, run=misbehave)
    try:
        worker.start()
        assert (first := worker._process) is not None and first.poll() is None
        eventually_blocking(
            lambda: worker._process is None and first.poll() is not None,
            timeout=10,
            interval=0.05,
            message="the worker started ahead to stop",
        )
    finally:
        worker.close()


def test_a_closed_worker_takes_no_more_documents() -> None:
    worker = ParseWorker(timeout_s=3.0, memory_bytes=512 * 2**20)
    worker.close()
    with pytest.raises(WorkerClosed):
        worker(GOOD)


async def test_a_document_over_the_time_limit_fails_through_the_handler(worker: ParseWorker) -> None:
    before = pid(worker)
    repo = FakeParserRepository.holding(
        "d", StoredDocument(DocumentStatus.PENDING, None, None, None, blob_sha256="sha"), b"slow"
    )
    event = SUBMITTED.model_copy(update={"filename": "slow.txt"})

    [out] = await parser.handle(event, parser.Deps(repo, PARSER, worker))

    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert repo.documents["d"].error == (
        "reading the file took longer than the limit of 3 s (DOCSUM_PARSE_TIMEOUT_S); "
        "re-export it (or split it into smaller files) and try again"
    )
    # The worker was replaced, and the next document is parsed as usual.
    repo = FakeParserRepository.holding(
        "d", StoredDocument(DocumentStatus.PENDING, None, None, None, blob_sha256="sha"), b"Fine text."
    )
    [out] = await parser.handle(SUBMITTED, parser.Deps(repo, PARSER, worker))
    assert isinstance(out, DocumentParsed) and repo.texts["d"] == "Fine text."
    assert pid(worker) != before
