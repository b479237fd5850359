"""What the CLI prints of a new version: what was reused, and what changed in a summary, the changes first."""

from __future__ import annotations

from typing import Any

from docsum_cli import commands

REUSE = {"chunk_summaries": 12, "chunk_summaries_reused": 11, "merges": 3, "merges_reused": 1,
         "said": "11 of 12 chunk summaries reused, 2 merges redone, 1 reused"}  # fmt: skip


def _sentence(text: str, change: str | None, was: str | None = None) -> dict[str, Any]:
    return {"text": text, "support": "cited", "at": [0, len(text)], "sources": [], "change": change, "was": was}


def test_the_changes_come_as_a_count_then_each_changed_new_and_removed_sentence() -> None:
    doc = {
        "sentences": [
            _sentence("Sales rose 5%.", "changed", "Sales rose 4%."), _sentence("Costs fell.", "unchanged"),
            _sentence("A plant opened.", "new"),
        ],
        "removed_sentences": ["Old news."],
    }  # fmt: skip
    assert commands.changes_lines(doc) == [
        "since the previous version: 1 changed, 1 new, 1 removed, 1 unchanged",
        "  changed: Sales rose 5%.",
        "      was: Sales rose 4%.",
        "  new: A plant opened.",
        "  removed: Old news.",
    ]


def test_sentences_not_marked_print_no_changes() -> None:
    assert commands.changes_lines({"sentences": [_sentence("Costs fell.", None)], "removed_sentences": None}) == []
    assert commands.changes_lines({"sentences": None}) == []


def test_reuse_is_said_for_a_new_version_or_when_anything_was_reused() -> None:
    assert commands.reuse_note({"reuse": REUSE}) == f"reused: {REUSE['said']}"
    nothing = {**REUSE, "chunk_summaries_reused": 0, "merges_reused": 0, "said": "0 of 12 chunk summaries reused"}
    assert commands.reuse_note({"reuse": nothing}) is None  # a first version that reused nothing
    assert (
        commands.reuse_note({"reuse": nothing, "previous_document_id": "d0"})
        == "reused: 0 of 12 chunk summaries reused"
    )
    assert commands.reuse_note({"reuse": None}) is None
