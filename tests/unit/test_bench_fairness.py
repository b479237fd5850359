"""What make bench's fair-share measures (bench/fairness.py) read off the stand-in's ledger."""

from __future__ import annotations

import pytest

from bench.fairness import (
    Behind,
    Newcomers,
    Served,
    attribute,
    backlogged_until,
    completions_between,
    shares,
    tallies,
    widest_gap,
)
from docsum_summarizer.schedule import jain_index
from tests.fake_llm import LedgerEntry


def _entry(prompt: str, started: float, finished: float, *, status: int = 200) -> LedgerEntry:
    return LedgerEntry(
        started=started, finished=finished, model="m", status=status, prompt=prompt, user=prompt,
        prompt_chars=len(prompt), prompt_tokens=100, completion_tokens=20 if status == 200 else 0, prompt_sha256="",
    )  # fmt: skip


def test_calls_are_owned_by_the_marker_in_their_prompt_and_cost_what_the_counters_charge() -> None:
    entries = [
        _entry("Summarize the text between <text> tags: mka text", 0.0, 0.1),
        _entry("Merge these summaries of mkb", 0.0, 0.1),
        _entry("summarize nobody's text", 0.0, 0.1),
        _entry("summarize mka text", 0.1, 0.2, status=500),  # not answered: served nothing
    ]
    assert attribute(entries, {"mka": "alice", "mkb": "bob"}) == [
        Served("alice", 0.0, 0.1, 140, chunk=True),  # 100 prompt + 2 × 20 completion tokens
        Served("bob", 0.0, 0.1, 140, chunk=False),  # a merge
    ]


def test_tokens_are_tallied_per_owner_in_the_window_each_call_was_answered_in() -> None:
    calls = [
        Served("alice", 0.0, 0.5, 10),
        Served("alice", 0.5, 1.5, 20),  # answered in the second window
        Served("bob", 0.0, 0.9, 7),
        Served("bob", 2.5, 3.5, 99),  # after the last window: not counted
        Served("carol", 0.0, 0.5, 5),  # not an owner measured
        Served("bob", 0.0, 0.5, 1_000, chunk=False),  # a merge
    ]
    assert tallies(calls, ["alice", "bob"], 0.0, 1.0, 3) == [
        {"alice": 10, "bob": 1_007},
        {"alice": 20, "bob": 0},
        {"alice": 0, "bob": 0},
    ]
    assert shares(calls, ["alice", "bob"], 0.0, 2.0) == {"alice": 30, "bob": 1_007}
    assert shares(calls, ["alice", "bob"], 0.0, 2.0, chunks_only=True) == {"alice": 30, "bob": 7}


def test_the_widest_gap_is_the_largest_difference_in_any_window_at_the_owners_weights() -> None:
    windows = [{"alice": 300, "bob": 100}, {"alice": 90, "bob": 100}]
    assert widest_gap(windows) == 200
    assert widest_gap(windows, {"alice": 3.0}) == 70  # 90 / 3 against 100
    assert widest_gap([]) == 0


def test_jains_index_is_one_when_equal_and_one_over_n_when_one_takes_everything() -> None:
    assert jain_index([5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([9, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([1, 2]) == pytest.approx(0.9)


def test_completions_are_counted_between_two_moments_and_owners_backlogged_until_the_first_runs_out() -> None:
    entries = [_entry("p", 0.0, t) for t in (0.5, 1.0, 1.5, 2.0)]
    assert completions_between(entries, 0.5, 1.5) == 2  # after the start, up to and with the end
    calls = [Served("alice", 4.0, 4.1, 1), Served("bob", 2.0, 2.1, 1), Served("bob", 3.0, 3.1, 1)]
    assert backlogged_until(calls, ["alice", "bob"]) == 3.0


def _newcomer(wait_s: float, task_s: float, *, depth: int = 1) -> Behind:
    return Behind(backlog=1_000, wait_s=wait_s, completions=16, task_s=task_s, depth=depth, to_ready_s=0.03,
                  after_s=0.07, call_s=0.3)  # fmt: skip


def test_newcomers_pass_on_their_median_and_show_their_worst_and_each_one() -> None:
    # A fixed-time stand-in answers the calls in flight together: each newcomer's wait for a slot is a draw
    # between none and one call. The median of them meets the goal; the worst is shown beside it.
    drawn = Newcomers([_newcomer(0.05, 0.45), _newcomer(0.29, 0.69), _newcomer(0.12, 0.52)])
    assert drawn.passed
    assert drawn.median(lambda b: b.task_s) == pytest.approx(0.52)
    assert drawn.worst(lambda b: b.task_s) == pytest.approx(0.69)
    shown = drawn.shown()
    assert "3 newcomers, median (worst): first call 0.4 (1.0) calls' time" in shown
    assert "done in 1.7 (2.3) calls' time at depth 1" in shown
    assert "its calls 1.0" in shown  # 0.52 - 0.03 - 0.12 - 0.07: what is left of the task's time
    assert shown.endswith("each one done in 1.5, 2.3, 1.7")


@pytest.mark.parametrize(
    ("waits", "tasks", "depth"),
    [
        ((0.05, 0.35, 0.31), (0.4, 0.5, 0.5), 1),  # the median first call more than one call after ready
        ((0.05, 0.1, 0.1), (0.4, 0.61, 0.7), 1),  # the median done beyond (depth + 1) calls' time
        ((0.05, 0.1, 0.1), (0.7, 0.8, 0.95), 2),  # depth 2 allows 0.9 s: the median, 0.8, within it
    ],
)
def test_newcomers_miss_when_their_median_misses(
    waits: tuple[float, ...], tasks: tuple[float, ...], depth: int
) -> None:
    drawn = Newcomers([_newcomer(w, t, depth=depth) for w, t in zip(waits, tasks, strict=True)])
    assert drawn.passed is (depth == 2)


def test_one_newcomer_is_shown_alone() -> None:
    shown = Newcomers([_newcomer(28.0, 28.5)]).shown()
    assert shown.startswith("first call 93.3 calls' time (16 completions) after its chunk was ready, behind 1,000")
