"""Batch mode's policy: how a leased chunk is summarized, the mode of a call a batch sent back, a line's
request as stored, how an ended batch ends, whether a deadline forces what is left to go realtime, and
what a failure means for a batch (tried again at the next poll, or ended alone with a readable reason)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_shared.errors import ProviderUnavailable, RateLimited, RequestRefused
from docsum_shared.options import Mode
from docsum_summarizer.batches.policy import (
    ChunkLine,
    Ending,
    LineStatus,
    Route,
    call_mode,
    ending,
    halves,
    must_finish_now,
    passes,
    reason,
    request_from,
    request_json,
    route,
    unrun_status,
    will_miss,
)

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
NO_MARGIN = timedelta(0)
MODES: list[Mode] = ["realtime", "flex", "batch"]


def _line(status: LineStatus) -> ChunkLine:
    return ChunkLine(status, "key-1")


# --- route -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("can_batch", [True, False])
def test_an_answered_line_is_taken_whatever_the_mode(mode: Mode, can_batch: bool) -> None:
    assert route(mode, _line(LineStatus.ANSWERED), can_batch) is Route.TAKE_ANSWER


@pytest.mark.parametrize("line", [None, LineStatus.DROPPED, LineStatus.REALTIME])
def test_batch_mode_without_a_batch_api_calls(line: LineStatus | None) -> None:
    assert route("batch", None if line is None else _line(line), can_batch=False) is Route.CALL


@pytest.mark.parametrize("line", [None, LineStatus.DROPPED])
def test_a_batch_chunk_without_a_line_or_with_a_dropped_one_is_queued(line: LineStatus | None) -> None:
    assert route("batch", None if line is None else _line(line), can_batch=True) is Route.QUEUE


def test_a_batch_chunk_its_batch_sent_back_is_called() -> None:
    assert route("batch", _line(LineStatus.REALTIME), can_batch=True) is Route.CALL


@pytest.mark.parametrize("mode", ["realtime", "flex"])
@pytest.mark.parametrize("line", [None, LineStatus.DROPPED])
def test_a_chunk_of_another_mode_is_called_even_with_a_batch_api(mode: Mode, line: LineStatus | None) -> None:
    assert route(mode, None if line is None else _line(line), can_batch=True) is Route.CALL


# --- call_mode ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [*MODES, None])
def test_a_call_its_batch_sent_back_goes_realtime(mode: Mode | None) -> None:
    assert call_mode(mode, _line(LineStatus.REALTIME)) == "realtime"


@pytest.mark.parametrize("mode", [*MODES, None])
@pytest.mark.parametrize("line", [None, LineStatus.ANSWERED, LineStatus.DROPPED])
def test_any_other_call_keeps_the_tasks_mode(mode: Mode | None, line: LineStatus | None) -> None:
    assert call_mode(mode, None if line is None else _line(line)) == mode


# --- a line's request, as stored ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        SummaryRequest(
            kind=SummaryKind.TASK,
            texts=("first summary", "second summary"),
            title="Quarterly reports",
            labels=("q1.pdf", "q2.pdf"),
            language="French",
            length="brief",
            style="bullets",
            max_tokens=400,
            shorter=True,
        ),
        SummaryRequest(kind=SummaryKind.CHUNK, texts=("The text.",), context_before="Before.", context_after="After."),
    ],
)
def test_a_request_comes_back_as_it_was_stored(request_: SummaryRequest) -> None:
    stored = json.loads(json.dumps(request_json(request_)))  # as a jsonb column gives it back
    back = request_from(stored)
    assert back == request_
    assert isinstance(back.kind, SummaryKind) and isinstance(back.texts, tuple) and isinstance(back.labels, tuple)


def test_a_stored_request_without_labels_has_none() -> None:
    stored = json.loads(json.dumps(request_json(SummaryRequest(kind=SummaryKind.CHUNK, texts=("x",)))))
    del stored["labels"]
    assert request_from(stored).labels == ()


# --- how an ended batch ends -------------------------------------------------------------------------


def test_a_batch_over_the_token_cap_is_split_when_it_has_lines_to_split() -> None:
    assert ending("failed", ("token_limit_exceeded",), lines=2) is Ending.SPLIT
    assert ending("failed", ("invalid_request", "token_limit_exceeded"), lines=100) is Ending.SPLIT


def test_a_single_line_over_the_token_cap_fails() -> None:
    assert ending("failed", ("token_limit_exceeded",), lines=1) is Ending.FAILED


def test_a_batch_refused_for_another_reason_fails() -> None:
    assert ending("failed", ("invalid_json_line",), lines=10) is Ending.FAILED
    assert ending("failed", (), lines=10) is Ending.FAILED


@pytest.mark.parametrize(
    ("status", "expected"),
    [("completed", Ending.COMPLETED), ("expired", Ending.EXPIRED), ("cancelled", Ending.CANCELLED)],
)
def test_a_batch_that_ran_ends_as_the_provider_says(status: str, expected: Ending) -> None:
    assert ending(status, (), lines=10) is expected
    assert ending(status, ("token_limit_exceeded",), lines=10) is expected  # errors matter for refusals only


def test_a_line_its_batch_never_answered_goes_realtime_only_if_its_task_takes_work() -> None:
    assert unrun_status(task_takes_work=True) is LineStatus.REALTIME
    assert unrun_status(task_takes_work=False) is LineStatus.DROPPED


@pytest.mark.parametrize(
    ("ids", "first", "second"),
    [
        (["a", "b", "c", "d"], ["a", "b"], ["c", "d"]),
        (["a", "b", "c"], ["a"], ["b", "c"]),
        (["a", "b"], ["a"], ["b"]),
    ],
)
def test_halves_keep_every_line_once_in_order(ids: list[str], first: list[str], second: list[str]) -> None:
    assert halves(ids) == (first, second)


# --- deadlines ---------------------------------------------------------------------------------------


def test_without_a_deadline_nothing_must_finish_now() -> None:
    assert must_finish_now(NOW, None, HOUR) is False


def test_what_is_left_must_finish_now_once_inside_the_margin() -> None:
    deadline = NOW + HOUR
    assert must_finish_now(NOW, deadline, HOUR - timedelta(seconds=1)) is False
    assert must_finish_now(NOW, deadline, HOUR) is True  # at the margin's edge
    assert must_finish_now(NOW, deadline, 2 * HOUR) is True
    assert must_finish_now(NOW + 2 * HOUR, deadline, NO_MARGIN) is True  # past it


def test_a_batch_without_a_deadline_never_misses_it() -> None:
    assert will_miss(NOW, None, HOUR, NOW - 10 * HOUR, done=1, total=1_000) is False


def test_a_batch_inside_the_margin_misses_the_deadline_whatever_its_pace() -> None:
    deadline = NOW + HOUR
    assert will_miss(NOW, deadline, HOUR, NOW - HOUR, done=999, total=1_000) is True
    assert will_miss(NOW, deadline, HOUR, None, done=0, total=1_000) is True  # not even started


def test_a_batch_misses_the_deadline_when_its_pace_ends_it_after() -> None:
    # One line of three done in an hour: the two left take two more hours.
    assert will_miss(NOW, NOW + 90 * timedelta(minutes=1), NO_MARGIN, NOW - HOUR, done=1, total=3) is True
    assert will_miss(NOW, NOW + 3 * HOUR, NO_MARGIN, NOW - HOUR, done=1, total=3) is False
    # The margin counts against the projection: ending at 2 h is too late for 2 h 30 less 45 min.
    deadline = NOW + 150 * timedelta(minutes=1)
    assert will_miss(NOW, deadline, NO_MARGIN, NOW - HOUR, done=1, total=3) is False
    assert will_miss(NOW, deadline, 45 * timedelta(minutes=1), NOW - HOUR, done=1, total=3) is True


def test_a_projection_ending_on_the_deadline_is_in_time() -> None:
    margin = timedelta(minutes=10)
    deadline = NOW + HOUR + margin  # one line of two done in an hour: the other ends right at deadline - margin
    assert will_miss(NOW, deadline, margin, NOW - HOUR, done=1, total=2) is False


def test_a_batch_with_nothing_done_yet_has_no_pace_to_judge() -> None:
    deadline = NOW + 2 * HOUR
    assert will_miss(NOW, deadline, NO_MARGIN, NOW - 10 * HOUR, done=0, total=1_000) is False
    assert will_miss(NOW, deadline, NO_MARGIN, None, done=5, total=1_000) is False  # not submitted: no pace


def test_a_batch_with_every_line_done_is_in_time() -> None:
    assert will_miss(NOW, NOW + 2 * HOUR, NO_MARGIN, NOW - 10 * HOUR, done=3, total=3) is False


def test_deadlines_at_the_calendars_ends_are_compared_without_overflow() -> None:
    # deadline - margin is no date for a deadline in year 1 (OverflowError): the time left always is.
    first, last = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    margin = timedelta(seconds=900)
    assert must_finish_now(NOW, first, margin) is True and must_finish_now(NOW, last, margin) is False
    assert will_miss(NOW, first, margin, NOW - HOUR, done=1, total=1_000) is True
    assert will_miss(NOW, last, margin, NOW - HOUR, done=1, total=50_000) is False


# --- failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "again"),
    [
        (ProviderUnavailable("LLM provider error 503"), True),
        (RateLimited("LLM provider rate limit"), True),
        (asyncpg.PostgresConnectionError("the database went away"), True),
        (ConnectionResetError(), True),
        (RequestRefused("LLM provider rejected the request (403)"), False),
        (AttributeError("'str' object has no attribute 'get'"), False),
        (RecursionError("maximum recursion depth exceeded"), False),
        (OverflowError("date value out of range"), False),
        (asyncpg.CharacterNotInRepertoireError("invalid byte sequence for encoding UTF8: 0x00"), False),
    ],
)
def test_only_what_passes_is_tried_again_at_the_next_poll(exc: Exception, again: bool) -> None:
    assert passes(exc) is again


def test_a_reason_is_readable_and_storable() -> None:
    assert reason(RequestRefused("LLM provider rejected the request (403): no")) == (
        "LLM provider rejected the request (403): no"
    )
    assert reason(AttributeError("'str' object has no attribute 'get'")) == (
        "AttributeError: 'str' object has no attribute 'get'"
    )
    assert reason(KeyError()) == "KeyError: KeyError"
    said = reason(ValueError("a\x00b \ud800 " + "x" * 2_000))
    assert "\x00" not in said and said.encode("utf-8") and len(said) == 500
    assert said.startswith("ValueError: ab ? x")
