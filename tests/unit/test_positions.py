"""A character offset of the extracted text back to its page, paragraph or line (docsum_shared.positions)."""

from __future__ import annotations

import pytest

from docsum_shared.positions import Positions, chunk_window, position_of, span_units, window

# "One.\n\nTwo.\n\nFour." as a PDF of five pages: the third page is empty (it starts where the fourth
# does), and so is the fifth, the last (it starts at the end of the text).
TEXT = "One.\n\nTwo.\n\nFour."
PAGES = Positions("page", (0, 6, 12, 12, 17))


@pytest.mark.parametrize(
    ("offset", "page"),
    [
        (0, 1),  # the first character
        (3, 1),  # the last character of the page
        (5, 1),  # the blank line after a page is the page's
        (6, 2),  # exactly where a page starts
        (11, 2),
        (12, 4),  # an empty page holds no character: the page after it does
        (16, 4),  # the last character of the text
    ],
)
def test_an_offset_falls_in_the_last_page_starting_at_or_before_it(offset: int, page: int) -> None:
    assert position_of(PAGES, offset) == page


def test_every_character_is_on_the_page_whose_text_holds_it() -> None:
    pages = ["One.", "Two.", "", "Four.", ""]
    for offset, char in enumerate(TEXT):
        if not char.isspace():
            assert char in pages[position_of(PAGES, offset) - 1]


@pytest.mark.parametrize(
    ("start", "end", "pages"),
    [
        (0, 4, (1, 1)),  # "One."
        (0, 6, (1, 1)),  # with the blank line after it
        (0, 7, (1, 2)),  # and the first character of the next page
        (6, 17, (2, 4)),  # from a page's start to the end of the text, over the empty page
        (12, 17, (4, 4)),
        (6, 6, (2, 2)),  # empty: the page at its start
        (16, 17, (4, 4)),  # the last character
    ],
)
def test_a_range_spans_the_pages_of_its_first_and_last_character(start: int, end: int, pages: tuple[int, int]) -> None:
    assert span_units(PAGES, start, end) == pages


def test_one_unit_holds_every_offset() -> None:
    whole = Positions("paragraph", (0,))
    assert [position_of(whole, offset) for offset in (0, 1, 10_000)] == [1, 1, 1]
    assert span_units(whole, 0, 10_000) == (1, 1)


def test_empty_units_at_the_start_share_offset_zero_and_hold_nothing() -> None:
    lines = Positions("line", (0, 0, 0, 5))  # a text file opening with two blank lines
    assert position_of(lines, 0) == 3
    assert position_of(lines, 5) == 4


@pytest.mark.parametrize("starts", [(), (1, 5), (0, 5, 3)])
def test_starts_open_at_zero_and_never_go_back(starts: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        Positions("page", starts)


def test_a_negative_offset_or_a_reversed_range_is_refused() -> None:
    with pytest.raises(ValueError):
        position_of(PAGES, -1)
    with pytest.raises(ValueError):
        span_units(PAGES, 5, 4)


def test_a_window_of_the_positions_gives_each_offset_inside_it_the_same_unit_as_the_whole() -> None:
    whole = Positions("line", (0, 5, 5, 9, 14, 20, 31))
    for start, end in ((0, 40), (5, 9), (6, 25), (14, 15), (30, 40)):
        before = sum(1 for s in whole.starts if s <= start)
        inside = tuple(s for s in whole.starts if start < s < end)
        assert chunk_window(whole.starts, start, end) == (before, inside)  # as the chunker stores it
        part = window("line", before, inside)
        assert [position_of(part, x) for x in range(start, end)] == [position_of(whole, x) for x in range(start, end)]
    with pytest.raises(ValueError):
        window("page", 0, (3,))
