"""Unit tests for the parser's pure text-extraction core (no Kafka, no database)."""

from __future__ import annotations

import codecs
import io
import random
import zipfile

import docx
import pytest
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls, qn
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from docsum_parser import extract
from docsum_parser.extract import MSG_NO_TEXT, ExtractedText, detect_format, extract_text
from docsum_parser.normalize import normalize
from docsum_parser.parse_error import ParseError
from docsum_shared.positions import Positions
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
        text="Alpha page text.\n\nBravo page text.\n\nCharlie page text.",
        format="pdf",
        positions=Positions("page", (0, 18, 36)),
        pages=3,
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
    pdf.rect(20, 20, 120, 60, style="F")  # something visible, no text and no image

    error = parse_error(bytes(pdf.output()), "scan.pdf")

    assert error.kind == "no_text"
    assert str(error) == MSG_NO_TEXT["pdf"]  # no image: nothing for OCR to read either


def test_pdf_words_hyphenated_at_line_ends_are_joined() -> None:
    text = (
        "The schema is de-\nfined by the producer, and the consumer re-\nads it back.\n"
        "An event-driven design is event-\ndriven; Kafka-\nStreams keeps its capital."
    )

    result = extract_text(make_pdf([text]), "paper.pdf")

    assert "defined by the producer" in result.text.replace("\n", " ")
    assert "reads it back" in result.text.replace("\n", " ")
    assert "de-" not in result.text and "re-" not in result.text
    # the compound is written with its hyphen elsewhere in the document, so the hyphen stays
    assert "is event-driven;" in result.text
    assert "Kafka-\nStreams" in result.text  # upper-case next fragment: not a hyphenated word
    # only PDF text is re-joined: a text file's line breaks are the author's
    assert extract_text(b"de-\nfined", "notes.txt").text == "de-\nfined"


def _pdf_with_running_lines(bodies: list[list[str]], header: str | None, footer: str | None) -> bytes:
    """One page per body; `header`/`footer` may contain {n} for the page number."""
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    pdf.set_font("Helvetica", size=11)
    for n, lines in enumerate(bodies, start=1):
        pdf.add_page()
        if header is not None:
            pdf.set_xy(10, 8)
            pdf.cell(0, 5, header.format(n=n))
        pdf.set_xy(10, 25)
        pdf.multi_cell(0, 5.5, "\n".join(lines))
        if footer is not None:
            pdf.set_xy(10, 285)
            pdf.cell(0, 5, footer.format(n=n))
    return bytes(pdf.output())


_TOPICS = ["partitions", "replicas", "offsets", "consumer groups", "retention", "compaction", "quotas"]


def _page_body(n: int) -> list[str]:
    topic = _TOPICS[n - 1]
    return [f"Chapter {n} is about {topic}.", f"Most clusters tune {topic} early; {n * 7} teams told us so."]


def test_pdf_running_headers_footers_and_page_numbers_are_removed() -> None:
    bodies = [_page_body(n) for n in range(1, 7)]
    data = _pdf_with_running_lines(bodies, "ACME Streaming Handbook - Edition 2", "Confidential, page {n} of 6")

    text = extract_text(data, "handbook.pdf").text

    assert "Confidential" not in text and "of 6" not in text
    assert "ACME Streaming Handbook" not in text  # from every page, the first included
    assert text.startswith("Chapter 1 is about partitions.\n")
    for lines in bodies:
        for line in lines:
            assert line in text


@pytest.mark.parametrize("number", ["{n}", "- {n} -", "Page {n}", "{roman}"])
def test_pdf_page_number_lines_are_removed(number: str) -> None:
    romans = ["i", "ii", "iii", "iv", "v"]
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=False)
    pdf.set_font("Helvetica", size=11)
    for n in range(1, 6):
        pdf.add_page()
        pdf.set_xy(10, 25)
        pdf.multi_cell(0, 5.5, "\n".join(_page_body(n)))
        pdf.set_xy(100, 285)
        pdf.cell(0, 5, number.format(n=n, roman=romans[n - 1]))

    text = extract_text(bytes(pdf.output()), "numbered.pdf").text

    assert text == "\n\n".join("\n".join(_page_body(n)) for n in range(1, 6))


def test_pdf_running_line_removal_is_conservative() -> None:
    # Fewer than three pages: nothing is removed, not even page numbers; three are enough.
    short = _pdf_with_running_lines([_page_body(n) for n in range(1, 3)], "Short Memo", "{n}")
    assert extract_text(short, "memo.pdf").text.count("Short Memo") == 2
    three = _pdf_with_running_lines([_page_body(n) for n in range(1, 4)], "Short Memo", "{n}")
    assert "Short Memo" not in extract_text(three, "memo.pdf").text
    # A line on the edge of only two of six pages is content; so is a number inside the page.
    bodies = [_page_body(n) for n in range(1, 7)]
    bodies[1] = ["Summary of the results", bodies[1][0], "42", bodies[1][1], "The end of the summary."]
    bodies[4] = ["Summary of the results", *bodies[4]]
    text = extract_text(_pdf_with_running_lines(bodies, None, None), "report.pdf").text
    assert text.count("Summary of the results") == 2
    assert "\n42\n" in text


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


def test_docx_without_text_has_no_extractable_text() -> None:
    error = parse_error(make_docx([("paragraph", "   ")]), "blank.docx")

    assert error.kind == "no_text"
    assert str(error).startswith("no extractable text")


_NS = nsdecls("w")
_WPS = 'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"'


def _docx_with_body_xml(*fragments: str, before: str = "Intro paragraph.") -> bytes:
    """A DOCX whose body holds a normal paragraph and then raw WordprocessingML `fragments`."""
    document = docx.Document()
    document.add_paragraph(before)
    body = document.element.body
    sect_pr = body.find(qn("w:sectPr"))
    for fragment in fragments:
        sect_pr.addprevious(parse_xml(fragment))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _run(text: str) -> str:
    return f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>'


def test_docx_content_controls_are_read() -> None:
    # A resume template keeps its sections in block-level content controls (w:sdt).
    block_sdt = (
        f'<w:sdt {_NS}><w:sdtPr><w:alias w:val="Experience"/></w:sdtPr><w:sdtContent>'
        f'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr>{_run("Experience")}</w:p>'
        f"<w:p>{_run('Built a streaming platform.')}</w:p>"
        "<w:sdt><w:sdtContent>"  # nested
        f"<w:tbl><w:tr><w:tc><w:p>{_run('2019')}</w:p></w:tc><w:tc><w:p>{_run('ACME')}</w:p></w:tc></w:tr></w:tbl>"
        "</w:sdtContent></w:sdt>"
        "</w:sdtContent></w:sdt>"
    )
    inline_sdt = (
        f'<w:p {_NS}>{_run("Name: ")}<w:sdt><w:sdtPr><w:alias w:val="Name"/></w:sdtPr><w:sdtContent>'
        f"{_run('Jane Doe')}</w:sdtContent></w:sdt>{_run(', engineer.')}</w:p>"
    )
    # A control still showing its prompt holds no content of the author's.
    placeholders = (
        f"<w:sdt {_NS}><w:sdtPr><w:showingPlcHdr/></w:sdtPr><w:sdtContent>"
        f"<w:p>{_run('Click here to enter text.')}</w:p></w:sdtContent></w:sdt>",
        f"<w:p {_NS}>{_run('Degree:')}<w:sdt><w:sdtPr><w:showingPlcHdr/></w:sdtPr><w:sdtContent>"
        f"{_run(' [Degree]')}</w:sdtContent></w:sdt></w:p>",
    )

    text = extract_text(_docx_with_body_xml(block_sdt, inline_sdt, *placeholders), "resume.docx").text

    assert text == (
        "Intro paragraph.\n\n# Experience\n\nBuilt a streaming platform.\n\n2019 | ACME\n\n"
        "Name: Jane Doe, engineer.\n\nDegree:"
    )


def test_docx_tracked_changes_read_as_accepted() -> None:
    paragraph = (
        f"<w:p {_NS}>{_run('jumped over the lazy brown ')}"
        f'<w:ins w:id="1" w:author="a">{_run("dog")}</w:ins>'
        f'<w:del w:id="2" w:author="a"><w:r><w:delText>frog</w:delText></w:r></w:del>{_run(".")}</w:p>'
    )
    moved = (
        f'<w:p {_NS}><w:moveFrom w:id="3" w:author="a">{_run("Moved away.")}</w:moveFrom></w:p>',
        f'<w:p {_NS}><w:moveTo w:id="4" w:author="a">{_run("Moved here.")}</w:moveTo></w:p>',
    )

    text = extract_text(_docx_with_body_xml(paragraph, *moved), "changes.docx").text

    assert text == "Intro paragraph.\n\njumped over the lazy brown dog.\n\nMoved here."


def test_docx_inline_wrappers_tabs_and_breaks() -> None:
    paragraph = (
        f'<w:p {_NS} xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
        f'{_run("See ")}<w:hyperlink w:anchor="x">{_run("the guide")}</w:hyperlink>{_run(" by ")}'
        f'<w:smartTag w:uri="u" w:element="place">{_run("Paris")}</w:smartTag>{_run(" on page ")}'
        f'<w:fldSimple w:instr=" PAGE ">{_run("7")}</w:fldSimple>'
        f"<w:r><w:tab/><w:t>tabbed</w:t><w:br/><w:t>broken</w:t><w:cr/><w:t>end</w:t></w:r>"
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> DATE </w:instrText></w:r>'
        f'<w:r><w:fldChar w:fldCharType="separate"/></w:r>{_run("today")}<w:r><w:fldChar w:fldCharType="end"/></w:r>'
        "</w:p>"
    )

    text = extract_text(_docx_with_body_xml(paragraph), "links.docx").text

    # (normalize() turns the tab into a single space, as it does for every tab)
    assert text == "Intro paragraph.\n\nSee the guide by Paris on page 7 tabbed\nbroken\nendtoday"


def test_docx_table_cells_keep_nested_content_and_text_boxes_are_read_once() -> None:
    nested = (
        f"<w:tbl {_NS}><w:tr>"
        f"<w:tc><w:p>{_run('Outer')}</w:p></w:tc>"
        f"<w:tc><w:p>{_run('Before')}</w:p><w:tbl><w:tr><w:tc><w:p>{_run('Inner A')}</w:p></w:tc>"
        f"<w:tc><w:p>{_run('Inner B')}</w:p></w:tc></w:tr></w:tbl><w:p>{_run('After')}</w:p></w:tc>"
        "</w:tr>"
        f"<w:sdt><w:sdtContent><w:tr><w:tc><w:p>{_run('Row in')}</w:p></w:tc>"
        f"<w:sdt><w:sdtContent><w:tc><w:p>{_run('a control')}</w:p></w:tc></w:sdtContent></w:sdt>"
        "</w:tr></w:sdtContent></w:sdt>"
        "</w:tbl>"
    )
    # A text box comes twice: in a DrawingML shape and in its VML fallback.
    text_box = (
        f'<w:p {_NS} xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        'xmlns:v="urn:schemas-microsoft-com:vml">'
        f'{_run("Caption.")}<w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wps:wsp {_WPS}>'
        f"<wps:txbx><w:txbxContent><w:p>{_run('Boxed')}</w:p></w:txbxContent></wps:txbx></wps:wsp></w:drawing>"
        "</mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent><w:p>{_run('Boxed')}</w:p></w:txbxContent>"
        "</v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r></w:p>"
    )

    text = extract_text(_docx_with_body_xml(nested, text_box), "nested.docx").text

    assert text == "Intro paragraph.\n\nOuter | Before Inner A Inner B After\nRow in | a control\n\nCaption.\n\nBoxed"


def _encrypted_ooxml() -> bytes:
    """The shape of a password-protected DOCX/XLSX: an OLE2 compound file with the encryption streams."""
    header = extract._OLE2_MAGIC + bytes(512 - len(extract._OLE2_MAGIC))
    directory = b""
    for name in ("Root Entry", "EncryptionInfo", "EncryptedPackage"):
        raw = name.encode("utf-16-le") + b"\0\0"
        directory += raw.ljust(64, b"\0") + len(raw).to_bytes(2, "little") + bytes(62)
    return header + directory.ljust(512, b"\0") + random.Random(3).randbytes(2048)


def test_password_protected_docx_says_so() -> None:
    error = parse_error(_encrypted_ooxml(), "contract.docx")

    assert error.kind == "encrypted"
    assert str(error) == (
        "DOCX is password-protected; remove the password in Word (File > Info > Protect Document) and try again"
    )


def test_password_protected_pptx_says_so() -> None:
    error = parse_error(_encrypted_ooxml(), "deck.pptx")

    assert error.kind == "encrypted"
    assert str(error) == (
        "PPTX is password-protected; remove the password in PowerPoint (File > Info > Protect Presentation) and"
        " try again"
    )


def test_password_protected_office_file_of_another_type() -> None:
    error = parse_error(_encrypted_ooxml(), "budget.xlsx")

    assert error.kind == "encrypted"
    assert str(error).startswith("'.xlsx' file is password-protected")
    assert "supported: PDF, DOCX, PPTX, HTML, EPUB, TXT, Markdown" in str(error)


# ------------------------------------------------------------------------------------- TXT and MD


def test_utf8_text_is_normalized() -> None:
    data = "Café\r\nline  with   spaces\x00\r\n\r\n\r\n\r\nlast\tline \n".encode()

    result = extract_text(data, "notes.txt")

    # Six lines in the file; the blank ones start where the line after them does.
    assert result == ExtractedText(
        text="Café\nline with spaces\n\nlast line", format="text", positions=Positions("line", (0, 5, 23, 23, 23, 23))
    )


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


def test_ligatures_and_compatibility_characters_are_folded() -> None:
    data = "The misﬁts see things diﬀerently: ﬂow and oﬃce. 𝐁old.".encode()

    assert extract_text(data, "crazy.txt").text == "The misfits see things differently: flow and office. Bold."


def test_cjk_full_width_punctuation_is_kept() -> None:
    text = "系统支持中文文档（ＰＤＦ）！真的吗？是的；１２３。"

    assert extract_text(text.encode(), "zh.txt").text == text


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
    assert "supported: PDF, DOCX, PPTX, HTML, EPUB, TXT, Markdown" in str(error)


def test_unsupported_message_names_the_extension() -> None:
    assert str(parse_error(b"MZ", "tool.exe")) == (
        "unsupported file type '.exe'; supported: PDF, DOCX, PPTX, HTML, EPUB, TXT, Markdown"
    )
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


def test_normalize_soft_hyphens_show_only_at_a_line_end() -> None:
    assert normalize("co\u00ad\noperate and re\u00adport") == "co-\noperate and report"


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
