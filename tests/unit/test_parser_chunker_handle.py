"""The parser's and the chunker's handle(event, deps) against in-memory fakes of their repositories."""

from __future__ import annotations

from dataclasses import replace

import pytest

from docsum_chunker import handlers as chunker
from docsum_chunker.policy import ChunkRef
from docsum_chunker.repository import ParsedDocument
from docsum_chunker.settings import ChunkerSettings
from docsum_parser import handlers as parser
from docsum_parser.policy import StoredDocument
from docsum_parser.settings import ParserSettings
from docsum_shared.approval import Plan
from docsum_shared.errors import Poison
from docsum_shared.events import (
    DocumentMerged,
    DocumentOutcome,
    DocumentParsed,
    DocumentSubmitted,
    TaskEvent,
)
from docsum_shared.levels import SizeLevel
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.documents import english_prose
from tests.fakes.chunker import FakeChunkRepository
from tests.fakes.parser import FakeParserRepository

PARSER = ParserSettings(_env_file=None)
CHUNKER = ChunkerSettings(_env_file=None)
SUBMITTED = DocumentSubmitted(
    task_id="t", document_id="d", owner="o", filename="a.txt", blob_sha256="sha", size_bytes=1
)


def _parser(doc: StoredDocument | None, data: bytes | None = None) -> tuple[FakeParserRepository, parser.Deps]:
    if doc is None:
        repo = FakeParserRepository()
    else:  # the row holds the bytes the stored form names (the parser reads only the row's)
        repo = FakeParserRepository.holding("d", replace(doc, blob_sha256=SUBMITTED.blob_sha256), data)
    return repo, parser.Deps(repo, PARSER)


async def test_parser_stores_the_text_and_announces_it_on_the_same_trace() -> None:
    repo, deps = _parser(StoredDocument(DocumentStatus.PENDING, None, None, None), english_prose(3_000).encode())
    [out] = await parser.handle(SUBMITTED, deps)
    assert isinstance(out, DocumentParsed) and out.size_level is SizeLevel.SMALL
    assert out.trace_id == SUBMITTED.trace_id and out.causation_id == SUBMITTED.event_id
    assert repo.texts["d"] and repo.documents["d"].size_level is SizeLevel.SMALL


async def test_parser_replay_announces_the_stored_parse_without_reading_the_bytes() -> None:
    repo, deps = _parser(StoredDocument(DocumentStatus.SUMMARIZING, 42, SizeLevel.SMALL, None))
    [out] = await parser.handle(SUBMITTED, deps)
    assert isinstance(out, DocumentParsed) and out.text_chars == 42
    assert repo.bytes_read == 0 and repo.texts == {}


@pytest.mark.parametrize("task", [TaskStatus.PAUSED, TaskStatus.CANCELLED, TaskStatus.COMPLETED])
async def test_parser_gives_held_tasks_no_work(task: TaskStatus) -> None:
    repo, deps = _parser(StoredDocument(DocumentStatus.PENDING, None, None, None, task), b"text")
    assert await parser.handle(SUBMITTED, deps) == [] and repo.bytes_read == 0


async def test_parser_fails_a_broken_file_and_the_task_still_hears_of_it() -> None:
    repo, deps = _parser(StoredDocument(DocumentStatus.PENDING, None, None, None), b"")
    [out] = await parser.handle(SUBMITTED, deps)
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert "empty" in (repo.documents["d"].error or "")


async def test_parser_poison_for_unknown_documents_or_missing_bytes() -> None:
    with pytest.raises(Poison):
        await parser.handle(SUBMITTED, _parser(None)[1])
    with pytest.raises(Poison):
        await parser.handle(SUBMITTED, _parser(StoredDocument(DocumentStatus.PENDING, None, None, None))[1])


PARSED = DocumentParsed(task_id="t", document_id="d", text_chars=30_000, size_level=SizeLevel.MEDIUM)


async def test_chunker_stores_every_chunk_and_leaves_announcing_to_the_admission() -> None:
    repo = FakeChunkRepository.holding(
        "d", ParsedDocument(DocumentStatus.CHUNKING, english_prose(30_000), TaskStatus.PROCESSING)
    )
    out = await chunker.handle(PARSED, chunker.Deps(repo, CHUNKER))
    assert repo.transactions == 1 and len(await repo.stored_chunks("d")) > 10 and out == []


async def test_chunker_replay_neither_cuts_nor_announces_stored_chunks() -> None:
    repo = FakeChunkRepository.holding("d", ParsedDocument(DocumentStatus.SUMMARIZING, "text", TaskStatus.PROCESSING))
    repo.add_chunks("d", [ChunkRef("d-c00000", 0), ChunkRef("d-c00001", 1)])
    out = await chunker.handle(PARSED, chunker.Deps(repo, CHUNKER))
    assert repo.transactions == 0 and out == []


@pytest.mark.parametrize(
    ("document", "task"),
    [
        (DocumentStatus.CHUNKING, TaskStatus.PAUSED),
        (DocumentStatus.CHUNKING, TaskStatus.CANCELLED),
        (DocumentStatus.COMPLETED, TaskStatus.PROCESSING),
    ],
)
async def test_chunker_does_nothing_for_held_tasks_or_merged_documents(
    document: DocumentStatus, task: TaskStatus
) -> None:
    repo = FakeChunkRepository.holding("d", ParsedDocument(document, "text", task))
    assert await chunker.handle(PARSED, chunker.Deps(repo, CHUNKER)) == [] and repo.transactions == 0


async def test_chunker_poison_for_unknown_documents_or_missing_text() -> None:
    with pytest.raises(Poison):
        await chunker.handle(PARSED, chunker.Deps(FakeChunkRepository(), CHUNKER))
    repo = FakeChunkRepository.holding("d", ParsedDocument(DocumentStatus.CHUNKING, None, TaskStatus.PROCESSING))
    with pytest.raises(Poison):
        await chunker.handle(PARSED, chunker.Deps(repo, CHUNKER))


async def test_a_task_over_its_owners_ceiling_waits_for_approval_before_any_call() -> None:
    settings = ChunkerSettings(_env_file=None, llm_backend="openai", task_max_calls=5)
    repo = FakeChunkRepository.holding(
        "d", ParsedDocument(DocumentStatus.CHUNKING, english_prose(30_000), TaskStatus.PROCESSING)
    )
    [waiting] = await chunker.handle(PARSED, chunker.Deps(repo, settings))
    assert isinstance(waiting, TaskEvent) and waiting.status is TaskStatus.AWAITING_APPROVAL
    assert "DOCSUM_TASK_MAX_CALLS" in waiting.detail["reason"] and "ceiling of 5" in waiting.detail["reason"]
    assert repo.tasks["t"].status is TaskStatus.AWAITING_APPROVAL and repo.tasks["t"].asked is not None


def test_ceilings_per_owner_and_by_cost() -> None:
    from docsum_shared.approval import Ceiling, over_ceiling, plan_of

    plan = plan_of([38, 1, 1], prompt_tokens=30_000, fan_in=(None, None))
    assert plan == Plan(chunks=40, merges=2, prompt_tokens=30_000) and plan.calls == 42
    assert over_ceiling(plan, 0.01, Ceiling(calls=100)) is None
    assert "DOCSUM_TASK_MAX_CALLS" in (over_ceiling(plan, 0.01, Ceiling(calls=10)) or "")
    assert "DOCSUM_TASK_MAX_COST_USD" in (over_ceiling(plan, 0.5, Ceiling(cost_usd=0.25)) or "")
    settings = ChunkerSettings(_env_file=None, task_max_calls=10, owner_ceilings={"bob": {"calls": 1000}})
    assert settings.ceiling("alice").calls == 10 and settings.ceiling("bob").calls == 1000
