"""Slides (PPTX), saved web pages (HTML) and e-books (EPUB): their text, their units (slide, section,
chapter), the zip caps PPTX and EPUB share with DOCX, the HTML size cap, and files that are not what their
name says."""

from __future__ import annotations

import io
import socket
import tracemalloc
import zipfile

import pytest

from docsum_parser.extract import detect_format, extract_text
from docsum_parser.limits import Limits
from docsum_parser.parse_error import ParseError
from docsum_shared.positions import Positions, position_of
from tests.documents import (
    CHROME_WORDS,
    Slide,
    english_prose,
    make_docx,
    make_epub,
    make_html_page,
    make_pdf,
    make_pptx,
)
from tests.hostile import with_many_members, with_padding_member

DEFAULTS = Limits()


def parse_error(data: bytes, filename: str, limits: Limits = DEFAULTS, content_type: str | None = None) -> ParseError:
    with pytest.raises(ParseError) as info:
        extract_text(data, filename, content_type, limits=limits)
    return info.value


def unit_of(text: str, starts: tuple[int, ...], needle: str) -> int:
    return position_of(Positions("line", starts), text.index(needle))


# -------------------------------------------------------------------------------------------- PPTX

DECK = [
    Slide(
        title="Quarterly results",
        texts=["Revenue grew twelve percent over the year."],
        notes="Mention the new plant in Leeds.",
    ),
    Slide(),  # a slide without text still counts
    Slide(
        title="Sales by region",
        table=[["Region", "Sales"], ["North", "40"], ["South", "60"]],
        grouped=["Grouped caption left", "Grouped caption right"],
        notes="The south is ahead for the first time.",
    ),
]


def test_pptx_titles_text_tables_groups_and_notes_slide_by_slide() -> None:
    result = extract_text(make_pptx(DECK), "deck.pptx")

    assert result.format == "pptx"
    assert result.text == (
        "# Quarterly results\n\nRevenue grew twelve percent over the year.\n\n"
        "Speaker notes: Mention the new plant in Leeds.\n\n"
        "# Sales by region\n\nRegion | Sales\nNorth | 40\nSouth | 60\n\n"
        "Grouped caption left\n\nGrouped caption right\n\n"
        "Speaker notes: The south is ahead for the first time."
    )
    assert result.positions.unit == "slide"
    assert len(result.positions.starts) == 3
    starts = result.positions.starts
    assert unit_of(result.text, starts, "Mention the new plant") == 1
    assert unit_of(result.text, starts, "South | 60") == 3
    assert unit_of(result.text, starts, "Grouped caption right") == 3


def test_pptx_without_text_has_no_extractable_text() -> None:
    error = parse_error(make_pptx([Slide(), Slide()]), "blank.pptx")

    assert error.kind == "no_text"
    assert "presentation" in str(error)


def test_pptx_that_is_not_a_zip_is_invalid() -> None:
    error = parse_error(b"not a presentation at all", "deck.pptx")

    assert error.kind == "invalid_pptx"
    assert str(error).startswith("PPTX is not a valid PowerPoint presentation (it is not a readable zip archive")


# -------------------------------------------------------------------------------------------- HTML

ARTICLE = [
    ("The floods", ["The harbour silted up after the spring floods of 1921 and ships ran aground in the channel."]),
    ("The dredging", ["Two dredgers worked through the summer and moved the sand to the dunes north of the town."]),
    ("Aftermath", ["By the autumn the ships were back and trade in the port resumed at its old pace."]),
]


def test_html_main_text_with_headings_and_no_chrome(monkeypatch: pytest.MonkeyPatch) -> None:
    connections: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        connections.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)

    result = extract_text(make_html_page("The harbour dredging", ARTICLE), "harbour.html")

    assert result.format == "html"
    for heading, paragraphs in ARTICLE:
        assert f"## {heading}\n\n{paragraphs[0]}" in result.text
    assert not [word for word in CHROME_WORDS if word.lower() in result.text.lower()]
    assert connections == []  # the image and the frame were not fetched
    # Each heading opens a section: the title, then the three of the article.
    assert result.positions.unit == "section"
    assert unit_of(result.text, result.positions.starts, "Two dredgers") == 3
    assert unit_of(result.text, result.positions.starts, "trade in the port") == 4


def test_html_over_the_size_cap_fails_before_it_is_parsed() -> None:
    page = make_html_page("Long", [("Part", [english_prose(100_000)])])

    error = parse_error(page, "long.html", Limits(max_html_bytes=65_536))

    assert error.kind == "too_large"
    assert str(error).startswith("the web page is larger than the limit of 64 KiB of HTML (DOCSUM_MAX_HTML_BYTES)")


def test_html_page_is_recognized_without_an_extension_but_not_in_a_text_file() -> None:
    page = make_html_page("The harbour dredging", ARTICLE)

    assert detect_format(page, "saved-page", None) == "html"
    assert detect_format(page, "upload", "application/octet-stream") == "html"
    assert detect_format(page, "page.txt", None) == "text"  # HTML source someone wants summarized as it is


def test_html_page_with_only_chrome_has_no_extractable_text() -> None:
    page = b"<!DOCTYPE html><html><head><script>var x = 1;</script></head><body><nav>Home</nav></body></html>"

    error = parse_error(page, "empty.html")

    assert error.kind == "no_text"
    assert "web page" in str(error)


# -------------------------------------------------------------------------------------------- EPUB

BOOK = [
    ("Chapter One", ["It was a dark night on the moor, and the wind came from the sea."]),
    ("Chapter Two", ["The rain fell all morning.", "Then it stopped, and the valley steamed in the sun."]),
    ("Chapter Three", ["By evening the travellers reached the inn at the crossroads."]),
]


def test_epub_chapters_in_spine_order() -> None:
    result = extract_text(make_epub(BOOK), "book.epub")

    assert result.format == "epub"
    assert result.text == (
        "# Chapter One\n\nIt was a dark night on the moor, and the wind came from the sea.\n\n"
        "# Chapter Two\n\nThe rain fell all morning.\n\nThen it stopped, and the valley steamed in the sun.\n\n"
        "# Chapter Three\n\nBy evening the travellers reached the inn at the crossroads."
    )  # the navigation document (a table of contents) is not a chapter; styles are not text
    assert result.positions.unit == "chapter"
    assert unit_of(result.text, result.positions.starts, "valley steamed") == 2
    assert unit_of(result.text, result.positions.starts, "the inn") == 3


def test_epub_without_container_is_invalid() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("OEBPS/chapter.xhtml", "<html><body><p>Loose.</p></body></html>")

    error = parse_error(out.getvalue(), "book.epub")

    assert error.kind == "invalid_epub"
    assert "META-INF/container.xml" in str(error)


def test_epub_with_a_billion_laughs_fails_alone_without_expanding_them() -> None:
    book = make_epub([("Only", ["Plain words."])])
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(book)) as base, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in base.infolist():
            data = base.read(info.filename)
            if info.filename == "OEBPS/content.opf":  # a billion laughs in the package document
                entities = b'<!ENTITY e0 "laugh">' + b"".join(
                    b'<!ENTITY e%d "%s">' % (n, b"&e%d;" % (n - 1) * 10) for n in range(1, 10)
                )
                data = data.replace(b"<package", b"<!DOCTYPE package [" + entities + b"]><package", 1)
                data = data.replace(b"A test book", b"&e9;")
            archive.writestr(info, data)

    tracemalloc.start()
    try:
        error = parse_error(out.getvalue(), "laughs.epub")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.kind == "invalid_epub" and "entity" in str(error)
    assert peak < 8 * 2**20  # a billion "laugh"s would take 5 GB


def test_epub_chapters_may_use_html_entities() -> None:
    book = make_epub([("Caf&eacute;", ["Tea&nbsp;&amp;&nbsp;cake &mdash; at noon."])])

    assert extract_text(book, "cafe.epub").text == "# Café\n\nTea & cake — at noon."


# ------------------------------------------------------------------ zip caps, shared with DOCX

BOMBS = [
    ("deck.pptx", "PPTX", lambda: make_pptx(DECK), "ppt/media/padding.bin", "ppt/media"),
    ("book.epub", "EPUB", lambda: make_epub(BOOK), "OEBPS/padding.bin", "OEBPS/fonts"),
]


@pytest.mark.parametrize(("filename", "label", "build", "padding", "folder"), BOMBS)
def test_zip_bomb_fails_on_what_it_really_inflates_to(
    filename: str, label: str, build: object, padding: str, folder: str
) -> None:
    data = with_padding_member(build(), padding, 48 * 2**20)  # type: ignore[operator]
    assert len(data) < 200_000

    tracemalloc.start()
    try:
        error = parse_error(data, filename, Limits(max_docx_unzipped_bytes=8 * 2**20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.kind == "too_large"
    assert f"the {label} unpacks to more than the limit of 8 MiB (DOCSUM_MAX_DOCX_UNZIPPED_BYTES)" in str(error)
    assert peak < 16 * 2**20  # inflated in blocks and counted, never held


@pytest.mark.parametrize(("filename", "label", "build", "padding", "folder"), BOMBS)
def test_zip_with_too_many_files_fails_before_they_are_read(
    filename: str, label: str, build: object, padding: str, folder: str
) -> None:
    data = with_many_members(build(), folder, 2_000)  # type: ignore[operator]

    error = parse_error(data, filename, Limits(max_zip_entries=1_000))

    assert error.kind == "too_large"
    assert f"the {label} holds 2,0" in str(error)
    assert "files, over the limit of 1,000 (DOCSUM_MAX_ZIP_ENTRIES)" in str(error)


def test_docx_with_too_many_files_fails_too() -> None:
    data = with_many_members(make_docx([("paragraph", "Short.")]), "word/media", 2_000)

    error = parse_error(data, "letter.docx", Limits(max_zip_entries=1_000))

    assert error.kind == "too_large" and "(DOCSUM_MAX_ZIP_ENTRIES)" in str(error)


def test_ordinary_files_are_untouched_by_the_zip_caps() -> None:
    small = Limits(max_docx_unzipped_bytes=2**20, max_zip_entries=100)

    assert extract_text(make_pptx(DECK), "deck.pptx", limits=small).positions.unit == "slide"
    assert extract_text(make_epub(BOOK), "book.epub", limits=small).positions.unit == "chapter"


# ------------------------------------------------------------------- files that are not what they say


@pytest.mark.parametrize(
    ("build", "filename", "claimed", "actual"),
    [
        (lambda: make_pdf(["A report."]), "slides.pptx", "a PowerPoint presentation (PPTX) ('.pptx')", "a PDF"),
        (lambda: make_docx([("paragraph", "A letter.")]), "novel.epub", "an e-book (EPUB)", "a Word document"),
        (lambda: make_pptx(DECK), "letter.docx", "a Word document (DOCX) ('.docx')", "a PowerPoint presentation"),
        (lambda: make_epub(BOOK), "page.html", "a web page (HTML) ('.html')", "an e-book (EPUB)"),
        (lambda: make_html_page("T", ARTICLE), "deck.pptx", "a PowerPoint presentation (PPTX)", "a web page (HTML)"),
        (lambda: make_pdf(["A report."]), "upload", "a web page (HTML) ('text/html')", "a PDF"),
    ],
)
def test_file_that_is_not_what_its_name_says_fails_saying_which(
    build: object, filename: str, claimed: str, actual: str
) -> None:
    content_type = "text/html" if filename == "upload" else None

    error = parse_error(build(), filename, content_type=content_type)  # type: ignore[operator]

    assert error.kind == "mismatch"
    assert str(error).startswith(f"the file is named as {claimed}")
    assert f"but it is {actual}" in str(error)
