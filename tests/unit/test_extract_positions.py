"""Where each page (PDF), paragraph (DOCX) or line (text) starts in the extracted text: exact in the final
text, after every normalization the parser applies."""

from __future__ import annotations

import random
import re

import pytest

from docsum_parser.extract import extract_text
from docsum_parser.normalize import normalize, normalize_keeping
from docsum_shared.positions import position_of
from docsum_shared.text import fold_compatibility, without_lone_surrogates
from tests.documents import Block, make_docx, make_pdf
from tests.hostile import pdf_drawing_strings

NAMES = ["Alpha", "Bravo", "Charlie", "Delta", "Echo"]


def pdf_page(number: int, name: str) -> str:
    # A running header (dropped from every page), a word hyphenated at a line end (joined)
    # and a page number (dropped): the page's text changes length before the next page is placed.
    return (
        f"{name}   opens page {number}.\nConfidential draft\n"
        f"{name} body, where a hyphen-\nated word of {name.lower()} closes.\n{number}"
    )


def test_each_pdf_page_starts_where_its_own_text_does() -> None:
    pages = [pdf_page(n, name) for n, name in enumerate(NAMES, start=1)]

    result = extract_text(make_pdf(pages), "report.pdf")

    starts = result.positions.starts
    assert result.positions.unit == "page" and len(starts) == result.pages == len(NAMES)
    for number, name in enumerate(NAMES, start=1):
        assert result.text[starts[number - 1] :].startswith(f"{name} opens page {number}.")
        own = result.text[starts[number - 1] : starts[number] if number < len(NAMES) else len(result.text)]
        assert f"{name} body, where a hyphenated\nword of {name.lower()} closes." in own
        assert [other for other in NAMES if other in own] == [name]
    assert "Confidential draft" not in result.text


def test_pdf_pages_start_exactly_where_a_blank_line_left_by_a_running_header_closes_up() -> None:
    # Dropping the running header from between two blank lines leaves one blank line, not two: every
    # page closes up, and each next page starts where its own text does.
    pages = [f"{name} opens.\n\nConfidential draft\n\n{name} body   text." for name in NAMES]

    result = extract_text(pdf_drawing_strings(pages), "drafts.pdf")

    starts = result.positions.starts
    ends = [*starts[1:], len(result.text)]
    own = [result.text[start:end].strip("\n") for start, end in zip(starts, ends, strict=True)]
    assert own == [f"{name} opens.\n\n{name} body text." for name in NAMES]


def test_an_empty_pdf_page_starts_where_the_next_page_with_text_does() -> None:
    pages = ["", "First words.", "", "", "Last words.", ""]

    result = extract_text(make_pdf(pages), "gaps.pdf")

    assert result.text == "First words.\n\nLast words."
    assert result.positions.starts == (0, 0, 14, 14, 14, 25)  # the trailing empty page: the end
    assert [position_of(result.positions, result.text.index(w)) for w in ("First", "Last")] == [2, 5]


def test_each_docx_paragraph_starts_where_its_own_text_does() -> None:
    blocks: list[Block] = [
        ("heading", 1, "Overview   of   things"),
        ("paragraph", "Tabs\there  and   runs of    spaces."),
        ("paragraph", "   "),  # only whitespace: no paragraph of the text
        ("table", [["Name", "Value"], ["alpha", "1"]]),
        ("paragraph", "Soft\u00adhyphen and a line\nbreak inside."),
        ("paragraph", "The last one."),
    ]

    result = extract_text(make_docx(blocks), "notes.docx")

    firsts = ["# Overview of things", "Tabs here and runs", "Name | Value\nalpha | 1", "Softhyphen and", "The last"]
    assert result.positions.unit == "paragraph" and len(result.positions.starts) == len(firsts)
    for start, first in zip(result.positions.starts, firsts, strict=True):
        assert result.text[start:].startswith(first)
    assert position_of(result.positions, result.text.index("break inside")) == 4


def test_each_line_of_a_text_file_starts_where_its_own_text_does() -> None:
    # The file's lines, as an editor counts them: 1 "", 2 "  Indented\tline  ", 3-5 "", 6 "Mac", 7 "break",
    # 8 "form\ffeed here" (a form feed breaks the text, not the line), 9 "   ", 10 "last  line"; the
    # final line break opens no line.
    source = "\r\n  Indented\tline  \r\n\r\n\r\n\r\nMac\rbreak\nform\ffeed here\n   \r\nlast  line\n"

    result = extract_text(source.encode(), "notes.txt")

    assert result.text == "  Indented line\n\nMac\nbreak\nform\nfeed here\n\nlast line"
    assert result.positions.unit == "line"
    assert result.positions.starts == (0, 0, 17, 17, 17, 17, 21, 27, 43, 43)
    for line, first in [(2, "  Indented"), (6, "Mac"), (7, "break"), (8, "form\nfeed"), (10, "last line")]:
        assert result.text[result.positions.starts[line - 1] :].startswith(first)
    assert position_of(result.positions, result.text.index("feed")) == 8


# ---------------------------------------------------------------------------------- the normalization


def normalize_as_one_pass(text: str) -> str:
    """The normalization written as one pass over the whole text, without offsets: the reference the
    line-by-line form (which carries offsets) must agree with."""
    text = without_lone_surrogates(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\v", "\n")
    text = re.sub(r"\u00ad[^\S\n]*\n", "-\n", text).replace("\u00ad", "")
    text = fold_compatibility(re.sub(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]", "", text)).expandtabs(4)
    lines = []
    for line in text.split("\n"):
        body = line.lstrip()
        lines.append(" " * (len(line) - len(body)) + re.sub(r"[^\S\n]+", " ", body).rstrip() if body else "")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


PIECES = ["a", "Bc", " ", "  ", "\t", "\n", "\r", "\r\n", "\f", "\v", "\u00ad", "\x00", "\ufb01", "\ud800", "\u3000"]


def test_the_normalization_with_offsets_is_the_normalization() -> None:
    rng = random.Random(20)
    for _ in range(5000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 16)))
        starts = [0, *(m.end() for m in re.finditer(r"\r\n|[\r\n\f\v]", text)), len(text)]
        normalized, mapped = normalize_keeping(text, starts)
        assert normalized == normalize(text) == normalize_as_one_pass(text), repr(text)
        assert mapped[0] == 0 and mapped[-1] == len(normalized) and mapped == sorted(mapped), repr(text)
        # Each line with text in the result is where one line of the source went.
        line_starts = [0, *(i + 1 for i, c in enumerate(normalized) if c == "\n")]
        with_text = [start for start in line_starts if normalized[start : start + 1] not in ("", "\n")]
        assert sorted(set(mapped) - {len(normalized)}) == with_text, repr(text)


def test_a_line_start_maps_to_its_line_or_the_next_line_with_text() -> None:
    text = "\n\n  first\tline  \r\n\r\n\r\n\r\nsecond  line\n\n\nthird\n\n"
    starts = [0, 1, 2, 18, 20, 22, 24, 37, 38, 39, 45, 46]

    normalized, mapped = normalize_keeping(text, starts)

    assert normalized == "  first line\n\nsecond line\n\nthird"
    # Blank lines (and the empty line after the final line break) start where the next line with text
    # does; those at the end, at the end.
    assert mapped == [0, 0, 0, 14, 14, 14, 14, 27, 27, 27, 32, 32]


@pytest.mark.parametrize("starts", [[0, 1], [0, 3], [0, 17], [0, 7, 4]])
def test_an_offset_inside_a_line_or_going_back_is_refused(starts: list[int]) -> None:
    with pytest.raises(ValueError, match="not where a line starts"):
        normalize_keeping("ab\r\ncd\nef", starts)
