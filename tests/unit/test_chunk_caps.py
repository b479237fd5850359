"""The cap on chunks per document: checked by the chunker's policy before any chunk row is stored."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from docsum_chunker import handlers as chunker
from docsum_chunker.chunking import TooManyChunks, split_into_chunks
from docsum_chunker.policy import ChunkRow, Fail, cut
from docsum_chunker.repository import ParsedDocument
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed
from docsum_shared.levels import SizeLevel
from docsum_shared.settings import Settings
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.documents import english_prose

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
    settings = Settings(_env_file=None, max_chunks_per_document=10)
    result = cut("d", TEXT, settings)
    assert isinstance(result, Fail)
    assert "chunks, over the limit of 10 (DOCSUM_MAX_CHUNKS_PER_DOCUMENT)" in result.error
    assert isinstance(cut("d", TEXT, Settings(_env_file=None)), list)


@dataclass
class FakeChunkRows:
    doc: ParsedDocument
    rows: list[ChunkRow] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    async def load(self, document_id: str) -> ParsedDocument | None:
        return self.doc

    async def stored_chunks(self, document_id: str) -> list[ChunkRow]:
        return [ChunkRow(r.id, r.index) for r in self.rows]

    async def store_chunks(self, document_id: str, rows: list[ChunkRow], hold: object = None) -> str | None:
        self.rows = rows
        return None

    async def fail(self, document_id: str, error: str) -> None:
        self.failed.append(error)


async def test_the_chunker_fails_the_document_and_stores_no_chunk() -> None:
    repo = FakeChunkRows(ParsedDocument(DocumentStatus.CHUNKING, TEXT, TaskStatus.PROCESSING))
    event = DocumentParsed(task_id="t", document_id="d", text_chars=len(TEXT), size_level=SizeLevel.MEDIUM)

    [out] = await chunker.handle(event, chunker.Deps(repo, Settings(_env_file=None, max_chunks_per_document=10)))

    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert out.document_id == "d" and out.causation_id == event.event_id
    assert repo.rows == [] and len(repo.failed) == 1 and "DOCSUM_MAX_CHUNKS_PER_DOCUMENT" in repo.failed[0]
