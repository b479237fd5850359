"""A batch task's view: its batch lines as one figure, and the ETA its batch's pace gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from docsum_shared.readmodel import queries, views
from docsum_shared.scope import Scope
from docsum_shared.settings import LLMSettings

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=6)
SETTINGS = LLMSettings(llm_model="m1", llm_prices={"m1": (1.0, 2.0)})
POOL: Any = object()  # never touched: the queries functions are replaced below
ALICE = Scope("", "alice")


def _lines(
    status: str,
    lines: int,
    *,
    batch: str | None = None,
    state: str | None = None,
    of: int = 0,
    done: int = 0,
    failed: int = 0,
    submitted_at: datetime | None = None,
) -> dict[str, Any]:
    """One row of queries.batch_lines: `lines` of the task's lines with `status`, in `batch` (of `of`
    requests, `done` and `failed` as the provider last said)."""
    return {
        "status": status,
        "batch_id": batch,
        "batch_state": state,
        "batch_lines": of if batch else None,
        "batch_done": done if batch else None,
        "batch_failed": failed if batch else None,
        "submitted_at": submitted_at,
        "lines": lines,
    }


def test_no_batch_lines_is_no_batch() -> None:
    assert views.batch_progress([], DEADLINE) is None


def test_queued_lines_are_gathering_and_their_eta_unknown() -> None:
    rows = [_lines("queued", 4)]
    batch = views.batch_progress(rows, None)
    assert batch is not None
    assert (batch.lines, batch.done, batch.waiting, batch.batches, batch.state) == (4, 0, 4, 0, "gathering")
    assert batch.submitted_at is None and batch.deadline is None
    assert views.batch_eta_s(rows, NOW) is None


def test_lines_in_a_batch_not_yet_submitted_are_gathering() -> None:
    rows = [_lines("submitted", 3, batch="b1", state="uploaded", of=3)]
    batch = views.batch_progress(rows, DEADLINE)
    assert batch is not None and (batch.state, batch.batches, batch.waiting) == ("gathering", 1, 3)
    assert views.batch_eta_s(rows, NOW) is None


def test_a_submitted_batch_counts_the_providers_done_share() -> None:
    at = NOW - timedelta(hours=1)
    rows = [
        _lines("submitted", 6, batch="b1", state="submitted", of=8, done=4, submitted_at=at),
        _lines("answered", 2),
        _lines("realtime", 1),
        _lines("dropped", 1),
    ]
    batch = views.batch_progress(rows, DEADLINE)
    assert batch is not None
    # 4 of the batch's 8 requests done: half of the task's 6 lines in it, plus the 2 answered before.
    assert batch.model_dump() == {
        "lines": 10,
        "done": 5,
        "waiting": 3,
        "sent_back": 1,
        "dropped": 1,
        "batches": 1,
        "submitted_at": at,
        "deadline": DEADLINE,
        "state": "waiting",
    }


def test_the_done_share_is_at_most_the_tasks_lines() -> None:
    rows = [_lines("submitted", 2, batch="b1", state="submitted", of=3, done=3, submitted_at=NOW)]
    batch = views.batch_progress(rows, None)
    assert batch is not None and (batch.done, batch.waiting) == (2, 0)


def test_lines_of_an_ended_batch_being_taken_in_still_wait() -> None:
    batch = views.batch_progress([_lines("submitted", 2)], None)  # its batch ended: the join gives no batch
    assert batch is not None and (batch.state, batch.waiting, batch.batches) == ("waiting", 2, 0)


def test_no_line_waiting_is_done() -> None:
    batch = views.batch_progress([_lines("answered", 3), _lines("realtime", 1)], DEADLINE)
    assert batch is not None and (batch.state, batch.done, batch.sent_back, batch.waiting) == ("done", 3, 1, 0)


def test_the_earliest_open_batch_gives_submitted_at() -> None:
    early, late = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    rows = [
        _lines("submitted", 1, batch="b2", state="submitted", of=1, submitted_at=late),
        _lines("submitted", 1, batch="b1", state="submitted", of=1, submitted_at=early),
    ]
    batch = views.batch_progress(rows, None)
    assert batch is not None and (batch.submitted_at, batch.batches) == (early, 2)


@pytest.mark.parametrize(
    ("done", "failed", "eta"),
    [
        (0, 0, None),  # nothing processed yet: no pace
        (2, 0, 3 * 3600.0),  # a quarter done in an hour: three more hours
        (2, 2, 3600.0),  # failed requests are processed too
        (8, 0, 0.0),
    ],
)
def test_eta_follows_the_batch_pace(done: int, failed: int, eta: float | None) -> None:
    rows = [_lines("submitted", 8, batch="b1", state="submitted", of=8, done=done, failed=failed,
                   submitted_at=NOW - timedelta(hours=1))]  # fmt: skip
    assert views.batch_eta_s(rows, NOW) == eta


def test_eta_is_the_slowest_open_batch() -> None:
    rows = [
        _lines("submitted", 4, batch="b1", state="submitted", of=4, done=2, submitted_at=NOW - timedelta(hours=1)),
        _lines("submitted", 4, batch="b2", state="submitted", of=4, done=1, submitted_at=NOW - timedelta(hours=1)),
        _lines("answered", 5),
    ]
    assert views.batch_eta_s(rows, NOW) == 3 * 3600.0


def test_eta_is_unknown_while_a_line_waits_to_be_sent() -> None:
    rows = [
        _lines("submitted", 4, batch="b1", state="submitted", of=4, done=2, submitted_at=NOW - timedelta(hours=1)),
        _lines("queued", 1),
    ]
    assert views.batch_eta_s(rows, NOW) is None


def _fake_queries(monkeypatch: pytest.MonkeyPatch, batch_lines: list[dict[str, Any]]) -> None:
    task = {
        "id": "t1",
        "title": None,
        "status": "PROCESSING",
        "created_at": NOW,
        "updated_at": NOW,
        "summary": None,
        "summary_model": None,
        "error": None,
        "options": {"mode": "batch", "deadline": DEADLINE.isoformat()},
        "redrives": 0,
    }
    answers: dict[str, Any] = {
        "get_task": (task, []),
        "usage_rows": [],
        # A realtime rate that must not give the ETA while the task waits on its batch.
        "remaining_work": {"chunks": 8, "prompt_tokens": 800, "calls_last_minute": 60},
        "recovery": {"attempts": 0, "interruptions": 0},
        "batch_lines": batch_lines,
        "sentences": [],
        "reuse_rows": [],  # no call answered from stored results
        "previous_documents": [],  # not a new version
        "place": None,  # none of its chunks waits for its turn (those in a batch were given theirs)
    }

    def answer(name: str) -> Any:
        async def fake(*args: object) -> Any:
            return answers[name]

        return fake

    for name in answers:
        monkeypatch.setattr(queries, name, answer(name))


async def test_a_task_waiting_on_its_batch_takes_the_eta_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_queries(monkeypatch, [_lines("submitted", 8, batch="b1", state="submitted", of=8, submitted_at=NOW)])
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.batch is not None
    assert (view.batch.state, view.batch.lines, view.batch.deadline) == ("waiting", 8, DEADLINE)
    assert view.estimate.remaining_chunks == 8 and view.estimate.eta_s is None  # not 8 s from the call rate


async def test_a_task_done_with_its_batch_takes_the_eta_from_its_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_queries(monkeypatch, [_lines("answered", 8)])
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.batch is not None and view.batch.state == "done"
    assert view.estimate.eta_s == 8.0


async def test_a_task_without_batch_lines_has_no_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_queries(monkeypatch, [])
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.batch is None and view.estimate.eta_s == 8.0
