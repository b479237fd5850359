"""The parser's repository contract against its fake, and a fake that forgets a guard failing it."""

from __future__ import annotations

import hashlib

import pytest

from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.fakes.parser import DocumentRow, FakeParserRepository, TaskRow
from tests.repositories.parser import ParserRepositoryContract, new_id


class TestFakeParserRepository(ParserRepositoryContract):
    fake: FakeParserRepository

    @pytest.fixture(autouse=True)
    def _on(self) -> None:
        self.fake = self.repo = FakeParserRepository()

    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, expected_documents: int | None = None
    ) -> str:
        task_id = new_id("task")
        self.fake.state.tasks[task_id] = TaskRow(owner, status, expected_documents=expected_documents)
        return task_id

    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.PENDING, data: bytes | None = None
    ) -> str:
        document_id = new_id("doc")
        sha256 = hashlib.sha256(data).hexdigest() if data is not None else None
        if data is not None and sha256 is not None:
            self.fake.state.blobs[sha256] = data
        size = len(data) if data is not None else None
        self.fake.state.documents[document_id] = DocumentRow(task_id, status, sha256, size)
        return document_id

    async def given_reset(self, document_id: str) -> None:
        doc = self.fake.state.documents[document_id]
        doc.status, doc.error = DocumentStatus.PENDING, None

    async def text_of(self, document_id: str) -> str | None:
        return self.fake.state.texts.get(document_id)

    async def positions_of(self, document_id: str) -> Positions | None:
        return self.fake.state.positions.get(document_id)

    async def reading_of(self, document_id: str) -> str | None:
        return self.fake.state.reading.get(document_id)


class FakeThatParsesTwice(FakeParserRepository):
    """Forgets that only a document still needing its parse takes its text: a redelivery overwrites it."""

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        doc = self.state.documents[document_id]
        doc.status, doc.size_level, doc.text_chars = DocumentStatus.CHUNKING, size_level, len(text)
        self.state.texts[document_id] = text
        self.state.positions[document_id] = positions


async def test_the_contract_fails_a_fake_that_stores_a_text_twice() -> None:
    case = TestFakeParserRepository()
    case.fake = case.repo = FakeThatParsesTwice()
    with pytest.raises(AssertionError):
        await case.test_a_text_is_stored_once_a_second_parse_changes_nothing()


class FakeThatDropsPositions(FakeParserRepository):
    """Stores the text but not where its units start (as an INSERT that forgets the columns would)."""

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        await super().store_text(document_id, text, size_level, positions)
        self.state.positions.pop(document_id, None)


async def test_the_contract_fails_a_fake_that_stores_a_text_without_its_positions() -> None:
    case = TestFakeParserRepository()
    case.fake = case.repo = FakeThatDropsPositions()
    with pytest.raises(AssertionError):
        await case.test_where_the_units_start_is_stored_with_the_text(Positions("page", (0, 18, 18, 36)))
