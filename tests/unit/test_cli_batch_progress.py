"""The CLI's line for a task waiting on the provider's batch (`docsum show`, and while it waits), and for a
scan being read by OCR."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from docsum_cli import commands
from docsum_cli import main as cli


def _task(**batch: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "lines": 10,
        "done": 3,
        "waiting": 7,
        "sent_back": 0,
        "dropped": 0,
        "batches": 1,
        "submitted_at": "2026-11-01T08:15:42Z",
        "deadline": "2026-11-02T06:00:00Z",
        "state": "waiting",
    }
    fields.update(batch)
    return {
        "task_id": "t1",
        "title": None,
        "status": "PROCESSING",
        "created_at": "2026-11-01T08:00:00Z",
        "updated_at": "2026-11-01T08:20:00Z",
        "options": {"mode": "batch"},
        "documents": [],
        "batch": fields,
    }


def test_a_waiting_task_says_what_it_waits_for() -> None:
    assert commands.batch_note(_task()) == (
        "waiting for the provider's batch: 3 of 10 lines done, submitted at 08:15 UTC, deadline 2026-11-02 06:00:00 UTC"
    )


def test_lines_sent_back_and_no_deadline_are_said() -> None:
    assert commands.batch_note(_task(sent_back=2, deadline=None)) == (
        "waiting for the provider's batch: 3 of 10 lines done, 2 sent back to realtime calls, submitted at 08:15 UTC,"
        " no deadline"
    )


@pytest.mark.parametrize("state", ["gathering", "done"])
def test_only_a_task_at_the_provider_waits(state: str) -> None:
    assert commands.batch_note(_task(state=state)) is None


def test_a_task_without_batch_has_no_note() -> None:
    assert commands.batch_note({"batch": None}) is None and commands.batch_note({}) is None


def test_show_prints_the_note(capsys: pytest.CaptureFixture[str]) -> None:
    commands._show_task(_task())
    assert "waiting for the provider's batch: 3 of 10 lines done" in capsys.readouterr().out
    commands._show_task(_task(state="done"))
    assert "provider's batch" not in capsys.readouterr().out


def test_show_prints_the_page_a_scan_is_read_at(capsys: pytest.CaptureFixture[str]) -> None:
    task = _task(state="done")
    task["documents"] = [
        {"filename": "scan.pdf", "status": "PARSING", "chunks": {"done": 0, "failed": 0, "total": None},
         "error": None, "reading": "reading page 41 of 300 (OCR)"},
    ]  # fmt: skip
    commands._show_task(task)
    assert "reading page 41 of 300 (OCR)" in capsys.readouterr().out


def test_wait_prints_each_page_a_scan_is_read_at(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scan = {"document_id": "d1", "filename": "scan.pdf", "status": "PARSING", "percent": 0.0,
            "chunks": {"done": 0, "failed": 0, "total": None}}  # fmt: skip
    done = {**scan, "status": "COMPLETED", "percent": 100.0}

    def events(gateway: Any, task_id: str, after: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
        yield "snapshot", {**_task(state="done"), "documents": [scan]}
        for page in (1, 2):
            note = f"reading page {page} of 2 (OCR)"
            yield "progress", {"seq": page, "kind": "document-reading", "document_id": "d1", "reading": note,
                               "documents": []}  # fmt: skip
        yield "progress", {"seq": 3, "kind": "task-done", "documents": [done]}

    class Gateway:
        def task(self, task_id: str) -> dict[str, Any]:
            return {**_task(state="done"), "status": "COMPLETED", "documents": [done]}

    monkeypatch.setattr(cli, "task_events", events)
    monkeypatch.setattr(cli, "err", Console(stderr=True, width=400))  # off a terminal: a line per change
    cli.wait(Gateway(), "t1", quiet=False)  # type: ignore[arg-type]
    printed = capsys.readouterr().err
    assert "scan.pdf: reading page 1 of 2 (OCR)" in printed and "scan.pdf: reading page 2 of 2 (OCR)" in printed


@pytest.mark.parametrize(
    ("place", "note"),
    [
        (None, None),
        (
            {"waiting_chunks": 40, "ahead_chunks": 1_240, "calls_per_minute": 320, "eta_s": 240.0},
            "waiting for its turn: 40 of its chunks, 1,240 of your other chunks first; about 4 min at your share"
            " (320 calls a minute)",
        ),
        (
            {"waiting_chunks": 2, "ahead_chunks": 0, "calls_per_minute": 60, "eta_s": 2.0},
            "waiting for its turn: 2 of its chunks; about 2 s at your share (60 calls a minute)",
        ),
        (
            {"waiting_chunks": 5_000, "ahead_chunks": 0, "calls_per_minute": 0, "eta_s": None},
            "waiting for its turn: 5,000 of its chunks; no call of yours answered in the last minute to time it by",
        ),
        (
            {"waiting_chunks": 9_000, "ahead_chunks": 0, "calls_per_minute": 60, "eta_s": 9_000.0},
            "waiting for its turn: 9,000 of its chunks; about 2 h 30 min at your share (60 calls a minute)",
        ),
    ],
)
def test_a_waiting_tasks_place_is_told_in_its_owners_own_terms(place: dict[str, Any] | None, note: str | None) -> None:
    assert commands.place_note({"place": place}) == note
