"""Where a document's units start in its extracted text: a character offset back to a page number.

The parser stores, beside the text, the offset at which each unit starts: each page of a PDF, each
paragraph (a table or a text box counts as one) of a Word document, each slide of a presentation, each
section (from a heading to the next) of a web page, each chapter (a document of its spine) of an
e-book, each line of a text file. Units are
numbered from 1 in the order of `starts`. A unit that left no text (a blank page, an empty line) starts
where the next unit starts, or at the end of the text: no offset maps to it, and the characters between
two units (the blank line after a page) belong to the unit before.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Unit = Literal["page", "paragraph", "slide", "section", "chapter", "line"]


@dataclass(frozen=True)
class Positions:
    unit: Unit
    starts: tuple[int, ...]  # one per unit, non-decreasing, the first 0 (unless `before` are left out)
    # Units left out before `starts` (a window of a long text's positions: see `window`).
    before: int = 0

    def __post_init__(self) -> None:
        if self.before < 0 or (not self.before and (not self.starts or self.starts[0] != 0)):
            raise ValueError("the first unit starts at offset 0")
        if not all(map(operator.le, self.starts, self.starts[1:])):
            raise ValueError("unit starts must not decrease")


def window(unit: Unit, before: int, starts: tuple[int, ...]) -> Positions:
    """The positions of a range of the text (a chunk), good for offsets inside it only: `before` units
    start at or before the range's start (at least the first, at 0), then `starts`, those inside it.
    What a chunk's summary needs, without reading every unit start of a long document."""
    if before < 1:
        raise ValueError("the first unit starts at offset 0, at or before any range")
    return Positions(unit, starts, before)


def chunk_window(starts: Sequence[int], start: int, end: int) -> tuple[int, tuple[int, ...]]:
    """What `window` takes for the range [start, end) of a text whose units start at `starts`: how many
    start at or before `start`, and the starts inside the range."""
    before = bisect_right(starts, start)
    return before, tuple(starts[before : bisect_left(starts, end, lo=before)])


def position_of(positions: Positions, offset: int) -> int:
    """The number (from 1) of the unit holding the character at `offset`."""
    if offset < 0:
        raise ValueError(f"offset {offset} is negative")
    return positions.before + bisect_right(positions.starts, offset)


def span_units(positions: Positions, start: int, end: int) -> tuple[int, int]:
    """The first and the last unit the characters [start, end) touch; an empty range touches the unit at
    `start` only."""
    if end < start:
        raise ValueError(f"range [{start}, {end}) ends before it starts")
    return position_of(positions, start), position_of(positions, max(start, end - 1))
