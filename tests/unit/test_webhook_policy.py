"""The webhooks' pure pieces: secrets, the back-off schedule, what an answer means, the body."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from docsum_cli import main as cli
from docsum_gateway.routers.tasks import _form
from docsum_gateway.webhooks.policy import Backoff, answered, new_secret
from docsum_shared.outbox import WebhookEvent, body, task_event
from docsum_shared.states import TASK_FINAL, TaskStatus
from tests.cli_doubles import recording_gateway

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DAY = Backoff(first_s=10.0, max_s=3600.0, retry_for_s=24 * 3600.0)


def test_a_secret_is_standard_webhooks_whsec_base64_and_new_each_time() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret.removeprefix("whsec_"))) == 24
    assert new_secret() != secret
    Webhook(secret)  # the package takes it as it is shown


def test_the_wait_doubles_from_the_first_up_to_the_longest() -> None:
    assert [DAY.delay_s(n) for n in range(1, 11)] == [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600]
    assert DAY.delay_s(10_000) == 3600  # no overflow however many attempts


def test_a_delivery_is_tried_for_a_day_then_given_up() -> None:
    now, attempts, times = T0, 0, []
    while (due := DAY.next_attempt(T0, now, attempts + 1)) is not None:
        attempts += 1
        times.append(due)
        now = due
    assert times[-1] <= T0 + timedelta(days=1) < times[-1] + timedelta(seconds=3600)
    assert attempts == 31  # retries after the first: 9 waits doubling from 10 s (5,110 s), then 22 hourly


def test_only_a_2xx_is_delivered_and_a_redirect_is_not_followed() -> None:
    assert answered(200, None).delivered and answered(204, None).delivered
    assert not answered(500, None).delivered and answered(500, None).error == "answered 500"
    moved = answered(302, "https://elsewhere.example/hook")
    assert not moved.delivered and "redirects are not followed" in (moved.error or "")


def test_a_task_end_is_the_event_endpoints_ask_for() -> None:
    finished = WebhookEvent.TASK_FINISHED
    assert task_event(TaskStatus.COMPLETED) is task_event(TaskStatus.COMPLETED_WITH_ERRORS) is finished
    assert task_event(TaskStatus.FAILED) is WebhookEvent.TASK_FAILED
    assert task_event(TaskStatus.CANCELLED) is WebhookEvent.TASK_CANCELLED
    assert task_event(TaskStatus.EXPIRED) is WebhookEvent.TASK_EXPIRED
    # Every final status is told: an endpoint hears of each task's end, however it ends.
    assert all(task_event(status) is not None for status in TASK_FINAL)
    assert task_event(TaskStatus.PROCESSING) is None and task_event(TaskStatus.PAUSED) is None


def test_the_body_is_standard_webhooks_type_timestamp_and_data() -> None:
    data = {"task_id": "t", "status": "COMPLETED"}
    sent = json.loads(body(WebhookEvent.TASK_FINISHED, T0, data))
    assert sent == {"type": "task.finished", "timestamp": T0.isoformat(), "data": data}


def test_the_cli_names_the_tasks_endpoint_as_the_form_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    endpoint = "6f1c2d3e-4b5a-4c6d-8e7f-901234567890"
    assert _form({"webhook": [endpoint]}).webhook == endpoint
    assert _form({"webhook": [""]}).webhook is None  # an empty field is no endpoint
    sent = recording_gateway(monkeypatch)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert cli.main(["summarize", "--no-wait", "--webhook", endpoint, str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", str(doc)]) == 0
    assert sent[0]["webhook"] == endpoint and "webhook" not in sent[1]
