"""Running headers, footers and page numbers dropped from a PDF's page texts (docsum_parser.running_lines):
a pure function of the pages, so each case is a list of page texts in and out."""

from __future__ import annotations

import pytest

from docsum_parser.running_lines import drop_running_lines
from tests.documents import chinese_prose, english_prose


def bodies(count: int, seed: int = 0) -> list[str]:
    """`count` page bodies of two short paragraphs each, none like another."""
    return [english_prose(300, seed=seed + n) for n in range(count)]


def sentences(count: int, seed: int) -> list[str]:
    """`count` English sentences, one a line."""
    return english_prose(150 * count, seed=seed).replace("\n\n", " ").replace(". ", ".\n").split("\n")[:count]


def framed(body: list[str], header: str | None = None, footer: str | None = None) -> list[str]:
    """Each body between `header` and `footer` (each may hold {n}, the page number, and {total})."""
    total = len(body)
    out = []
    for n, text in enumerate(body, start=1):
        lines = [line.format(n=n, total=total) for line in (header, footer) if line is not None]
        top, bottom = (lines[:1], lines[1:]) if header is not None else ([], lines)
        out.append("\n".join([*top, text, *bottom]))
    return out


@pytest.mark.parametrize(
    "footer", ["Page {n} of 112", "{n}", "- {n} -", "p. {n}", "Confidential - page {n} of {total}", "{n} | Q3 report"]
)
def test_page_numbers_are_dropped_from_every_page(footer: str) -> None:
    body = bodies(3)  # three pages are enough
    assert drop_running_lines(framed(body, footer=footer)) == body


@pytest.mark.parametrize("date", ["2026-12-05", "05/12/2026", "5 December 2026", "Dec 5, 2026 09:41"])
def test_a_printed_date_is_dropped_and_another_date_gives_the_same_pages(date: str) -> None:
    body = bodies(6, seed=10)
    footer = "Page {n} of {total} \u00b7 printed " + date

    assert drop_running_lines(framed(body, footer=footer)) == body
    # Another export of the same document, printed on another day: the same text, byte for byte.
    later = footer.replace("5", "7").replace("12", "11")
    assert drop_running_lines(framed(body, footer=later)) == body


def test_a_running_title_is_dropped_from_every_page_the_first_included() -> None:
    body = bodies(6, seed=20)
    pages = framed(body, header="Northwind Quarterly Operations Review", footer="Page {n} of {total}")

    assert drop_running_lines(pages) == body


def test_two_line_headers_and_footers_on_pages_ending_in_a_blank_line() -> None:
    body = bodies(4, seed=30)
    top, bottom = "ACME Corp\nInternal use only\n\n", "\n\nStrictly confidential\nPage {n}"
    pages = [f"{top}{text}{bottom.format(n=n)}" for n, text in enumerate(body, start=1)]

    assert drop_running_lines(pages) == body  # and no blank line left at either end


def test_a_line_repeated_inside_the_pages_is_content() -> None:
    # "Key figures" opens a section on every page, but below the page's first two lines; the title's
    # words inside a sentence are not the title's line either.
    body = ["\n".join([*sentences(2, 40 + n), "", "Key figures", *sentences(3, 50 + n)]) for n in range(5)]
    body[2] = f"{body[2]}\nThe Northwind Quarterly Operations Review is read by the board."
    pages = framed(body, header="Northwind Quarterly Operations Review")

    out = drop_running_lines(pages)

    assert out == body
    assert all("\nKey figures\n" in page for page in out)


def test_a_line_on_the_edge_of_fewer_than_half_of_the_pages_is_content() -> None:
    body = bodies(7, seed=50)
    pages = list(body)
    for n in (1, 4, 6):  # three of seven pages open with it: a heading the author repeated, not a header
        pages[n] = f"Summary of the results\n{pages[n]}"

    assert drop_running_lines(pages) == pages


def test_a_line_on_the_edge_of_half_of_the_pages_is_running() -> None:
    body = bodies(6, seed=60)  # two parts of three pages, each with its own running header
    pages = [f"{'Part One: Planning' if n < 3 else 'Part Two: Delivery'}\n{text}" for n, text in enumerate(body)]

    assert drop_running_lines(pages) == body


def test_headers_of_left_and_right_pages_are_both_running() -> None:
    body = bodies(7, seed=70)  # odd pages carry the book's title, even pages the chapter's
    headers = ["A Field Guide to Streams", "Chapter 2: Partitions"]
    pages = [f"{headers[n % 2]}\n{text}" for n, text in enumerate(body)]

    assert drop_running_lines(pages) == body


@pytest.mark.parametrize("head", ["Chapter {c}: {title} {n}", "{n} CHAPTER {c}. {title}"])
def test_a_books_running_heads_naming_each_chapter_are_dropped(head: str) -> None:
    # Thirteen pages, the first a cover; three chapters, each opening on a page without a head. A chapter's
    # head is on fewer than half of the pages, but its number counts them.
    titles = {1: "Planning", 5: "Delivery", 9: "Operations"}
    body = bodies(13, seed=120)
    pages, chapter, title = [], 0, ""
    for place, text in enumerate(body):
        if place in titles:
            chapter, title = chapter + 1, titles[place]
            pages.append(f"{text}\n{place - 1}")  # the chapter's first page: its number alone at the foot
        elif chapter:
            pages.append(f"{head.format(c=chapter, title=title, n=place - 1)}\n{text}")
        else:
            pages.append(text)

    assert drop_running_lines(pages) == body


def test_a_number_at_a_lines_end_that_does_not_count_the_pages_is_content() -> None:
    body = bodies(10, seed=130)
    # The same line, ending in the same number, on three pages: the number does not follow the pages.
    pages = [f"Continued from table 4\n{text}" if place in (0, 3, 6) else text for place, text in enumerate(body)]

    assert drop_running_lines(pages) == pages


def test_three_pages_are_enough_and_two_are_left_alone() -> None:
    three = framed(bodies(3, seed=80), header="Short Memo", footer="Page {n} of {total}")
    assert drop_running_lines(three) == bodies(3, seed=80)

    two = three[:2]
    assert drop_running_lines(two) == two
    # Pages without text do not count: three pages, one with text, are left alone too.
    assert drop_running_lines(["", three[0], ""]) == ["", three[0], ""]


def test_a_page_of_running_lines_only_becomes_empty_and_keeps_its_place() -> None:
    body = bodies(5, seed=90)
    pages = framed(body, header="Annual Report 2026", footer="Page {n} of {total}")
    pages[3] = "Annual Report 2026\nPage 4 of 5"  # a page left blank but for its header and footer

    out = drop_running_lines(pages)

    assert len(out) == len(pages) and out[3] == ""
    assert out[:3] == body[:3] and out[4] == body[4]


def test_pages_that_are_all_alike_are_the_text() -> None:
    pages = ["Form 7: the same page again.\nSign here."] * 4

    assert drop_running_lines(pages) == pages


def test_chinese_pages_lose_their_running_lines_and_nothing_else() -> None:
    body = [chinese_prose(200, seed=100 + n) for n in range(5)]
    pages = framed(body, header="内部资料 注意保存", footer="第 {n} 页 共 {total} 页")

    assert drop_running_lines(pages) == body
    # Chinese text without running lines, a line break after each sentence: not a character moves.
    lines = [page.replace("。", "。\n").strip("\n") for page in body]
    assert drop_running_lines(lines) == lines


def test_a_page_that_loses_nothing_is_returned_as_it_was() -> None:
    openings = ["Alpha", "Bravo", "Charlie", "Delta"]
    pages = [f"  Indented\t {word}\n\n\n{text}\n" for word, text in zip(openings, bodies(4, seed=110), strict=True)]

    assert drop_running_lines(pages) == pages
