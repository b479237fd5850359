"""`docsum webhooks add|list|remove`, through `docsum`'s own entry point with the gateway answered by a
stand-in client: what each sends to /v1/webhooks, the secret printed alone on stdout (shown once), the
endpoints' URLs (written by their owner) printed as they are, and the gateway's refusals told."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from docsum_cli import commands
from docsum_cli import main as cli
from docsum_cli.client import GatewayError
from docsum_shared.outbox import WebhookEvent, task_event
from docsum_shared.states import TASK_FINAL

LINK = "https://hooks.example.com/[link=https://evil.example/]open[/link]"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ENDPOINT: dict[str, Any] = {
    "id": "6f1c2d3e-4b5a-4c6d-8e7f-901234567890",
    "url": LINK,
    "events": ["task.failed", "task.finished"],
    "all_tasks": False,
    "created_at": "2026-11-01T08:00:00Z",
}


class Hooks:
    """The gateway's /v1/webhooks as the CLI's client sees it; each call recorded."""

    sent: list[tuple[Any, ...]] = []

    def __init__(self, url: str | None = None) -> None:
        pass

    def add(self, url: str, events: list[str], all_tasks: bool = True) -> dict[str, Any]:
        self.sent.append(("add", url, events, all_tasks))
        return {**ENDPOINT, "url": url, "events": events, "all_tasks": all_tasks, "secret": SECRET}

    def list(self) -> list[dict[str, Any]]:
        return [ENDPOINT]

    def remove(self, webhook_id: str) -> dict[str, Any]:
        if webhook_id != ENDPOINT["id"]:
            raise GatewayError(f"gateway answered 404: no webhook {webhook_id}")
        return ENDPOINT


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    Hooks.sent = []
    monkeypatch.setattr(commands, "WebhookClient", Hooks)
    wide = io.StringIO()  # read back whole: a table cuts what is wider than the screen
    monkeypatch.setattr(commands, "out", Console(highlight=False, soft_wrap=True, width=400, file=wide))
    monkeypatch.setattr(commands, "err", Console(stderr=True, width=400))
    monkeypatch.setattr(cli, "err", Console(stderr=True, width=400))
    return wide


def test_the_cli_offers_every_event_the_gateway_takes() -> None:
    assert set(commands.WEBHOOK_EVENTS) == {e.value for e in WebhookEvent}
    # The default is every way a task ends: each final status's event.
    assert set(commands.TASK_ENDS) == {e.value for e in map(task_event, TASK_FINAL) if e is not None}


def test_add_sends_the_events_and_prints_the_secret_alone(
    screen: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["webhooks", "add", "https://hooks.example.com/a"]) == 0
    assert screen.getvalue() == f"{SECRET}\n"  # alone: `secret=$(docsum webhooks add URL)` keeps it
    told = capsys.readouterr().err
    assert f"webhook {ENDPOINT['id']} for https://hooks.example.com/a" in told and "shown this once" in told
    argv = ["webhooks", "add", "https://hooks.example.com/b", "--events", "task.failed", "document.failed"]
    assert cli.main([*argv, "--only-named"]) == 0
    ends = ["task.cancelled", "task.expired", "task.failed", "task.finished"]
    assert Hooks.sent == [  # by default every way a task ends; for all of the owner's tasks
        ("add", "https://hooks.example.com/a", ends, True),
        ("add", "https://hooks.example.com/b", ["document.failed", "task.failed"], False),
    ]


def test_an_event_the_gateway_does_not_know_is_refused_before_sending(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["webhooks", "add", "https://hooks.example.com/a", "--events", "task.done"])
    assert exited.value.code == 2
    assert "invalid choice: 'task.done'" in capsys.readouterr().err


def test_list_and_remove_print_what_the_owner_wrote_as_it_is(
    screen: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["webhooks", "list"]) == 0
    assert cli.main(["webhooks", "remove", ENDPOINT["id"]]) == 0
    printed = screen.getvalue()
    assert LINK in printed and "task.failed task.finished" in printed and "named" in printed
    assert f"removed {ENDPOINT['id']} ({LINK})" in printed
    assert "\x1b" not in printed
    assert cli.main(["webhooks", "remove", "nope"]) == 2
    assert "docsum: gateway answered 404: no webhook nope" in capsys.readouterr().err
