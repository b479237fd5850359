"""Unit tests for the parser's pure text-extraction core (no Kafka, no database)."""

from __future__ import annotations

import codecs
import io
import random
import zipfile

import docx
import pytest
from docsum_parser import extract
from docsum_parser.extract import ExtractedText, ParseError, detect_format, extract_text, normalize
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from tests.documents import (
    chinese_prose,
    english_prose,
    make_docx,
    make_encrypted_pdf,
    make_pdf,
    truncate,
)


def parse_error(data: bytes, filename: str, content_type: str | None = None) -> ParseError:
    with pytest.raises(ParseError) as info:
        extract_text(data, filename, content_type)
    return info.value


def words(text: str) -> list[str]:
    return text.split()


# -------------------------------------------------------------------------------------------- PDF


def test_pdf_pages_come_out_in_order_separated_by_blank_lines() -> None:
    result = extract_text(make_pdf(["Alpha page text.", "Bravo page text.", "Charlie page text."]), "a.pdf")

    assert result == ExtractedText(
        text="Alpha page text.\n\nBravo page text.\n\nCharlie page text.", format="pdf", pages=3
    )


def test_pdf_wrapped_prose_keeps_every_word_in_order() -> None:
    pages = [english_prose(2500, seed=1), english_prose(1500, seed=2)]

    result = extract_text(make_pdf(pages), "essay.pdf")

    assert words(result.text) == words(" ".join(pages))
    assert "  " not in result.text


def test_pdf_encrypted_with_user_password_is_rejected() -> None:
    error = parse_error(make_encrypted_pdf("Top secret quarterly numbers."), "secret.pdf")

    assert error.kind == "encrypted"
    assert "encrypted" in str(error)
    assert "password" in str(error)


def test_pdf_with_only_an_owner_password_opens() -> None:
    data = make_encrypted_pdf("Printing is restricted but reading is fine.", user_password="")
    assert PdfReader(io.BytesIO(data)).is_encrypted  # really encrypted, not a no-op

    result = extract_text(data, "restricted.pdf")

    assert result.text == "Printing is restricted but reading is fine."


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_pdf_is_reported_as_damaged(fraction: float) -> None:
    data = make_pdf([english_prose(3000, seed=s) for s in range(3)])

    error = parse_error(truncate(data, fraction), "report.pdf")

    assert error.kind == "damaged"
    assert str(error).startswith("PDF is damaged or truncated: ")
    assert "re-export" in str(error)


@pytest.mark.parametrize("cut_after_first_eof", [100, 2000])
def test_truncated_pdf_with_an_earlier_revision_is_not_silently_accepted(cut_after_first_eof: int) -> None:
    # After an incremental update the file holds two %%EOF markers; pypdf alone would open the
    # cut-off file as the old revision and quietly drop the added page.
    writer = PdfWriter(io.BytesIO(make_pdf(["First revision."])), incremental=True)
    writer.add_page(PdfReader(io.BytesIO(make_pdf([english_prose(4000, seed=9)]))).pages[0])
    out = io.BytesIO()
    writer.write(out)
    data = out.getvalue()
    first_eof = data.index(b"%%EOF")
    assert data.count(b"%%EOF") == 2
    assert len(data) > first_eof + cut_after_first_eof + 100
    assert extract_text(data, "updated.pdf").pages == 2

    error = parse_error(data[: first_eof + cut_after_first_eof], "updated.pdf")

    assert error.kind == "damaged"


def test_pdf_with_broken_page_tree_is_damaged_not_empty() -> None:
    data = make_pdf(["Alpha.", "Bravo.", "Charlie."])
    kids = data.index(b"/Kids [")
    space = data.index(b" R", kids)
    broken = data[:space] + b"\x8c" + data[space + 1 :]  # "3 0 R" -> "3 0\x8cR"

    error = parse_error(broken, "broken.pdf")

    assert error.kind == "damaged"
    assert "pages could be read" in str(error)


def test_file_named_pdf_that_is_not_a_pdf_is_damaged() -> None:
    error = parse_error(b"just some text, definitely not a PDF", "fake.pdf")

    assert error.kind == "damaged"
    assert "%PDF" in str(error)


def test_pdf_with_only_a_drawing_has_no_extractable_text() -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 120, 60, style="F")  # like a scanned page: something visible, no text

    error = parse_error(bytes(pdf.output()), "scan.pdf")

    assert error.kind == "no_text"
    assert str(error) == "no extractable text: the PDF seems to contain only scanned images; run OCR first"


# ------------------------------------------------------------------------------------------- DOCX


def test_docx_headings_paragraphs_and_tables_in_document_order() -> None:
    data = make_docx(
        [
            ("heading", 0, "Quarterly Report"),
            ("paragraph", "Opening remarks."),
            ("heading", 1, "Revenue"),
            ("paragraph", "Revenue grew in every region."),
            ("table", [["Region", "Q1", "Q2"], ["North", "10", "12"], ["South", "7", "9"]]),
            ("heading", 2, "Outlook"),
            ("paragraph", "We expect steady growth."),
        ]
    )

    result = extract_text(data, "report.docx")

    assert result.format == "docx"
    assert result.pages is None
    assert result.text == (
        "# Quarterly Report\n\n"
        "Opening remarks.\n\n"
        "# Revenue\n\n"
        "Revenue grew in every region.\n\n"
        "Region | Q1 | Q2\nNorth | 10 | 12\nSouth | 7 | 9\n\n"
        "## Outlook\n\n"
        "We expect steady growth."
    )


def test_docx_merged_table_cell_is_not_repeated() -> None:
    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Wide header"
    table.cell(0, 2).text = "Right"
    for col, value in enumerate(["a", "b", "c"]):
        table.cell(1, col).text = value
    out = io.BytesIO()
    document.save(out)

    assert extract_text(out.getvalue(), "merged.docx").text == "Wide header | Right\na | b | c"


def test_random_bytes_named_docx_is_invalid() -> None:
    junk = random.Random(7).randbytes(4096)

    error = parse_error(junk, "letter.docx")

    assert error.kind == "invalid_docx"
    assert str(error).startswith("DOCX is not a valid Word document (")


def test_zip_without_word_document_xml_is_invalid_docx() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes/readme.txt", "not a word document")

    error = parse_error(out.getvalue(), "letter.docx")

    assert error.kind == "invalid_docx"
    assert "word/document.xml" in str(error)


def test_truncated_docx_is_invalid() -> None:
    data = make_docx([("paragraph", english_prose(5000))])

    error = parse_error(truncate(data, 0.5), "letter.docx")

    assert error.kind == "invalid_docx"


def test_docx_that_unpacks_too_large_is_rejected_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_docx([("paragraph", english_prose(20_000))])
    assert extract_text(data, "big.docx").text
    monkeypatch.setattr(extract, "_MAX_DOCX_UNZIPPED", 10_000)  # stands in for a zip bomb

    error = parse_error(data, "big.docx")

    assert error.kind == "invalid_docx"
    assert "unpacks to more than" in str(error)


def test_docx_without_text_has_no_extractable_text() -> None:
    error = parse_error(make_docx([("paragraph", "   ")]), "blank.docx")

    assert error.kind == "no_text"
    assert str(error).startswith("no extractable text")


# ------------------------------------------------------------------------------------- TXT and MD


def test_utf8_text_is_normalized() -> None:
    data = "Café\r\nline  with   spaces\x00\r\n\r\n\r\n\r\nlast\tline \n".encode()

    result = extract_text(data, "notes.txt")

    assert result == ExtractedText(text="Café\nline with spaces\n\nlast line", format="text")


def test_utf8_with_bom_drops_the_bom() -> None:
    result = extract_text(codecs.BOM_UTF8 + "# Título\n\nTexto.".encode(), "readme.md")

    assert result.text == "# Título\n\nTexto."


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_with_bom(encoding: str) -> None:
    bom = codecs.BOM_UTF16_LE if encoding == "utf-16-le" else codecs.BOM_UTF16_BE
    text = "Grüße aus Köln. 来自上海的问候。"

    assert extract_text(bom + text.encode(encoding), "greeting.txt").text == text


def test_gb18030_chinese_text() -> None:
    text = chinese_prose(800, seed=3)
    data = text.encode("gb18030")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # the test only means something if UTF-8 really fails

    assert extract_text(data, "文章.txt").text == text


def test_binary_junk_named_txt_is_an_encoding_error() -> None:
    junk = random.Random(1).randbytes(4000)

    error = parse_error(junk, "data.txt")

    assert error.kind == "encoding"
    assert str(error).startswith("text file is not in a supported encoding (UTF-8, UTF-16 with BOM, GB18030)")


def test_utf16_without_bom_is_an_encoding_error() -> None:
    # Valid UTF-8 byte-wise, but every other character is NUL.
    assert parse_error("hello world, no BOM here".encode("utf-16-le"), "x.txt").kind == "encoding"


def test_whitespace_only_text_has_no_extractable_text() -> None:
    error = parse_error(b" \r\n\t\n  ", "blank.md")

    assert error.kind == "no_text"


# ------------------------------------------------------------------------------- format detection


def test_empty_file() -> None:
    for name in ("empty.pdf", "empty.docx", "empty.txt", "empty.exe"):
        error = parse_error(b"", name)
        assert str(error) == "file is empty"


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b"MZ\x90\x00\x03\x00\x00\x00binary", "setup.exe"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512), "old.doc"),  # OLE2: legacy Word
        (b"{\\rtf1 not really a doc}", "old.doc"),
        (b"plain words", "notes"),
    ],
)
def test_unsupported_types(data: bytes, filename: str) -> None:
    error = parse_error(data, filename)

    assert error.kind == "unsupported"
    assert str(error).startswith("unsupported file type ")
    assert "supported: PDF, DOCX, TXT, Markdown" in str(error)


def test_unsupported_message_names_the_extension() -> None:
    assert str(parse_error(b"MZ", "tool.exe")) == ("unsupported file type '.exe'; supported: PDF, DOCX, TXT, Markdown")
    assert "'.doc'" in str(parse_error(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), "old.doc"))


def test_magic_bytes_beat_the_extension() -> None:
    assert detect_format(make_pdf(["x"]), "really-a-pdf.txt", "text/plain") == "pdf"
    assert detect_format(make_docx([("paragraph", "x")]), "upload.bin", None) == "docx"
    assert extract_text(make_pdf(["Hello from a PDF."]), "misnamed.txt").text == "Hello from a PDF."


def test_extension_then_content_type() -> None:
    assert detect_format(b"# Title", "README.MD", None) == "text"
    assert detect_format(b"plain", "notes.markdown", "application/octet-stream") == "text"
    assert detect_format(b"plain", "upload", "text/plain; charset=utf-8") == "text"
    assert detect_format(b"%PDF-1.7", "upload", None) == "pdf"


def test_normalize_collapses_spaces_and_blank_lines() -> None:
    assert normalize("a \u00a0 b\r\rc\x00d\f\n\n\n\ne  \t") == "a b\n\ncd\n\ne"


def test_normalize_keeps_indentation_so_code_comments_are_not_headings() -> None:
    assert normalize("\n\nfor x in y:\n\tpass   # done\n      # a   comment\n") == (
        "for x in y:\n    pass # done\n      # a comment"
    )


# ------------------------------------------------------------------------------------ generators


def test_prose_generators_are_deterministic_and_sized() -> None:
    assert english_prose(5000, seed=4) == english_prose(5000, seed=4)
    assert english_prose(5000, seed=4) != english_prose(5000, seed=5)
    for n in (1, 500, 20_000):
        assert n <= len(english_prose(n)) < n + 300
        assert n <= len(chinese_prose(n)) < n + 100
    sentences = english_prose(20_000).replace("\n\n", " ").split(". ")
    assert len(set(sentences)) > 0.9 * len(sentences)  # varied, not one sentence repeated
    assert chinese_prose(2000).replace("\n\n", "")[-1] in "。！？"
