"""What make bench's B17 (bench/versions.py) counts of an edited version's sentences: the pages an edit
left as they were, the sentences about them only, those kept word for word, and where a quoted passage is."""

from __future__ import annotations

from typing import Any

from bench.versions import Kept, about_untouched, kept, on_pages, page_of, untouched_pages

PAGES = [f"Page {i} says something of its own." for i in range(1, 11)]


def test_an_edited_page_alone_is_touched_and_the_others_keep_their_numbers() -> None:
    edited = [*PAGES[:4], PAGES[4] + " And one sentence more.", *PAGES[5:]]
    assert untouched_pages(PAGES, edited) == frozenset(range(1, 11)) - {5}


def test_a_page_inserted_at_the_top_shifts_every_untouched_page_by_one() -> None:
    assert untouched_pages(PAGES, ["A new first page.", *PAGES]) == frozenset(range(2, 12))


def test_a_deleted_last_page_leaves_the_others_and_an_unchanged_version_leaves_all() -> None:
    assert untouched_pages(PAGES, PAGES[:-1]) == frozenset(range(1, 10))
    assert untouched_pages(PAGES, list(PAGES)) == frozenset(range(1, 11))


def test_a_page_repeated_elsewhere_does_not_count_as_untouched_where_it_moved() -> None:
    moved = [*PAGES[1:], PAGES[0]]  # the first page moved to the end: the rest are in order, it is not
    assert untouched_pages(PAGES, moved) == frozenset(range(1, 10))


def test_a_texts_lines_are_paragraphs_with_a_blank_line_between_and_a_pdfs_pages_are_its_own() -> None:
    assert [page_of("line", n) for n in (1, 3, 5, 199)] == [1, 2, 3, 100]
    assert page_of("line", 2) == 1  # the blank line after paragraph 1 (a range ending on it)
    assert [page_of("page", n) for n in (1, 2, 100)] == [1, 2, 100]


def _source(page: int | None, last_page: int | None = None) -> dict[str, Any]:
    return {"document_id": "d", "page": page, "last_page": last_page, "start": 0, "end": 1}


def test_a_sentence_is_about_untouched_pages_when_every_page_each_source_spans_is() -> None:
    untouched = frozenset(range(2, 12))
    assert about_untouched([_source(2), _source(7, 8)], "page", untouched)
    assert not about_untouched([_source(2), _source(1)], "page", untouched)  # one source on the new page
    assert not about_untouched([_source(1, 2)], "page", untouched)  # a range from the new page on
    assert about_untouched([_source(3, 5)], "line", untouched)  # lines 3–5: paragraphs 2–3
    assert not about_untouched([_source(1, 3)], "line", untouched)  # lines 1–3: paragraphs 1–2


def test_a_sentence_without_sources_or_pages_is_about_nothing_known() -> None:
    everything = frozenset(range(1, 11))
    assert not about_untouched([], "page", everything)
    assert not about_untouched([_source(None)], "page", everything)


def test_kept_counts_the_sentences_about_untouched_pages_identical_to_one_of_the_first_versions() -> None:
    first: list[dict[str, Any]] = [
        {"text": "In all, page two.", "sources": [_source(2)]},
        {"text": "In all, page three.", "sources": []},
    ]
    edited: list[dict[str, Any]] = [
        {"text": "In all, page two.", "sources": [_source(3)]},  # the same words, its page shifted by one
        {"text": "In all, page three!", "sources": [_source(4)]},  # reworded: not kept
        {"text": "In all, the new page.", "sources": [_source(1)]},  # about the new page: not counted
        {"text": "In all, page three.", "sources": []},  # about no page: not counted
    ]
    got = kept(edited, first, "page", frozenset(range(2, 12)))
    assert (got.identical, got.about) == (1, 2)
    assert got.changed == ("“In all, page three!” (pages 4)",)
    assert got.share == 0.5


def test_with_no_sentence_about_untouched_pages_nothing_is_missed() -> None:
    assert Kept(0, 0).share == 1.0


def test_a_passage_is_on_its_pages_with_a_pdfs_line_breaks_as_spaces() -> None:
    pages = ["The canal was dug in 1820 by hand.", "Its locks were rebuilt twice."]
    assert on_pages("dug in\n1820 by", pages, 1, 1)
    assert on_pages("by hand. Its locks", pages, 1, 2)  # across two pages
    assert not on_pages("by hand. Its locks", pages, 1, 1)
    assert not on_pages("Its locks", pages, 1, 1)  # on the page after the one cited
    assert not on_pages("Page 1 of 2", pages, 1, 2)  # a footer is not the text
    assert not on_pages("The canal", pages, 0, 1) and not on_pages("Its", pages, 2, 3)  # no such page
    assert not on_pages(" \n", pages, 1, 2)  # an empty passage quotes nothing
