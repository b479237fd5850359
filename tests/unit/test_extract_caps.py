"""The caps on what one document may expand into (extract.Limits): each fails the document with a message
naming the cap, its value and its setting, and each stops the work as soon as it is passed."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import pytest
from pypdf import PageObject

from docsum_parser.extract import ExtractedText, extract_text
from docsum_parser.limits import Limits, size_label
from docsum_parser.parse_error import ParseError
from docsum_parser.policy import limits
from docsum_parser.settings import ParserSettings
from docsum_shared.positions import Positions
from tests.documents import chinese_prose, english_prose, make_docx, make_pdf
from tests.hostile import docx_bomb, one_line_text, pdf_sharing_one_content_stream


def parse_error(data: bytes, filename: str, limits: Limits) -> ParseError:
    with pytest.raises(ParseError) as info:
        extract_text(data, filename, limits=limits)
    return info.value


@pytest.fixture
def pages_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the PDF pages whose text is extracted."""
    calls: list[int] = []
    original = PageObject.extract_text

    def counting(self: PageObject, *args: object, **kwargs: object) -> str:
        calls.append(1)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PageObject, "extract_text", counting)
    return calls


def test_the_defaults_are_the_settings_defaults() -> None:
    assert limits(ParserSettings(_env_file=None)) == Limits()
    assert Limits() == Limits(
        max_chars=5_000_000,
        max_pdf_pages=2_000,
        max_docx_unzipped_bytes=256 * 2**20,
        max_zip_entries=10_000,
        max_html_bytes=16 * 2**20,
    )


# -------------------------------------------------------------------------------------------- PDF


def test_pdf_over_the_page_cap_fails_before_any_page_is_read(pages_read: list[int]) -> None:
    data = pdf_sharing_one_content_stream(500)
    assert len(data) < 100_000

    error = parse_error(data, "pages.pdf", Limits(max_pdf_pages=50))

    assert error.kind == "too_large"
    assert "the PDF has 500 pages, over the limit of 50 (DOCSUM_MAX_PDF_PAGES)" in str(error)
    assert pages_read == []


def test_pdf_at_the_page_cap_is_read() -> None:
    assert extract_text(pdf_sharing_one_content_stream(50), "pages.pdf", limits=Limits(max_pdf_pages=50)).pages == 50


def test_pdf_extraction_stops_once_the_character_cap_is_passed(pages_read: list[int]) -> None:
    data = make_pdf([english_prose(2_000, seed=s) for s in range(20)])

    error = parse_error(data, "long.pdf", Limits(max_chars=5_000))

    assert error.kind == "too_large"
    assert "longer than the limit of 5,000 characters (DOCSUM_MAX_DOCUMENT_CHARS)" in str(error)
    assert len(pages_read) <= 4


# ------------------------------------------------------------------------------------------- DOCX


def test_docx_bomb_with_lying_headers_fails_on_what_it_really_inflates_to() -> None:
    data = docx_bomb(64 * 2**20)  # declares 4 KiB
    assert len(data) < 300_000
    declared = {i.filename: i.file_size for i in zipfile.ZipFile(io.BytesIO(data)).infolist()}
    assert declared["word/document.xml"] == 4096 and sum(declared.values()) < 8 * 2**20

    tracemalloc.start()
    try:
        error = parse_error(data, "bomb.docx", Limits(max_docx_unzipped_bytes=8 * 2**20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.kind == "too_large"
    assert "the DOCX unpacks to more than the limit of 8 MiB (DOCSUM_MAX_DOCX_UNZIPPED_BYTES)" in str(error)
    assert peak < 16 * 2**20  # inflated in blocks and counted, never held


def test_docx_whose_headers_lie_but_which_fits_is_invalid_not_too_large() -> None:
    error = parse_error(docx_bomb(2 * 2**20), "liar.docx", Limits())

    assert error.kind == "invalid_docx"


def test_docx_under_the_byte_cap_stops_at_the_character_cap() -> None:
    data = docx_bomb(16 * 2**20, declared_bytes=None)  # honest headers, 16 million characters

    error = parse_error(data, "long.docx", Limits(max_chars=100_000))

    assert error.kind == "too_large"
    assert "longer than the limit of 100,000 characters (DOCSUM_MAX_DOCUMENT_CHARS)" in str(error)


def test_docx_member_with_an_unusual_compression_is_invalid() -> None:
    source = zipfile.ZipFile(io.BytesIO(make_docx([("paragraph", "Short.")])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in source.infolist():
            method = zipfile.ZIP_BZIP2 if info.filename == "word/document.xml" else zipfile.ZIP_DEFLATED
            archive.writestr(info.filename, source.read(info.filename), compress_type=method)

    error = parse_error(out.getvalue(), "odd.docx", Limits())

    assert error.kind == "invalid_docx" and "unsupported method" in str(error)


def test_ordinary_docx_is_untouched_by_the_caps() -> None:
    text = english_prose(20_000, seed=4)
    result = extract_text(make_docx([("paragraph", text)]), "fine.docx", limits=Limits(max_chars=25_000))
    assert result.text.split() == text.split()


# ------------------------------------------------------------------------------------------- text


def test_one_line_text_over_the_cap_fails_without_decoding_it_whole() -> None:
    data = one_line_text(3_000_000)

    tracemalloc.start()
    try:
        error = parse_error(data, "line.txt", Limits(max_chars=1_000_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.kind == "too_large"
    assert "longer than the limit of 1,000,000 characters (DOCSUM_MAX_DOCUMENT_CHARS)" in str(error)
    assert peak < 3 * 2**20  # about one limit's worth of decoded text, not copies of the whole file


def test_text_far_over_the_cap_fails_on_its_size_alone() -> None:
    data = b"x" * 4_010_000  # more than 4 bytes per allowed character: no encoding read here fits it
    tracemalloc.start()
    try:
        error = parse_error(data, "huge.txt", Limits(max_chars=1_000_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind == "too_large" and peak < 2**20


@pytest.mark.parametrize(("encoding", "filename"), [("utf-8", "a.txt"), ("gb18030", "b.txt"), ("utf-16", "c.md")])
def test_text_at_the_cap_is_read_in_every_encoding(encoding: str, filename: str) -> None:
    text = chinese_prose(3_000, seed=2)
    result = extract_text(text.encode(encoding), filename, limits=Limits(max_chars=len(text)))
    # The prose is normalized already: one line each, a blank line starting where the next line does.
    lines = [0, *(i + 1 for i, c in enumerate(text) if c == "\n")]
    starts = tuple(s + 1 if text[s] == "\n" else s for s in lines)
    assert result == ExtractedText(text=text, format="text", positions=Positions("line", starts))


def test_text_that_grows_when_normalized_is_capped_too() -> None:
    data = b"\tx\n" * 1_000  # 3,000 characters; tabs expand to 4 spaces of indentation
    error = parse_error(data, "tabs.txt", Limits(max_chars=4_000))
    assert error.kind == "too_large"


def test_sizes_are_written_as_people_write_them() -> None:
    labels = [size_label(n) for n in (2**30, 256 * 2**20, 1536, 1500)]
    assert labels == ["1 GiB", "256 MiB", "1,536 bytes", "1,500 bytes"]
