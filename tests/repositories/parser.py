"""The parser's repository contract: what docsum_parser.handlers relies on of its repository.

A document's text is stored, with where its units start, and it moves on to CHUNKING, only while it
still needs its parse (PENDING, PARSING), and once only; a text the database cannot hold is refused whole
(TextRefused); a document fails only while it still needs its parse. Another system's document is taken
in with its task on first sight: its bytes stored by sha256, or FAILED with the reason there are none;
what exists already is checked (another task's document, another owner's task, a task with all its
documents) and a refusal stores nothing. Run against the fake (tests/unit/test_parser_repository.py) and
PostgreSQL (tests/integration/test_parser_repository.py).
"""

from __future__ import annotations

import hashlib
import uuid
from abc import ABC, abstractmethod

import pytest

from docsum_parser import intake
from docsum_parser.handlers import Repository
from docsum_parser.policy import StoredDocument, TextRefused
from docsum_parser.settings import ParserSettings
from docsum_shared.errors import Poison
from docsum_shared.events import DocumentSubmitted
from docsum_shared.levels import SizeLevel
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus, TaskStatus

NEEDS_PARSE = (DocumentStatus.PENDING, DocumentStatus.PARSING)
PAST_PARSE = (DocumentStatus.CHUNKING, DocumentStatus.SUMMARIZING, DocumentStatus.FAILED, DocumentStatus.CANCELLED)
SETTINGS = ParserSettings(_env_file=None, tasks_per_minute=0)
ONE_LINE = Positions("line", (0,))


def new_id(kind: str) -> str:
    """A fresh id: cases never see each other's rows on a shared database."""
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def new_bytes() -> bytes:
    return f"The text of {uuid.uuid4()}.".encode()  # distinct bytes per case: blobs are shared by hash


def published(
    task_id: str, document_id: str, *, owner: str = "producer-owner", documents: int = 2, title: str = "batch"
) -> DocumentSubmitted:
    """Another system's document, as it publishes it (inline)."""
    return DocumentSubmitted(
        task_id=task_id, document_id=document_id, owner=owner, filename="a.txt", content_base64="eA==",
        task_documents=documents, title=title,
    )  # fmt: skip


class ParserRepositoryContract(ABC):
    repo: Repository

    # --- the world a case starts from (what the gateway and the other services write) ---------------

    @abstractmethod
    async def given_task(
        self, *, owner: str = "alice", status: TaskStatus = TaskStatus.PROCESSING, expected_documents: int | None = None
    ) -> str:
        """A new task; its id."""

    @abstractmethod
    async def given_document(
        self, task_id: str, *, status: DocumentStatus = DocumentStatus.PENDING, data: bytes | None = None
    ) -> str:
        """A new document of the task, with `data` as its stored bytes (None: no bytes); its id."""

    @abstractmethod
    async def given_reset(self, document_id: str) -> None:
        """`docsum retry` reset the failed document: PENDING again, its error cleared, still without bytes."""

    @abstractmethod
    async def text_of(self, document_id: str) -> str | None:
        """The document's stored text."""

    @abstractmethod
    async def positions_of(self, document_id: str) -> Positions | None:
        """Where the units of the document's stored text start, as stored with it."""

    # --- loads --------------------------------------------------------------------------------------

    async def test_load_returns_the_document_its_task_and_its_bytes_hash(self) -> None:
        owner, data = new_id("owner"), new_bytes()
        task = await self.given_task(owner=owner, status=TaskStatus.PAUSED)
        document = await self.given_document(task, data=data)
        assert await self.repo.load(document) == StoredDocument(
            status=DocumentStatus.PENDING,
            text_chars=None,
            size_level=None,
            error=None,
            task_status=TaskStatus.PAUSED,
            owner=owner,
            blob_sha256=hashlib.sha256(data).hexdigest(),
            task_id=task,
        )
        assert await self.repo.load(new_id("doc")) is None

    async def test_load_bytes_reads_the_bytes_stored_under_a_hash(self) -> None:
        data = new_bytes()
        await self.given_document(await self.given_task(), data=data)
        assert await self.repo.load_bytes(hashlib.sha256(data).hexdigest()) == data
        assert await self.repo.load_bytes(hashlib.sha256(new_bytes()).hexdigest()) is None

    # --- the text stored: PENDING | PARSING -> CHUNKING, once ---------------------------------------

    @pytest.mark.parametrize("status", NEEDS_PARSE)
    async def test_the_text_is_stored_and_the_document_moves_on(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status, data=new_bytes())
        await self.repo.store_text(document, "The parsed text.", SizeLevel.SMALL, ONE_LINE)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.text_chars, doc.size_level) == (
            DocumentStatus.CHUNKING, len("The parsed text."), SizeLevel.SMALL,
        )  # fmt: skip
        assert await self.text_of(document) == "The parsed text."

    @pytest.mark.parametrize(
        "positions",
        [
            Positions("page", (0, 18, 18, 36)),  # the second page is empty: it starts where the third does
            Positions("paragraph", (0, 18, 36)),
            Positions("line", (0, 17, 18, 35, 36)),
        ],
    )
    async def test_where_the_units_start_is_stored_with_the_text(self, positions: Positions) -> None:
        text = "First page text.\n\nThird page text.\n\nFourth."
        document = await self.given_document(await self.given_task(), data=new_bytes())
        await self.repo.store_text(document, text, SizeLevel.SMALL, positions)
        assert await self.text_of(document) == text
        assert await self.positions_of(document) == positions

    async def test_a_text_is_stored_once_a_second_parse_changes_nothing(self) -> None:
        document = await self.given_document(await self.given_task(), data=new_bytes())
        await self.repo.store_text(document, "First.", SizeLevel.SMALL, ONE_LINE)
        await self.repo.store_text(document, "A second,\nlonger text.", SizeLevel.MEDIUM, Positions("line", (0, 10)))
        doc = await self.repo.load(document)
        assert doc is not None and (doc.text_chars, doc.size_level) == (len("First."), SizeLevel.SMALL)
        assert await self.text_of(document) == "First."
        assert await self.positions_of(document) == ONE_LINE

    @pytest.mark.parametrize("status", PAST_PARSE)
    async def test_no_text_is_stored_for_a_document_past_its_parse(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status, data=new_bytes())
        await self.repo.store_text(document, "Late text.", SizeLevel.SMALL, ONE_LINE)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.text_chars) == (status, None)
        assert await self.text_of(document) is None
        assert await self.positions_of(document) is None

    @pytest.mark.parametrize("text", ["a NUL \x00 in the text", "a lone surrogate \ud800 in the text"])
    async def test_a_text_the_database_cannot_hold_is_refused_whole(self, text: str) -> None:
        document = await self.given_document(await self.given_task(), data=new_bytes())
        with pytest.raises(TextRefused):
            await self.repo.store_text(document, text, SizeLevel.SMALL, ONE_LINE)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.text_chars) == (DocumentStatus.PENDING, None)
        assert await self.text_of(document) is None
        assert await self.positions_of(document) is None

    # --- a document failed: PENDING | PARSING -> FAILED ---------------------------------------------

    # --- scanned pages: each OCR'd page stored as it is read, the first reading kept ------------------

    async def test_each_ocr_page_is_stored_once_and_its_first_reading_stays(self) -> None:
        document = await self.given_document(await self.given_task(), data=new_bytes())
        other = await self.given_document(await self.given_task(), data=new_bytes())
        assert await self.repo.ocr_texts(document) == {}
        assert await self.repo.store_ocr_page(document, 0, "Page one.") == "Page one."
        assert await self.repo.store_ocr_page(document, 2, "Page three.") == "Page three."
        # read again (a second delivery raced the first): the stored reading is the page's
        assert await self.repo.store_ocr_page(document, 0, "Page one, read again.") == "Page one."
        await self.repo.store_ocr_page(other, 0, "Another document's page.")
        assert await self.repo.ocr_texts(document) == {0: "Page one.", 2: "Page three."}

    async def test_an_ocr_page_the_database_cannot_hold_is_refused(self) -> None:
        document = await self.given_document(await self.given_task(), data=new_bytes())
        with pytest.raises(TextRefused):
            await self.repo.store_ocr_page(document, 0, "a NUL \x00 character")
        assert await self.repo.ocr_texts(document) == {}

    @abstractmethod
    async def reading_of(self, document_id: str) -> str | None:
        """What the document's view says is being read now."""

    async def test_what_is_being_read_is_shown_until_the_text_is_stored(self) -> None:
        document = await self.given_document(await self.given_task(), data=new_bytes())
        await self.repo.reading(document, "reading page 1 of 2 (OCR)")
        assert await self.reading_of(document) == "reading page 1 of 2 (OCR)"
        await self.repo.store_text(document, "The text.", SizeLevel.SMALL, ONE_LINE)
        assert await self.reading_of(document) is None
        await self.repo.reading(document, "reading page 2 of 2 (OCR)")  # late: the parse is stored
        assert await self.reading_of(document) is None

    @pytest.mark.parametrize("status", NEEDS_PARSE)
    async def test_a_document_that_needs_its_parse_fails_with_its_error(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status, data=new_bytes())
        await self.repo.fail(document, "file is empty")
        await self.repo.fail(document, "again")  # a repeat changes nothing
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.error) == (DocumentStatus.FAILED, "file is empty")

    @pytest.mark.parametrize("status", [DocumentStatus.CHUNKING, DocumentStatus.CANCELLED])
    async def test_a_document_past_its_parse_does_not_fail(self, status: DocumentStatus) -> None:
        document = await self.given_document(await self.given_task(), status=status, data=new_bytes())
        await self.repo.fail(document, "file is empty")
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.error) == (status, None)

    # --- what intake finds --------------------------------------------------------------------------

    async def test_find_document_says_whose_it_is_and_whether_it_still_needs_bytes(self) -> None:
        owner = new_id("owner")
        task = await self.given_task(owner=owner)
        with_bytes = await self.given_document(task, data=new_bytes())
        reset = await self.given_document(task, status=DocumentStatus.PENDING)  # `docsum retry` cleared its failure
        failed = await self.given_document(task, status=DocumentStatus.FAILED)
        assert await self.repo.find_document(with_bytes) == intake.ExistingDocument(task, owner, needs_bytes=False)
        assert await self.repo.find_document(reset) == intake.ExistingDocument(task, owner, needs_bytes=True)
        assert await self.repo.find_document(failed) == intake.ExistingDocument(task, owner, needs_bytes=False)
        assert await self.repo.find_document(new_id("doc")) is None

    async def test_load_intake_task_counts_its_documents_and_their_bytes(self) -> None:
        owner, first, second = new_id("owner"), new_bytes(), new_bytes() + b"more"
        task = await self.given_task(owner=owner, expected_documents=3)
        await self.given_document(task, data=first)
        await self.given_document(task, data=second)
        await self.given_document(task, status=DocumentStatus.FAILED)
        assert await self.repo.load_intake_task(task) == intake.StoredTask(owner, 3, 3, len(first) + len(second))
        assert await self.repo.load_intake_task(new_id("task")) is None

    # --- taken in: another system's documents -------------------------------------------------------

    async def test_the_first_document_of_a_task_creates_it_and_stores_its_bytes(self) -> None:
        task, document, data = new_id("task"), new_id("doc"), new_bytes()
        event = published(task, document)
        await self.repo.take_in(event, data, None, SETTINGS)
        assert await self.repo.load_intake_task(task) == intake.StoredTask(event.owner, 2, 1, len(data))
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.task_status, doc.owner, doc.task_id, doc.error) == (
            DocumentStatus.PENDING, TaskStatus.PROCESSING, event.owner, task, None,
        )  # fmt: skip
        assert doc.blob_sha256 == hashlib.sha256(data).hexdigest()
        assert await self.repo.load_bytes(doc.blob_sha256) == data

    async def test_a_document_without_bytes_is_stored_failed_with_why(self) -> None:
        task, document = new_id("task"), new_id("doc")
        await self.repo.take_in(published(task, document), None, "the URI is not allowed", SETTINGS)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.error, doc.blob_sha256) == (
            DocumentStatus.FAILED, "the URI is not allowed", None,
        )  # fmt: skip
        assert await self.repo.find_document(document) == intake.ExistingDocument(task, "producer-owner", False)

    async def test_a_document_over_the_tasks_bytes_fails_without_them(self) -> None:
        task, first, second = new_id("task"), new_id("doc"), new_id("doc")
        settings = ParserSettings(_env_file=None, tasks_per_minute=0, max_task_bytes=100)
        await self.repo.take_in(published(task, first), b"x" * 60, None, settings)
        await self.repo.take_in(published(task, second), b"y" * 60, None, settings)
        doc = await self.repo.load(second)
        assert doc is not None and doc.status is DocumentStatus.FAILED and doc.blob_sha256 is None
        assert "DOCSUM_MAX_TASK_BYTES" in (doc.error or "")
        assert await self.repo.load_intake_task(task) == intake.StoredTask("producer-owner", 2, 2, 60)

    async def test_a_replay_of_a_document_taken_in_changes_nothing(self) -> None:
        task, document, data = new_id("task"), new_id("doc"), new_bytes()
        await self.repo.take_in(published(task, document), data, None, SETTINGS)
        await self.repo.take_in(published(task, document), new_bytes(), None, SETTINGS)
        await self.repo.take_in(published(task, document), None, "unreachable this time", SETTINGS)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.blob_sha256) == (
            DocumentStatus.PENDING, hashlib.sha256(data).hexdigest(),
        )  # fmt: skip
        assert await self.repo.load_intake_task(task) == intake.StoredTask("producer-owner", 2, 1, len(data))

    async def test_a_document_reset_without_bytes_takes_them_when_published_again(self) -> None:
        task, document, data = new_id("task"), new_id("doc"), new_bytes()
        await self.repo.take_in(published(task, document), None, "unreachable", SETTINGS)
        await self.given_reset(document)
        await self.repo.take_in(published(task, document), data, None, SETTINGS)
        doc = await self.repo.load(document)
        assert doc is not None and (doc.status, doc.error) == (DocumentStatus.PENDING, None)
        assert doc.blob_sha256 == hashlib.sha256(data).hexdigest()

    async def test_a_document_of_another_task_or_owner_is_refused_and_nothing_stored(self) -> None:
        task, document = new_id("task"), new_id("doc")
        await self.repo.take_in(published(task, document), new_bytes(), None, SETTINGS)
        other_task = new_id("task")
        with pytest.raises(Poison, match="another task or owner"):
            await self.repo.take_in(published(other_task, document), new_bytes(), None, SETTINGS)
        assert await self.repo.load_intake_task(other_task) is None  # the task it would have created
        with pytest.raises(Poison):
            await self.repo.take_in(published(task, document, owner="someone-else"), new_bytes(), None, SETTINGS)

    async def test_a_previous_task_of_another_owner_or_none_is_refused_and_nothing_stored(self) -> None:
        """options.previous_task names one of the owner's own tasks: another owner's is refused as one that
        does not exist is (the same words), and the task it would have created is not stored."""
        theirs, mine = new_id("task"), new_id("task")
        await self.repo.take_in(published(theirs, new_id("doc"), owner="other-owner"), new_bytes(), None, SETTINGS)
        await self.repo.take_in(published(mine, new_id("doc")), new_bytes(), None, SETTINGS)
        said = []
        for previous in (theirs, new_id("task")):
            task = new_id("task")
            event = published(task, new_id("doc")).model_copy(update={"options": TaskOptions(previous_task=previous)})
            with pytest.raises(Poison) as refused:
                await self.repo.take_in(event, new_bytes(), None, SETTINGS)
            said.append(str(refused.value).replace(previous, "<id>"))
            assert await self.repo.load_intake_task(task) is None
        assert (
            said[0]
            == said[1]
            == ("options.previous_task <id> is no task of owner producer-owner: name one of its own tasks, or none")
        )
        task = new_id("task")
        event = published(task, new_id("doc")).model_copy(update={"options": TaskOptions(previous_task=mine)})
        await self.repo.take_in(event, new_bytes(), None, SETTINGS)
        assert await self.repo.load_intake_task(task) is not None

    async def test_a_task_of_another_owner_or_size_or_full_is_refused_and_nothing_stored(self) -> None:
        task = new_id("task")
        await self.repo.take_in(published(task, new_id("doc"), documents=1), new_bytes(), None, SETTINGS)
        refused = [
            published(task, new_id("doc"), owner="someone-else", documents=1),  # another owner's task
            published(task, new_id("doc"), documents=2),  # another count of documents
            published(task, new_id("doc"), documents=1),  # one document more than the task has
        ]
        for event in refused:
            with pytest.raises(Poison):
                await self.repo.take_in(event, new_bytes(), None, SETTINGS)
            assert await self.repo.find_document(event.document_id) is None
        gateway_task = await self.given_task(owner="producer-owner")  # the gateway's: takes nothing from Kafka
        with pytest.raises(Poison, match="through the gateway"):
            await self.repo.take_in(published(gateway_task, new_id("doc")), new_bytes(), None, SETTINGS)
        held = await self.repo.load_intake_task(task)
        assert held is not None and held.documents == 1

    async def test_a_new_task_over_its_owners_rate_waits_and_nothing_is_stored(self) -> None:
        owner, settings = new_id("owner"), ParserSettings(_env_file=None, tasks_per_minute=1)
        await self.repo.take_in(published(new_id("task"), new_id("doc"), owner=owner), new_bytes(), None, settings)
        task, document = new_id("task"), new_id("doc")
        with pytest.raises(intake.TaskRateExceeded):
            await self.repo.take_in(published(task, document, owner=owner), new_bytes(), None, settings)
        assert await self.repo.load_intake_task(task) is None and await self.repo.find_document(document) is None
