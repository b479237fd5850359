"""The CLI's summaries with their sources: a marker after each sentence that has sources, the footnotes
after the summary, and summaries without sentences printed as they were."""

from __future__ import annotations

import json
from typing import Any

import pytest

from docsum_cli import commands
from docsum_cli import main as cli
from docsum_cli.footnotes import footnoted, place, printable

SUMMARY = "Rain fell in May. The river rose. Both reports agree on the cause."


def _source(unit: str | None, page: int | None, last: int | None, filename: str = "report.pdf") -> dict[str, Any]:
    return {
        "document_id": "d1",
        "filename": filename,
        "unit": unit,
        "page": page,
        "last_page": last,
        "start": 0,
        "end": 9,
    }


def _sentence(text: str, support: str, *sources: dict[str, Any], at: list[int] | None = None) -> dict[str, Any]:
    start = SUMMARY.find(text)
    return {"text": text, "support": support, "at": at or [start, start + len(text)], "sources": list(sources)}


SENTENCES = [
    _sentence("Rain fell in May.", "cited", _source("page", 3, 3)),
    _sentence("The river rose.", "aligned", _source("page", 3, 4)),
    _sentence(
        "Both reports agree on the cause.", "synthesis", _source("page", 5, 5), _source("paragraph", 2, 2, "notes.docx")
    ),
]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (_source("page", 3, 3), "report.pdf, p. 3"),
        (_source("page", 3, 4), "report.pdf, p. 3–4"),
        (_source("paragraph", 12, 12, "notes.docx"), "notes.docx, ¶ 12"),
        (_source("paragraph", 12, 14, "notes.docx"), "notes.docx, ¶ 12–14"),
        (_source("slide", 4, 4, "deck.pptx"), "deck.pptx, slide 4"),
        (_source("slide", 4, 5, "deck.pptx"), "deck.pptx, slides 4–5"),
        (_source("section", 2, 2, "page.html"), "page.html, section 2"),
        (_source("section", 2, 3, "page.html"), "page.html, sections 2–3"),
        (_source("chapter", 3, 3, "book.epub"), "book.epub, chapter 3"),
        (_source("chapter", 3, 4, "book.epub"), "book.epub, chapters 3–4"),
        (_source("line", 4, 4, "a.txt"), "a.txt, line 4"),
        (_source("line", 4, 6, "a.txt"), "a.txt, lines 4–6"),
        (_source(None, None, None, "old.txt"), "old.txt"),  # a text stored without positions
    ],
)
def test_a_source_is_named_by_its_file_and_units(source: dict[str, Any], said: str) -> None:
    assert place(source) == said


def test_each_sentence_with_sources_gets_a_marker_and_a_footnote() -> None:
    assert printable(SUMMARY, SENTENCES) == (
        "Rain fell in May.[1] The river rose.[2, aligned] Both reports agree on the cause.[3, synthesis]\n"
        "\n"
        "[1] report.pdf, p. 3\n"
        "[2] report.pdf, p. 3–4 (aligned)\n"
        "[3] report.pdf, p. 5; notes.docx, ¶ 2 (synthesis)"
    )


def test_a_synthesis_without_sources_is_marked_without_a_note() -> None:
    sentences = [SENTENCES[0], _sentence("The river rose.", "synthesis")]
    assert printable(SUMMARY, sentences) == (
        "Rain fell in May.[1] The river rose.[synthesis] Both reports agree on the cause.\n\n[1] report.pdf, p. 3"
    )


def test_a_sentence_not_where_at_says_is_found_after_the_one_before_or_left_out() -> None:
    moved = _sentence("The river rose.", "cited", _source("page", 7, 7), at=[0, 15])
    missing = _sentence("Never said.", "cited", _source("page", 9, 9), at=[70, 81])
    made = footnoted(SUMMARY, [SENTENCES[0], moved, missing])
    assert made.text() == "Rain fell in May.[1] The river rose.[2] Both reports agree on the cause."
    assert [n.line() for n in made.notes] == ["[1] report.pdf, p. 3", "[2] report.pdf, p. 7"]


@pytest.mark.parametrize("sentences", [None, []])
def test_a_summary_without_sentences_prints_as_it_is(sentences: list[dict[str, Any]] | None) -> None:
    assert printable(SUMMARY, sentences) == SUMMARY


def _task(sentences: list[dict[str, Any]] | None) -> dict[str, Any]:
    doc = {
        "document_id": "d1",
        "filename": "report.pdf",
        "status": "COMPLETED",
        "summary": SUMMARY,
        "error": None,
        "truncated": False,
        "chunks": {"done": 1, "failed": 0, "total": 1},
        "sentences": sentences,
    }
    return {
        "task_id": "t1",
        "title": None,
        "status": "COMPLETED",
        "created_at": "2026-11-01T08:00:00Z",
        "updated_at": "2026-11-01T08:20:00Z",
        "options": {},
        "summary": "[bold]Rain fell in May.",  # markup-like text is the summary's own: printed as it is
        "sentences": [
            {"text": "[bold]Rain fell in May.", "support": "cited", "at": [0, 23], "sources": [_source("page", 3, 3)]}
        ],
        "error": None,
        "documents": [doc],
    }


@pytest.mark.parametrize("printer", [cli.show, commands._show_task])
def test_summarize_wait_and_show_print_the_footnotes(printer: Any, capsys: pytest.CaptureFixture[str]) -> None:
    printer(_task(SENTENCES))
    printed = capsys.readouterr().out
    assert "Rain fell in May.[1] The river rose.[2, aligned]" in printed
    assert "[3] report.pdf, p. 5; notes.docx, ¶ 2 (synthesis)" in printed
    assert "[bold]Rain fell in May.[1]\n\n[1] report.pdf, p. 3" in printed
    printer(_task(None))
    printed = capsys.readouterr().out
    assert SUMMARY + "\n" in printed and "[1] report.pdf" in printed  # the task's summary still has its note
    assert "[2, aligned]" not in printed


def test_json_carries_the_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._finish(_task(SENTENCES), json_output=True) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["documents"][0]["sentences"] == SENTENCES
    assert printed["sentences"][0]["sources"][0]["page"] == 3
    assert cli._finish(_task(None), json_output=True) == 0
    assert json.loads(capsys.readouterr().out)["documents"][0]["sentences"] is None
