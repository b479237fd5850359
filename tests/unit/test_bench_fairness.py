"""What make bench's fair-share measures (bench/fairness.py) read off the stand-in's ledger."""

from __future__ import annotations

import pytest

from bench.fairness import Served, attribute, backlogged_until, completions_between, shares, tallies, widest_gap
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
