"""Merge groups chosen by their texts: an edit in one place changes only its own group and the ones above."""

from __future__ import annotations

import hashlib
import random

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.budget import completion_reserve, estimate_request_tokens, fits, next_level, part_of
from docsum_merger.groups import groups_by_content
from docsum_merger.tree import previous_groups
from tests.documents import english_prose

BUDGET = 1_500


def summaries(n: int, seed: int) -> list[str]:
    """`n` chunk summaries of 150 to 450 characters."""
    rng = random.Random(seed)
    return [english_prose(rng.randint(150, 450), seed=seed * 1000 + i).replace("\n\n", " ") for i in range(n)]


def merged(texts: tuple[str, ...]) -> str:
    """A stand-in merge: a summary of ~250 characters that depends on every text it merged."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    return f"[{digest[:8]}] " + texts[0][:240]


def tree_requests(texts: list[str], budget: int = BUDGET) -> list[tuple[str, ...]]:
    """Every merge request of the tree over `texts`, as tree.merge makes them, level by level up to
    the one request that fits."""
    return tree(texts, budget)[0]


def tree(texts: list[str], budget: int = BUDGET) -> tuple[list[tuple[str, ...]], int]:
    """The tree's merge requests, and how many levels of groups it has below the last request."""
    request = SummaryRequest(SummaryKind.DOCUMENT, tuple(texts), title="report.txt")
    made: list[tuple[str, ...]] = []
    levels = 0
    while not fits(request, budget):
        levels += 1
        groups = groups_by_content(request, budget)
        assert len(groups) < len(request.texts), "every level pairs texts up"
        parts = [part_of(request, start, end).texts for start, end in groups]
        made += parts
        request = next_level(request, [merged(p) for p in parts])
    return [*made, request.texts], levels


def new_requests(before: list[str], after: list[str]) -> int:
    """The merges of `after`'s tree that `before`'s tree did not make (the result cache has the rest)."""
    old = set(tree_requests(before))
    return sum(1 for r in tree_requests(after) if r not in old)


@pytest.mark.parametrize("seed", range(8))
def test_groups_are_consecutive_fit_and_pair_up(seed: int) -> None:
    texts = summaries(80, seed)
    request = SummaryRequest(SummaryKind.DOCUMENT, tuple(texts), title="report.txt")
    groups = groups_by_content(request, BUDGET)
    assert groups[0][0] == 0 and groups[-1][1] == len(texts)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:], strict=False))
    for start, end in groups:
        part = part_of(request, start, end)
        assert estimate_request_tokens(part) + completion_reserve(BUDGET, part) <= BUDGET
        if end - start == 1 and end < len(texts):
            assert not fits(part_of(request, start, end + 1), BUDGET), "alone only when two do not fit"
    assert groups[-1][1] - groups[-1][0] >= 2, "the last text is never merged alone"
    # Not many more merges than packing each group full would make.
    assert len(groups) <= 2.5 * estimate_request_tokens(request) / (BUDGET - completion_reserve(BUDGET)) + 2


@pytest.mark.parametrize("seed", range(8))
def test_a_summary_inserted_at_the_top_changes_only_its_path_up_the_tree(seed: int) -> None:
    texts = summaries(80, seed)
    made, levels = tree(texts)
    assert levels >= 2
    new = new_requests(texts, summaries(1, 100 + seed) + texts)
    # its own group at each level and the last request; at most a neighbour at each level besides
    assert new <= 2 * levels + 1, f"{new} merges of {len(made)} made again"


@pytest.mark.parametrize("seed", range(8))
def test_one_summary_changed_in_the_middle_changes_only_its_path_up_the_tree(seed: int) -> None:
    texts = summaries(80, seed)
    edited = [*texts[:40], texts[40] + " One sentence more.", *texts[41:]]
    total = len(tree_requests(texts))
    new = new_requests(texts, edited)
    assert new <= 6, f"{new} merges of {total} made again"


@pytest.mark.parametrize("seed", range(8))
def test_the_last_summary_removed_changes_only_the_last_path(seed: int) -> None:
    texts = summaries(80, seed)
    new = new_requests(texts, texts[:-1])
    assert new <= 6, f"{new} merges of {len(tree_requests(texts))} made again"


# --- a new version: the previous version's groups kept ------------------------------------------------


def version_tree(
    texts: list[str], kept: set[tuple[str, ...]], budget: int = BUDGET
) -> tuple[set[tuple[str, ...]], int]:
    """The merge requests of the tree over `texts` grouped as tree.merge groups a new version's, whose
    previous version's groups are `kept`; and its levels of groups."""
    request = SummaryRequest(SummaryKind.DOCUMENT, tuple(texts), title="report.txt")
    made: set[tuple[str, ...]] = set()
    levels = 0
    while not fits(request, budget):
        levels += 1
        parts = [part_of(request, start, end).texts for start, end in groups_by_content(request, budget, kept=kept)]
        made |= set(parts)
        request = next_level(request, [merged(p) for p in parts])
    return made | {request.texts}, levels


@pytest.mark.parametrize("budget", [1_000, 1_500, 2_500])
@pytest.mark.parametrize("seed", range(8))
def test_with_the_previous_versions_groups_a_summary_inserted_at_the_top_makes_only_its_path_anew(
    seed: int, budget: int
) -> None:
    """Without them the level above a new first group pairs its texts anew whenever the count of groups
    below changed: up to every merge of the tree again (test above: 2 × levels + 1)."""
    texts = summaries(80, seed)
    first, _ = version_tree(texts, set(), budget)
    again, levels = version_tree(summaries(1, 100 + seed) + texts, first, budget)
    assert len(again - first) <= levels + 1, f"{len(again - first)} merges of {len(again)} made again"


@pytest.mark.parametrize("seed", range(8))
def test_with_the_previous_versions_groups_the_last_summary_removed_makes_only_its_path_anew(seed: int) -> None:
    texts = summaries(80, seed)
    first, _ = version_tree(texts, set())
    again, levels = version_tree(texts[:-1], first)
    assert len(again - first) <= levels + 1


def test_a_kept_group_stays_whole_where_its_texts_now_stand_and_the_rest_fills_as_few_groups_as_fit() -> None:
    texts = summaries(12, 3)
    request = SummaryRequest(SummaryKind.DOCUMENT, ("a new first summary.", *texts), title="report.txt")
    kept = {tuple(texts[2:5]), tuple(texts[7:9])}
    groups = groups_by_content(request, BUDGET, kept=kept)
    assert (3, 6) in groups and (8, 10) in groups  # each one place further on
    assert [g for g in groups if g[1] <= 3] == [(0, 3)]  # before the first: one group fits them all
    assert groups[0][0] == 0 and groups[-1][1] == len(request.texts)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:], strict=False))


def test_a_new_text_alone_between_kept_groups_joins_the_one_before_it() -> None:
    texts = summaries(6, 4)
    kept = {tuple(texts[0:3]), tuple(texts[3:6])}
    request = SummaryRequest(SummaryKind.DOCUMENT, (*texts[:3], "One short summary.", *texts[3:]), title="report.txt")
    assert groups_by_content(request, BUDGET, kept=kept) == [(0, 4), (4, 7)]


def test_a_kept_group_that_no_longer_fits_the_budget_is_grouped_anew() -> None:
    texts = summaries(6, 5)
    request = SummaryRequest(SummaryKind.DOCUMENT, tuple(texts), title="report.txt")
    whole = {tuple(texts)}
    assert groups_by_content(request, 100_000, kept=whole) == [(0, 6)]
    assert (0, 6) not in groups_by_content(request, 600, kept=whole)
    assert groups_by_content(request, 600, kept=whole) == groups_by_content(request, 600)


def test_the_previous_versions_groups_are_read_back_from_its_stored_nodes_level_by_level() -> None:
    texts = ["a", "b", "c", "d", "e"]
    nodes = [(2, 0, "ab"), (3, 0, "cde"), (2, 1, "abcde")]  # (inputs, level, summary) by level and position
    assert previous_groups(texts, nodes) == [("a", "b"), ("c", "d", "e"), ("ab", "cde")]


def test_a_level_whose_nodes_do_not_add_up_to_its_texts_ends_the_groups_read_back() -> None:
    """A node left at a place a plan made again under a lower budget no longer uses: what it and the
    levels above say of the groups cannot be told, and a merge keeps none of them."""
    texts = ["a", "b", "c", "d"]
    left = [(2, 0, "ab"), (2, 0, "cd"), (2, 0, "stale"), (3, 1, "ab cd stale")]
    assert previous_groups(texts, left) == [("a", "b"), ("c", "d")]
    short = [(2, 0, "ab"), (1, 0, "c"), (2, 1, "ab c")]  # "d" in no group of its level
    assert previous_groups(texts, short) == [("a", "b"), ("c",)]
    assert previous_groups(texts, []) == []
