"""The cap on chunks per document: checked by the chunker's policy before any chunk row is stored."""

from __future__ import annotations

import pytest

from docsum_chunker import handlers as chunker
from docsum_chunker.chunking import TooManyChunks, split_into_chunks
from docsum_chunker.policy import cut
from docsum_chunker.repository import ParsedDocument
from docsum_chunker.settings import ChunkerSettings
from docsum_shared.errors import Fail
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed
from docsum_shared.levels import SizeLevel
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.documents import english_prose
from tests.fakes.chunker import FakeChunkRepository

TEXT = english_prose(60_000, seed=5)


def test_a_text_needing_exactly_the_cap_is_cut() -> None:
    needed = len(split_into_chunks(TEXT))
    assert len(split_into_chunks(TEXT, max_chunks=needed)) == needed
    with pytest.raises(TooManyChunks) as info:
        split_into_chunks(TEXT, max_chunks=needed - 1)
    assert info.value.limit == needed - 1 and info.value.at_least >= needed


def test_a_text_too_long_for_the_cap_fails_before_it_is_cut() -> None:
    # 1.25 * 2,000 characters at most per chunk: 10 million characters need 4,000 chunks at least.
    with pytest.raises(TooManyChunks) as info:
        split_into_chunks("word " * 2_000_000, max_chunks=3_000)
    assert info.value.at_least == 4_000


def test_small_documents_are_one_chunk_whatever_the_cap() -> None:
    assert len(split_into_chunks("A short text.", max_chunks=1)) == 1


def test_the_policy_fails_the_document_naming_the_setting() -> None:
    settings = ChunkerSettings(_env_file=None, max_chunks_per_document=10)
    result = cut("d", TEXT, settings)
    assert isinstance(result, Fail)
    assert "chunks, over the limit of 10 (DOCSUM_MAX_CHUNKS_PER_DOCUMENT)" in result.error
    assert isinstance(cut("d", TEXT, ChunkerSettings(_env_file=None)), list)


async def test_the_chunker_fails_the_document_and_stores_no_chunk() -> None:
    repo = FakeChunkRepository.holding("d", ParsedDocument(DocumentStatus.CHUNKING, TEXT, TaskStatus.PROCESSING))
    event = DocumentParsed(task_id="t", document_id="d", text_chars=len(TEXT), size_level=SizeLevel.MEDIUM)

    [out] = await chunker.handle(event, chunker.Deps(repo, ChunkerSettings(_env_file=None, max_chunks_per_document=10)))

    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert out.document_id == "d" and out.causation_id == event.event_id
    assert await repo.stored_chunks("d") == [] and repo.transactions == 0
    assert repo.documents["d"].status is DocumentStatus.FAILED
    assert "DOCSUM_MAX_CHUNKS_PER_DOCUMENT" in (repo.documents["d"].error or "")
