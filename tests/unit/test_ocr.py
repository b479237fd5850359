"""OCR of scanned PDF pages (docsum_parser.ocr, through extract and the worker's job), on scans the tests
make: the examples' pages printed and scanned (the English PDF's pages rendered to images, the Chinese essay
drawn on A4 pages) and generated prose drawn on page images, put in a PDF as images only.

The character error rate is the edit distance from the text the page was drawn from, per character of it
(tests/documents.character_error_rate says how the two are compared)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from docsum_parser import handlers as parser
from docsum_parser.extract import ExtractedText, extract_text
from docsum_parser.limits import Limits
from docsum_parser.parse_error import ParseError
from docsum_parser.policy import StoredDocument
from docsum_parser.progress import ReadingProgress
from docsum_parser.settings import ParserSettings
from docsum_parser.worker import Job, run_job
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentParsed, DocumentSubmitted, Event, TaskEvent
from docsum_shared.handlers import Sender
from docsum_shared.states import DocumentStatus
from tests.documents import (
    character_error_rate,
    english_prose,
    make_pdf,
    make_scanned_pdf,
    paged_scan,
    rendered_scan,
    scanned_and_digital_pdf,
)
from tests.fakes.parser import FakeParserRepository

MAX_CER = 0.03
EXAMPLES = Path(__file__).parents[2] / "examples"


def job(data: bytes, **changes: object) -> Job:
    return replace(Job(data, "scan.pdf", "application/pdf", Limits(), "d1"), **changes)  # type: ignore[arg-type]


def ocr_all(data: bytes) -> tuple[str, dict[int, str]]:
    """The document's text as the handler gets it: the scanned pages found, each read by OCR, then the whole."""
    first = run_job(job(data))
    texts = {page: run_job(job(data, ocr_page=page)).text for page in first.scanned}
    return run_job(job(data, ocr_texts=texts)).text, texts


def test_the_english_examples_pages_printed_and_scanned_read_within_three_percent_of_their_text_layer() -> None:
    born_digital = (EXAMPLES / "kafka-overview.pdf").read_bytes()
    digital = run_job(job(born_digital))
    scan = rendered_scan(born_digital)
    assert run_job(job(scan)).scanned == tuple(range(len(digital.positions.starts)))  # no text layer left

    text, texts = ocr_all(scan)

    ends = [*digital.positions.starts[1:], len(digital.text)]
    for page, (start, end) in enumerate(zip(digital.positions.starts, ends, strict=True)):
        assert character_error_rate(digital.text[start:end], texts[page]) <= MAX_CER, (page, texts[page])
    assert character_error_rate(digital.text, text) <= MAX_CER


def test_the_chinese_example_printed_on_a4_and_scanned_reads_within_three_percent_of_its_text() -> None:
    scan, pages = paged_scan((EXAMPLES / "chinese-essay.txt").read_text(encoding="utf-8"), chinese=True)
    assert len(pages) >= 2  # the essay runs over pages

    text, texts = ocr_all(scan)

    assert sorted(texts) == list(range(len(pages)))
    for page, drawn in enumerate(pages):
        assert character_error_rate(drawn, texts[page]) <= MAX_CER, (page, texts[page])
    assert character_error_rate("\n\n".join(pages), text) <= MAX_CER


def test_a_mixed_pdf_keeps_its_digital_page_and_reads_its_scanned_page_in_page_order() -> None:
    scanned, digital = english_prose(500, seed=3), english_prose(400, seed=4)
    data = scanned_and_digital_pdf(scanned, digital)

    assert run_job(job(data)).scanned == (0,)  # the digital page has its text
    texts = {0: run_job(job(data, ocr_page=0)).text}
    extracted = run_job(job(data, ocr_texts=texts))
    text = extracted.text

    assert extracted.positions.unit == "page" and extracted.ocr_pages == (0,)
    second = extracted.positions.starts[1]
    assert character_error_rate(scanned, text[:second]) <= MAX_CER
    assert " ".join(text[second:].split()) == " ".join(digital.split())


def test_a_scan_with_more_pages_than_the_ocr_cap_fails_before_any_page_is_read() -> None:
    data = make_scanned_pdf(["One.", "Two.", "Three."])
    with pytest.raises(ParseError) as failed:
        extract_text(data, "scan.pdf", limits=Limits(max_ocr_pages=2))
    assert failed.value.kind == "too_large"
    assert "3 scanned pages" in str(failed.value) and "limit of 2 (DOCSUM_MAX_OCR_PAGES)" in str(failed.value)


def test_a_born_digital_pdf_has_no_scanned_page() -> None:
    extracted = extract_text(make_pdf(["A page of text that is long enough.", "Another one, also long."]), "a.pdf")
    assert extracted.scanned == () and extracted.ocr_pages == () and extracted.pages == 2


# --- the handler: each page stored as it is read, a stored page never read again ---------------------

SCAN = DocumentSubmitted(task_id="t", document_id="d", owner="o", filename="scan.pdf", blob_sha256="sha", size_bytes=1)


def _holding(data: bytes) -> FakeParserRepository:
    return FakeParserRepository.holding(
        "d", StoredDocument(DocumentStatus.PENDING, None, None, None, blob_sha256="sha"), data
    )


class Reading:
    """run_job, remembering which pages it read by OCR and what the document's view said meanwhile."""

    def __init__(self, repo: FakeParserRepository) -> None:
        self.repo = repo
        self.pages: list[int] = []
        self.notes: list[str | None] = []

    def __call__(self, job: Job) -> ExtractedText:
        if job.ocr_page is not None:
            self.pages.append(job.ocr_page)
            self.notes.append(self.repo.state.reading.get("d"))
        return run_job(job)


async def test_a_scan_resumes_at_the_first_page_not_stored_and_cites_its_pages() -> None:
    pages = [english_prose(300, seed=n) for n in range(3)]
    repo = _holding(make_scanned_pdf(pages))
    repo.state.ocr_pages[("d", 0)] = pages[0]  # read and stored before the parser was killed
    reading = Reading(repo)

    [out] = await parser.handle(SCAN, parser.Deps(repo, ParserSettings(_env_file=None), reading))

    assert isinstance(out, DocumentParsed)
    assert reading.pages == [1, 2]  # page 0 was stored before: not read again
    assert reading.notes == ["reading page 2 of 3 (OCR)", "reading page 3 of 3 (OCR)"]
    assert repo.state.reading["d"] is None  # the text stored: nothing is being read
    text, starts = repo.texts["d"], repo.state.positions["d"].starts
    assert repo.state.positions["d"].unit == "page" and len(starts) == 3
    for number, page in enumerate(pages):
        end = starts[number + 1] if number + 1 < len(starts) else len(text)
        assert character_error_rate(page, text[starts[number] : end]) <= MAX_CER


async def test_a_scan_over_the_ocr_cap_fails_alone_saying_which_setting_raises_it() -> None:
    repo = _holding(make_scanned_pdf(["One page.", "Two pages.", "Three pages."]))
    reading = Reading(repo)
    settings = ParserSettings(_env_file=None, max_ocr_pages=2)

    [out] = await parser.handle(SCAN, parser.Deps(repo, settings, reading))

    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert reading.pages == []  # failed before any page was read
    error = repo.documents["d"].error or ""
    assert "3 scanned pages" in error and "over the limit of 2 (DOCSUM_MAX_OCR_PAGES)" in error


def test_a_blank_scan_fails_saying_ocr_read_nothing() -> None:
    data = make_scanned_pdf([""])
    texts = {0: run_job(job(data, ocr_page=0)).text}
    with pytest.raises(ParseError) as failed:
        run_job(job(data, ocr_texts=texts))
    assert failed.value.kind == "no_text" and "OCR read none" in str(failed.value)


# --- the progress stream: one note per document waits, the latest ------------------------------------


async def test_reading_progress_holds_one_note_per_document_and_publishes_the_latest() -> None:
    progress = ReadingProgress()
    for page in range(1, 1_001):  # pages read faster than the broker takes them
        progress.note("t", "d1", f"reading page {page} of 1,000 (OCR)")
        progress.note("t", "d2", f"reading page {page} of 1,000 (OCR)")
    assert progress.waiting == 2  # bounded by the documents being read, not by the pages

    published: list[TaskEvent] = []
    sent = asyncio.Event()

    async def publish(events: Sequence[Event], *, sender: Sender) -> None:
        sender.check(events)
        published.extend(e for e in events if isinstance(e, TaskEvent))
        sent.set()

    loop = asyncio.create_task(progress.run(publish))
    try:
        await asyncio.wait_for(sent.wait(), 10)
    finally:
        loop.cancel()
    assert [(e.task_id, e.detail["reading"]) for e in published] == [
        ("t", {"document_id": "d1", "note": "reading page 1000 of 1,000 (OCR)"}),
        ("t", {"document_id": "d2", "note": "reading page 1000 of 1,000 (OCR)"}),
    ]
    assert progress.waiting == 0
