"""A summary with its sources: each sentence that has sources is followed by a footnote marker, and the
footnotes say where the sentence comes from ("[1] report.pdf, p. 3").

The markers: "[1]" for a sentence that quotes its sources, "[2, aligned]" for one matched to them
afterwards, "[3, synthesis]" for one that joins several (or "[synthesis]" alone when none could be told),
"[4, unsupported]" for one that the texts it was made from do not say ("[unsupported]" alone when it
has no source, as a chunk summary's has not).
A summary without sentences (`sentences` null) is printed as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# How each unit is named before its number, for one unit and for a span of them.
_UNIT_NAMES = {
    "page": ("p.", "p."),
    "paragraph": ("¶", "¶"),
    "slide": ("slide", "slides"),
    "section": ("section", "sections"),
    "chapter": ("chapter", "chapters"),
    "line": ("line", "lines"),
}


@dataclass(frozen=True)
class Note:
    """One footnote: its number, the sentence's support, and where its sources are."""

    number: int
    support: str
    places: tuple[str, ...]

    def marker(self) -> str:
        return f"[{self.number}]" if self.support == "cited" else f"[{self.number}, {self.support}]"

    def line(self) -> str:
        said = "" if self.support == "cited" else f" ({self.support})"
        return f"[{self.number}] {'; '.join(self.places)}{said}"


@dataclass(frozen=True)
class Footnoted:
    """A summary's text with its markers in place (`pieces`: text, then the marker after it), and its notes."""

    pieces: tuple[tuple[str, str], ...]
    notes: tuple[Note, ...]

    def text(self) -> str:
        return "".join(text + marker for text, marker in self.pieces)


def place(source: dict[str, Any]) -> str:
    """Where a source is: "report.pdf, p. 3", "report.pdf, p. 3–4", "notes.docx, ¶ 12", "deck.pptx, slide 4",
    "page.html, section 2", "book.epub, chapters 3–4", "a.txt, lines 4–6"."""
    unit, page, last = source.get("unit"), source.get("page"), source.get("last_page")
    if unit not in _UNIT_NAMES or page is None:
        return str(source["filename"])
    one, many = _UNIT_NAMES[unit]
    if last is not None and last > page:
        return f"{source['filename']}, {many} {page}–{last}"
    return f"{source['filename']}, {one} {page}"


def anchored(summary: str, sentences: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Each sentence found in the summary, with the offset its text ends at: where its `at` says when the
    text is there, else the next place it is found; one not found is left out."""
    out: list[tuple[int, dict[str, Any]]] = []
    cursor = 0
    for sentence in sentences:
        text = sentence.get("text") or ""
        start, end = (sentence.get("at") or (-1, -1))[:2]
        if not (cursor <= start < end and summary[start:end] == text):
            start = summary.find(text, cursor) if text else -1
            if start < 0:
                continue
            end = start + len(text)
        out.append((end, sentence))
        cursor = end
    return out


def footnoted(summary: str, sentences: Sequence[dict[str, Any]] | None) -> Footnoted:
    """The summary cut at each marker, and its notes numbered from 1."""
    if not sentences:
        return Footnoted(((summary, ""),), ())
    pieces: list[tuple[str, str]] = []
    notes: list[Note] = []
    cursor = 0
    for end, sentence in anchored(summary, sentences):
        support = str(sentence.get("support") or "cited")
        places = tuple(dict.fromkeys(place(s) for s in sentence.get("sources") or ()))
        if places:
            note = Note(len(notes) + 1, support, places)
            notes.append(note)
            marker = note.marker()
        elif support in ("synthesis", "unsupported"):
            marker = f"[{support}]"
        else:
            continue
        pieces.append((summary[cursor:end], marker))
        cursor = end
    pieces.append((summary[cursor:], ""))
    return Footnoted(tuple(pieces), tuple(notes))


def printable(summary: str, sentences: Sequence[dict[str, Any]] | None) -> str:
    """The summary with its markers, then its footnotes, as the CLI prints it."""
    made = footnoted(summary, sentences)
    if not made.notes:
        return made.text()
    return made.text() + "\n\n" + "\n".join(note.line() for note in made.notes)
