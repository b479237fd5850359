"""Merge groups chosen by their texts: an edit in one place changes only its own group and the ones above."""

from __future__ import annotations

import hashlib
import random

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.budget import completion_reserve, estimate_request_tokens, fits, next_level, part_of
from docsum_merger.groups import groups_by_content
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
