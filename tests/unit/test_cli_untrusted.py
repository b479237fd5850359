"""What the CLI prints that others wrote — file names, error texts, titles, owners, key names, summaries —
is shown as it is: a name like `[/x].txt` does not crash the CLI (rich's MarkupError), and
`[link=…]…[/link]` in a name or an error makes no link, on a terminal or off it; nor does a terminal's own
escape sequence (OSC 8) in a summary or a name, whose control characters are shown by their codes. Each
case goes through `docsum`'s own entry point, with the gateway answered by a stand-in client."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from docsum_cli import commands
from docsum_cli import main as cli
from docsum_cli.client import GatewayError

CLOSING = "[/x].txt"  # a closing tag that matches nothing: MarkupError in rich
LINK = "[link=https://evil.example/]open[/link].txt"  # a link to somewhere else, shown as "open.txt"
ERROR = "[link=https://evil.example/]see here[/link] [/]"
TITLE = "[link=https://evil.example/]Q3[/link]"
SUMMARY = "[bold]Rain[/bold] fell [/x]."
OSC8 = "\x1b]8;;https://evil.example/\x07here\x1b]8;;\x07"  # a link, as the terminal itself makes one
OSC8_SHOWN = "\\x1b]8;;https://evil.example/\\x07here\\x1b]8;;\\x07"


def _doc(document_id: str, filename: str, status: str) -> dict[str, Any]:
    done = status == "COMPLETED"
    return {
        "document_id": document_id,
        "filename": filename,
        "status": status,
        "summary": f"{SUMMARY} {OSC8}" if done else None,
        "error": None if done else ERROR,
        "truncated": False,
        "chunks": {"done": 1 if done else 0, "failed": 0 if done else 1, "total": 1},
        "sentences": None,
    }


def _task() -> dict[str, Any]:
    return {
        "task_id": "t1",
        "title": TITLE,
        "status": "COMPLETED_WITH_ERRORS",
        "created_at": "2026-11-01T08:00:00Z",
        "updated_at": "2026-11-01T08:20:00Z",
        "hold_reason": ERROR,
        "options": {},
        "summary": None,
        "sentences": None,
        "error": ERROR,
        "documents": [_doc("d1", CLOSING, "COMPLETED"), _doc("d2", LINK, "FAILED"), _doc("d3", OSC8, "FAILED")],
    }


class FakeGateway:
    """The gateway as the CLI's client sees it: the task is created, and over at once."""

    def __init__(self, url: str | None = None) -> None:
        pass

    def submit(self, files: list[Path], title: str | None, options: dict[str, str]) -> dict[str, Any]:
        return {"task_id": "t1"}

    def task(self, task_id: str) -> dict[str, Any]:
        return _task()


def _events(gateway: Any, task_id: str, after: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    task = _task()
    yield "snapshot", task
    docs = [{**d, "percent": 100.0} for d in task["documents"]]
    yield "progress", {"seq": 1, "kind": "document-finished", "documents": docs}


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    monkeypatch.setattr(cli, "Gateway", FakeGateway)
    monkeypatch.setattr(cli, "task_events", _events)
    for module in (cli, commands):  # wide enough that no line is wrapped
        monkeypatch.setattr(module, "err", Console(stderr=True, width=400))
        monkeypatch.setattr(module, "out", Console(highlight=False, soft_wrap=True, width=400))
    files = [tmp_path / CLOSING.replace("/", "_"), tmp_path / "a.txt"]
    for f in files:
        f.write_text("text")
    return [str(f) for f in files]


def _no_link(printed: str) -> None:
    assert "\x1b]8;" not in printed  # the terminal's hyperlink sequence (OSC 8)


def test_summarize_shows_hostile_names_and_errors_as_they_are(
    gateway: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["summarize", *gateway]) == 1  # one document failed
    printed = capsys.readouterr()
    for text in (CLOSING, LINK, ERROR, f"{SUMMARY} {OSC8_SHOWN}", f"{OSC8_SHOWN} — FAILED"):
        assert text in printed.out, text
    for text in (f"{CLOSING}: COMPLETED", f"{LINK}: FAILED", f"{OSC8_SHOWN}: FAILED"):  # progress, on stderr
        assert text in printed.err, text
    assert "\x1b" not in printed.out + printed.err


def test_progress_bars_on_a_terminal_show_the_names_without_links(
    gateway: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=screen, force_terminal=True, width=200))
    assert cli.main(["summarize", *gateway]) == 1
    drawn = screen.getvalue()
    assert CLOSING in drawn and "open[/link]" in drawn  # a bar's name is cut to its first 40 characters
    assert OSC8_SHOWN[:40] in drawn
    _no_link(drawn)


def test_a_hostile_missing_file_and_error_text_are_told_as_they_are(
    gateway: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli.main(["summarize", str(tmp_path / "missing" / CLOSING)]) == 2
    assert f"not a file: {tmp_path / 'missing' / CLOSING}" in capsys.readouterr().err

    def refused(self: FakeGateway, *args: Any) -> dict[str, Any]:
        raise GatewayError(f"gateway answered 400: {ERROR}")

    monkeypatch.setattr(FakeGateway, "submit", refused)
    assert cli.main(["summarize", *gateway]) == 2
    assert f"docsum: gateway answered 400: {ERROR}" in capsys.readouterr().err


def test_show_tasks_and_keys_print_what_others_wrote_as_it_is(
    gateway: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Owner:
        def __init__(self, url: str | None = None) -> None:
            pass

        def task(self, task_id: str) -> dict[str, Any]:
            return {**_task(), "summary": None}

        def tasks(self, limit: int) -> list[dict[str, Any]]:
            return [_task()]

    key = {"key_id": "k1", "owner": TITLE, "name": LINK, "created_at": None, "last_used_at": None, "revoked_at": None}

    class Admin:
        def __init__(self, url: str | None = None) -> None:
            pass

        def list(self, owner: str | None, include_revoked: bool) -> list[dict[str, Any]]:
            return [key]

        def revoke(self, key_id: str) -> dict[str, Any]:
            return key

        def create(self, owner: str, name: str | None) -> dict[str, Any]:
            return {**key, "key": "dsk_[/x]"}

    monkeypatch.setattr(commands, "OwnerClient", Owner)
    monkeypatch.setattr(commands, "KeyAdmin", Admin)
    wide = Console(highlight=False, soft_wrap=True, width=400, file=io.StringIO())
    monkeypatch.setattr(commands, "out", wide)  # read back whole: a table cuts what is wider than the screen
    assert cli.main(["show", "t1"]) == 0
    assert cli.main(["tasks"]) == 0
    assert cli.main(["keys", "list"]) == 0
    assert cli.main(["keys", "revoke", "k1"]) == 0
    assert cli.main(["keys", "create", "x"]) == 0
    printed = wide.file.getvalue()  # type: ignore[attr-defined]
    for text in (f"Task t1 — COMPLETED_WITH_ERRORS  {TITLE}", f"held: {ERROR}", CLOSING, LINK, ERROR, TITLE):
        assert text in printed, text
    assert f"revoked k1 ({TITLE})" in printed and "dsk_[/x]" in printed
    assert f"key k1 for {TITLE}" in capsys.readouterr().err
