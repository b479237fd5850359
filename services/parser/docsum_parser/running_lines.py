"""Running headers and footers: the lines a PDF repeats at the top or bottom of most of its pages (a page
number, "Page 7 of 112", a printed date, the title, "Confidential") belong to the layout, not to the
text. Left in, they cut sentences at every page turn, get quoted in summaries, and make two exports of
one document that differ only in their printed date two different texts (so nothing of the first is
reused for the second).

The rule, over the pages' texts alone (born-digital and OCR'd pages alike): a page's zone is its first
and last `EDGE_LINES` lines with text. A line's shape is the line with its digits as "#" (and a Roman
page number at either end as "#"), its whitespace collapsed, its case folded: "Page 7 of 112" and
"Page 8 of 112", or two dates, have one shape. A shape found in the zone of at least half of the pages
with text, and of at least `MIN_PAGES` of them, is a running line - or, for headers that alternate
between left and right pages, in the zone of at least 75% (and `MIN_PAGES`) of the odd or of the even
pages. So is, on fewer pages, a line that counts the pages: one shape, and a number at its start or end
that follows the pages' places (the number less the page's place the same), on at least `MIN_PAGES`
pages - a book's running head, the chapter's title and the page number ("Chapter 3: Introduction 13"),
which changes with each chapter. Running lines are dropped from every zone they are in, the first
page's included; the same line inside a page (out of the zones) is content and stays. A line in a zone
that is only a page number ("7", "- 7 -", "Page 7 of 9", "iv") is dropped whatever the other pages
show. Documents with fewer than `MIN_PAGES` pages with text are left as they are: there "most pages"
means too little; so are documents that would be left with no text at all (the same page printed
again and again).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

MIN_PAGES = 3
EDGE_LINES = 2
_SIDE_SHARE = 0.75  # of the odd (or even) pages, for a header only left or right pages carry

_ROMAN = r"(?:x{0,3}(?:ix|iv|vi{0,3}|i{1,3})|x{1,3}|X{0,3}(?:IX|IV|VI{0,3}|I{1,3})|X{1,3})"
_PAGE_NUMBER_LINE = re.compile(
    rf"[-–—\s]*(?:(?:page|p\.)\s*)?(?:\d{{1,4}}|{_ROMAN})(?:\s*(?:/|of)\s*\d{{1,4}})?[-–—\s]*", re.IGNORECASE
)
_EDGE_ROMAN = re.compile(rf"^{_ROMAN}(?=\s)|(?<=\s){_ROMAN}$")
_DIGITS = re.compile(r"\d+")
_EDGE_NUMBER = re.compile(r"^\s*(\d{1,4})\s|\s(\d{1,4})\s*$")


def running_shape(line: str) -> str:
    """What a running line keeps from page to page: the line with its numbers as "#"."""
    shape = _DIGITS.sub("#", " ".join(line.split()))
    return _EDGE_ROMAN.sub("#", shape).casefold()


def _page_count(line: str, place: int) -> tuple[str, int] | None:
    """The line's shape and, if a number starts or ends it, that number less the page's place: the same
    on every page of a running head that carries the page number."""
    found = _EDGE_NUMBER.search(line)
    if found is None:
        return None
    return running_shape(line), int(found.group(1) or found.group(2)) - place


def _zone(lines: list[str]) -> list[int]:
    """The indexes of the page's first and last `EDGE_LINES` lines with text."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    return sorted(set(filled[:EDGE_LINES] + filled[-EDGE_LINES:]))


def drop_running_lines(pages: Sequence[str]) -> list[str]:
    """The pages without their running headers, footers and page numbers (the module's rule), one for
    one: a page that loses nothing is returned as it was; one that does loses those lines and the
    blank lines they leave at its ends or doubled inside it (a page of running lines only becomes "").
    Splitting on "\\n" only, so every other line keeps its characters."""
    lines = [page.split("\n") for page in pages]
    zones = [_zone(page_lines) for page_lines in lines]
    with_text = [number for number, zone in enumerate(zones) if zone]
    if len(with_text) < MIN_PAGES:
        return list(pages)
    shapes: Counter[str] = Counter()
    sides: tuple[Counter[str], Counter[str]] = (Counter(), Counter())  # pages 1, 3, 5... and 2, 4, 6...
    counting: Counter[tuple[str, int]] = Counter()
    for number in with_text:
        for shape in {running_shape(lines[number][i]) for i in zones[number]}:
            shapes[shape] += 1
            sides[number % 2][shape] += 1
        counting.update({c for i in zones[number] if (c := _page_count(lines[number][i], number)) is not None})
    side_pages = (sum(1 for n in with_text if n % 2 == 0), sum(1 for n in with_text if n % 2 == 1))

    def running(line: str, place: int) -> bool:
        shape = running_shape(line)
        count = shapes[shape]
        if count >= MIN_PAGES and 2 * count >= len(with_text):
            return True
        if any(side[shape] >= max(MIN_PAGES, _SIDE_SHARE * n) for side, n in zip(sides, side_pages, strict=True)):
            return True
        counted = _page_count(line, place)
        return counted is not None and counting[counted] >= MIN_PAGES

    out: list[str] = []
    for place, (page, page_lines, zone) in enumerate(zip(pages, lines, zones, strict=True)):
        dropped = {i for i in zone if _PAGE_NUMBER_LINE.fullmatch(page_lines[i]) or running(page_lines[i], place)}
        out.append(_without(page_lines, dropped) if dropped else page)
    # Pages that are nothing but lines repeated page after page (one page printed many times): there is
    # no body for them to frame, so they are the text.
    return out if any(page.strip() for page in out) else list(pages)


def _without(lines: list[str], dropped: set[int]) -> str:
    """The page's lines but `dropped`, no blank line at either end or after another."""
    kept: list[str] = []
    for i, line in enumerate(lines):
        if i in dropped or (not line.strip() and (not kept or not kept[-1].strip())):
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept)
