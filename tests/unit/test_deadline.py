"""A task's deadline: how it is written (a duration from now or an instant with its zone), what is refused
and why, how it is stored and carried (UTC, ISO 8601), how the form, the CLI and the task view show it,
and how the intake of a task published on Kafka holds it to the gateway's rule."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pydantic import ValidationError

from docsum_cli import commands
from docsum_cli import main as cli
from docsum_gateway.routers.tasks import _DEADLINE_DURATION, _form
from docsum_parser import handlers as parser
from docsum_parser.intake import ExistingDocument, StoredTask
from docsum_parser.settings import ParserSettings
from docsum_shared.errors import Poison
from docsum_shared.events import DocumentSubmitted, Topic, decode
from docsum_shared.options import DEADLINE_HORIZON, TaskOptions, deadline_from
from docsum_shared.readmodel import views
from docsum_shared.settings import LLMSettings
from tests.cli_doubles import gateway_in_process, recording_gateway
from tests.unit.test_gateway_inputs import KEY, _app, field, file_part, multipart

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

# --- the parser -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ahead"),
    [
        ("45m", timedelta(minutes=45)),
        ("6h", timedelta(hours=6)),
        ("2d", timedelta(days=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" 6h ", timedelta(hours=6)),
        ("7d", DEADLINE_HORIZON),  # the furthest a deadline may be
    ],
)
def test_a_duration_is_from_now(text: str, ahead: timedelta) -> None:
    assert deadline_from(text, NOW) == NOW + ahead


def test_an_instant_is_kept_in_utc() -> None:
    assert deadline_from("2026-12-03T08:00:00Z", NOW) == datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    in_paris = deadline_from("2026-12-03T09:00:00+01:00", NOW)
    assert in_paris == datetime(2026, 12, 3, 8, 0, tzinfo=UTC) and in_paris.utcoffset() == timedelta(0)
    assert in_paris.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is not a duration from now (45m, 6h, 2d, 1h30m) or an ISO 8601 instant with its zone"),
        ("soon", "is not a duration from now"),
        ("6H", "is not a duration from now"),
        ("h", "is not a duration from now"),
        ("1.5h", "is not a duration from now"),
        ("-6h", "is not a duration from now"),
        ("30m1h", "is not a duration from now"),  # units in order: d, h, m, s
        ("2026-12-03T08:00:00", "has no zone: add Z (UTC) or an offset such as +01:00"),
        ("2026-12-03", "has no zone"),
        ("0s", "is not in the future"),
        ("0d0h", "is not in the future"),
        ("2026-12-02T12:00:00Z", "is not in the future"),  # NOW itself
        ("2026-12-01T08:00:00+01:00", "is not in the future; give a later instant or a duration from now"),
        ("7d1s", "is more than 7 days away; give at most 7d"),
        ("169h", "is more than 7 days away"),
        ("999999999d", "is more than 7 days away"),  # no date at all: refused before it is added to now
        ("2026-12-09T12:00:01Z", "is more than 7 days away; give an earlier instant"),
        ("9999-12-31T23:59:59-23:59", "is more than 7 days away"),
    ],
)
def test_what_is_refused_says_what_to_give(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        deadline_from(text, NOW)


def test_the_furthest_instant_is_accepted_and_one_second_more_is_not() -> None:
    assert deadline_from("2026-12-09T12:00:00Z", NOW) == NOW + DEADLINE_HORIZON
    with pytest.raises(ValueError):
        deadline_from("2026-12-09T13:00:01+01:00", NOW)


# --- the option, stored and carried -----------------------------------------------------------------------


def test_the_option_round_trips_through_storage_as_iso_8601_in_utc() -> None:
    options = TaskOptions(mode="batch", deadline=datetime(2026, 12, 3, 9, 0, tzinfo=timezone(timedelta(hours=1))))
    assert options.deadline == datetime(2026, 12, 3, 8, 0, tzinfo=UTC) and options.deadline.tzinfo is UTC
    stored = options.model_dump_json()
    assert json.loads(stored)["deadline"] == "2026-12-03T08:00:00Z"
    assert TaskOptions.from_stored(stored) == options
    assert TaskOptions.from_stored(json.loads(stored)) == options
    assert TaskOptions.from_stored('{"strict": true}').deadline is None  # a task stored before deadlines


@pytest.mark.parametrize(
    "bad",
    [
        "2026-12-03T08:00:00",  # naive: no instant at all
        datetime(2026, 12, 3, 8, 0),
        1796284800,  # a Unix time is not what the contract says
        "tomorrow",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
    ],
)
def test_the_option_refuses_what_is_no_instant(bad: object) -> None:
    with pytest.raises(ValidationError):
        TaskOptions.model_validate({"deadline": bad})


def test_a_kafka_submission_carries_its_deadline() -> None:
    message = {"task_id": "crm:1", "document_id": "crm:1:1", "owner": "crm", "filename": "a.txt", "task_documents": 1}
    options = {"mode": "batch", "deadline": "2026-12-03T03:00:00-05:00"}
    event = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": options}).encode())
    assert isinstance(event, DocumentSubmitted) and event.options is not None
    assert event.options.deadline == datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    assert json.loads(event.to_bytes())["options"]["deadline"] == "2026-12-03T08:00:00Z"
    for naive in ("2026-12-03T08:00:00", 1796284800):  # the parser dead-letters it, like any bad option
        with pytest.raises(ValidationError):
            decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"deadline": naive}}).encode())


def test_the_task_view_shows_the_deadline() -> None:
    asked = TaskOptions(deadline=NOW + timedelta(hours=6))
    runs = views.resolved(LLMSettings(_env_file=None), asked)  # type: ignore[call-arg]
    assert runs.deadline == NOW + timedelta(hours=6) and runs.mode == "realtime"
    assert json.loads(runs.model_dump_json())["deadline"] == "2026-12-02T18:00:00Z"


# --- the form -------------------------------------------------------------------------------------------


def test_the_form_field_is_the_instant() -> None:
    before = datetime.now(UTC)
    asked = _form({"deadline": ["6h"]}).deadline
    after = datetime.now(UTC)
    assert asked is not None and before + timedelta(hours=6) <= asked <= after + timedelta(hours=6)
    tomorrow = (before + timedelta(days=1)).replace(microsecond=0)
    in_paris = tomorrow.astimezone(timezone(timedelta(hours=1))).isoformat()
    assert _form({"deadline": [in_paris]}).deadline == tomorrow
    assert _form({}).deadline is None


def test_the_form_refuses_with_the_parsers_reason() -> None:
    with pytest.raises(RequestValidationError) as refused:
        _form({"deadline": ["8d"]})
    [error] = refused.value.errors()
    assert error["loc"] == ("body", "deadline") and error["msg"] == "8d is more than 7 days away; give at most 7d"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (b"8d", "is more than 7 days away"),
        (b"2020-01-01T00:00:00Z", "is not in the future"),
        (b"2030-01-01T00:00:00Z", "is more than 7 days away"),
        (b"2026-12-03T08:00:00", "has no zone"),
        (b"in a while", "is not a duration from now"),
        (b"", "is not a duration from now"),
    ],
)
def test_the_gateway_refuses_a_deadline_with_422(value: bytes, says: str) -> None:
    client = TestClient(_app(), headers={"Authorization": f"Bearer {KEY}"})
    body, content_type = multipart(file_part(b"a.txt"), field("deadline", value))
    response = client.post("/v1/tasks", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "deadline"] and says in error["msg"]


def test_every_duration_the_schema_admits_is_accepted() -> None:
    """The schema's pattern admits only durations within the 7 days, so that no value it admits is refused;
    a duration grows with each part, so the largest of each form is the one to try."""
    schema = TestClient(_app()).get("/openapi.json").json()
    upload = schema["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert upload["properties"]["deadline"]["pattern"] == _DEADLINE_DURATION
    admits = re.compile(_DEADLINE_DURATION)
    largest = ["7d", "6d23h", "99h99m", "999m", "9999s"]
    for text in [*largest, "45m", "6h", "2d", "1h30m", "90s", "1s"]:
        assert admits.fullmatch(text), text
        assert NOW < deadline_from(text, NOW) <= NOW + DEADLINE_HORIZON, text
    for text in ["8d", "7d1h", "6d24h", "100h", "1000m", "10000s", "0s", "0h30m", "", "2026-12-03T08:00:00Z"]:
        assert not admits.fullmatch(text), text


# --- the CLI --------------------------------------------------------------------------------------------


def test_the_cli_sends_the_deadline_as_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent = recording_gateway(monkeypatch)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert cli.main(["summarize", "--no-wait", "--deadline", "6h", str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", str(doc)]) == 0
    assert sent[0]["deadline"] == "6h" and "deadline" not in sent[1]


def test_the_cli_shows_the_deadline_beside_the_mode() -> None:
    deadline = "2026-12-03T08:00:00Z"
    assert commands.mode_note({"options": {"mode": "batch", "deadline": deadline}}) == (
        " (batch, deadline 2026-12-03 08:00:00 UTC)"
    )
    assert commands.mode_note({"options": {"mode": "realtime", "deadline": deadline}}) == (
        " (deadline 2026-12-03 08:00:00 UTC)"
    )
    assert commands.mode_note({"options": {"mode": "flex", "deadline": None}}) == " (flex)"


def test_the_cli_says_why_a_deadline_was_refused(tmp_path: Path) -> None:
    """Through the real application: the CLI sends the text, the gateway says what is wrong with it."""
    from docsum_cli.client import GatewayError

    gateway = gateway_in_process(_app(), KEY)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    with pytest.raises(GatewayError, match=r"gateway answered 422: deadline: 8d is more than 7 days away"):
        gateway.submit([doc], title=None, options={"deadline": "8d"})


# --- the intake of a task published on Kafka ----------------------------------------------------------------


class _Intake:
    """The parser's rows, as intake sees them: no document yet, the task stored or not."""

    def __init__(self, task: StoredTask | None) -> None:
        self.task, self.taken = task, 0

    async def find_document(self, document_id: str) -> ExistingDocument | None:
        return None

    async def load_intake_task(self, task_id: str) -> StoredTask | None:
        return self.task

    async def take_in(self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: object) -> None:
        self.taken += 1
        raise _TakenIn()  # far enough: what follows reads the rows this stand-in does not keep


class _TakenIn(Exception):
    pass


CRM = ParserSettings(_env_file=None, intake_producers={"crm": ["crm"]})


def _published(deadline: str) -> DocumentSubmitted:
    message = {
        "task_id": "crm:t-1",
        "document_id": "crm:t-1:1",
        "owner": "crm",
        "filename": "a.txt",
        "task_documents": 1,
        "content_base64": base64.b64encode(b"Some text.").decode(),
        "options": {"mode": "batch", "deadline": deadline},
    }
    return DocumentSubmitted.model_validate(message, context={"submission_forms": "lenient"})


@pytest.mark.parametrize(
    ("deadline", "says"),
    [
        ("0001-01-01T00:00:00Z", "is not in the future"),  # minus any margin: no date (the batch driver's crash)
        ("2020-01-01T00:00:00Z", "is not in the future"),
        ("9999-12-31T23:59:59Z", "is more than 7 days away"),
    ],
)
async def test_a_published_task_whose_deadline_the_gateway_would_refuse_is_refused_with_the_reason(
    deadline: str, says: str
) -> None:
    repo = _Intake(task=None)
    with pytest.raises(Poison, match=f"options.deadline {re.escape(deadline[:4])}.* {says}"):
        await parser.handle(_published(deadline), parser.Deps(repo, CRM, producer="crm"))  # type: ignore[arg-type]
    assert repo.taken == 0  # no task, no document: the message goes to the dead-letter topic with the reason


async def test_a_published_deadline_is_judged_once_by_the_message_that_creates_its_task() -> None:
    soon = (datetime.now(UTC) + timedelta(hours=6)).isoformat()
    for deadline, task in [(soon, None), ("2020-01-01T00:00:00Z", StoredTask("crm", 1, 0, 0))]:
        repo = _Intake(task)  # a good deadline; a passed one on a task already stored (a replay, a later message)
        with pytest.raises(_TakenIn):
            await parser.handle(_published(deadline), parser.Deps(repo, CRM, producer="crm"))  # type: ignore[arg-type]
        assert repo.taken == 1
