"""The event contract: the checked-in JSON Schemas match the models, keys and enums, and `next` links events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from docsum_shared.events import (
    EVENT_TYPES,
    ChunkCreated,
    ChunkSummarized,
    DocumentParsed,
    DocumentSubmitted,
    Event,
    TaskEvent,
    Topic,
    decode,
)
from docsum_shared.levels import SizeLevel
from docsum_shared.states import TaskStatus
from tests import generators

contracts = generators.contracts()

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"


def _submitted() -> DocumentSubmitted:
    return DocumentSubmitted(
        task_id="t1", document_id="d1", owner="alice", filename="a.txt", blob_sha256="ab" * 32, size_bytes=3
    )


# --- the checked-in copy ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(contracts.render()))
def test_checked_in_contract_is_current(name: str) -> None:
    expected = contracts.render()[name].encode()
    path = CONTRACTS / name
    assert path.is_file(), f"contracts/{name} is missing: run make contracts"
    assert path.read_bytes() == expected, f"contracts/{name} differs from the event models: run make contracts"


def test_every_topic_has_a_schema_file_and_there_is_no_other_file() -> None:
    present = {p.name for p in CONTRACTS.iterdir()}
    expected = {f"{topic.value}.schema.json" for topic in Topic} | {"README.md", "asyncapi.yaml", "generate.py"}
    assert present == expected, f"missing {expected - present}, extra {present - expected}: run make contracts"
    assert set(EVENT_TYPES) == set(Topic)


def test_check_mode_reports_stale_missing_and_extra_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert contracts.main(["--dir", str(tmp_path)]) == 0
    assert contracts.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "task-events.schema.json").write_text("{}\n")
    (tmp_path / "document-parsed.schema.json").unlink()
    (tmp_path / "gone-topic.schema.json").write_text("{}\n")
    (tmp_path / "asyncapi.yaml").write_text((tmp_path / "asyncapi.yaml").read_text().replace("3.0.0", "2.6.0"))
    capsys.readouterr()
    assert contracts.main(["--check", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "task-events.schema.json: out of date" in err
    assert "document-parsed.schema.json: missing" in err
    assert "gone-topic.schema.json: not generated" in err
    assert "asyncapi.yaml: out of date" in err
    assert "run `make contracts`" in err
    assert contracts.main(["--dir", str(tmp_path)]) == 0  # writing repairs all four
    assert contracts.stale(tmp_path) == []


def test_rendering_is_deterministic() -> None:
    first, second = contracts.render(), contracts.render()
    assert first == second
    for name, text in first.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), name
        if name.endswith(".schema.json"):
            assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- what the schemas say --------------------------------------------------------------------------


@pytest.mark.parametrize("topic", list(Topic))
def test_schema_names_topic_key_and_draft(topic: Topic) -> None:
    schema = contracts.schema(topic)
    model = EVENT_TYPES[topic]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:docsum:contracts:{topic.value}"
    assert schema["title"] == model.__name__
    assert schema["x-kafka-topic"] == topic.value
    assert schema["x-kafka-key"] == model.KEY_FIELD
    assert model.KEY_FIELD in schema["required"]
    assert f"`{model.KEY_FIELD}`" in schema["description"]
    for field in ("trace_id", "causation_id", "event_id", "task_id"):
        assert schema["properties"][field]["description"], field


@pytest.mark.parametrize(
    ("event", "key"),
    [
        (_submitted(), "d1"),
        (DocumentParsed(task_id="t1", document_id="d1", text_chars=0, size_level=SizeLevel.SMALL), "d1"),
        (ChunkCreated(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0), "c1"),
        (ChunkSummarized(task_id="t1", document_id="d1", chunk_id="c1", chunk_index=0), "d1"),
        (TaskEvent(task_id="t1", status=TaskStatus.EXPIRED), "t1"),
    ],
)
def test_key_is_the_key_field(event: Event, key: str) -> None:
    assert event.key() == key == getattr(event, type(event).KEY_FIELD)


def test_enum_fields_list_their_values_and_stay_strings_on_the_wire() -> None:
    parsed_schema = contracts.schema(Topic.DOCUMENT_PARSED)
    assert parsed_schema["$defs"]["SizeLevel"]["enum"] == [level.value for level in SizeLevel]
    task_schema = contracts.schema(Topic.TASK_EVENTS)
    assert task_schema["$defs"]["TaskStatus"]["enum"] == [status.value for status in TaskStatus]

    parsed = DocumentParsed(task_id="t1", document_id="d1", text_chars=9000, size_level=SizeLevel.MEDIUM)
    assert json.loads(parsed.to_bytes())["size_level"] == "MEDIUM"
    task = TaskEvent(task_id="t1", status=TaskStatus.COMPLETED_WITH_ERRORS)
    assert json.loads(task.to_bytes())["status"] == "COMPLETED_WITH_ERRORS"

    wire = b'{"task_id": "t1", "document_id": "d1", "text_chars": 5, "size_level": "LARGE", "new_field": 1}'
    decoded = decode(Topic.DOCUMENT_PARSED, wire)
    assert isinstance(decoded, DocumentParsed) and decoded.size_level is SizeLevel.LARGE
    status = decode(Topic.TASK_EVENTS, b'{"task_id": "t1", "status": "PAUSED"}')
    assert isinstance(status, TaskEvent) and status.status is TaskStatus.PAUSED


def test_enum_fields_reject_unknown_values() -> None:
    with pytest.raises(ValidationError):
        decode(Topic.DOCUMENT_PARSED, b'{"task_id": "t1", "document_id": "d1", "text_chars": 5, "size_level": ""}')
    with pytest.raises(ValidationError):
        decode(Topic.TASK_EVENTS, b'{"task_id": "t1", "status": "MERGING"}')


# --- next(): the causal chain ----------------------------------------------------------------------


def test_next_carries_the_trace_and_sets_the_causation() -> None:
    root = _submitted()
    assert root.causation_id is None and root.trace_id
    parsed = root.next(DocumentParsed, document_id="d1", text_chars=3, size_level=SizeLevel.SMALL)
    assert isinstance(parsed, DocumentParsed)
    assert parsed.trace_id == root.trace_id
    assert parsed.causation_id == root.event_id
    assert parsed.task_id == root.task_id
    assert parsed.event_id != root.event_id

    chunk = parsed.next(ChunkCreated, document_id="d1", chunk_id="c1", chunk_index=0)
    assert (chunk.trace_id, chunk.causation_id) == (root.trace_id, parsed.event_id)

    other = root.next(TaskEvent, task_id="t2", status=TaskStatus.PAUSED)
    assert (other.task_id, other.trace_id, other.causation_id) == ("t2", root.trace_id, root.event_id)


def test_next_of_an_event_without_trace_starts_one_at_that_event() -> None:
    untraced = DocumentSubmitted.model_validate({**_submitted().model_dump(), "trace_id": None})
    parsed = untraced.next(DocumentParsed, document_id="d1", text_chars=3, size_level=SizeLevel.SMALL)
    assert parsed.trace_id == untraced.event_id == parsed.causation_id


def test_trace_and_causation_survive_the_wire() -> None:
    root = _submitted()
    parsed = root.next(DocumentParsed, document_id="d1", text_chars=3, size_level=SizeLevel.SMALL)
    decoded = decode(Topic.DOCUMENT_PARSED, parsed.to_bytes())
    assert (decoded.trace_id, decoded.causation_id) == (root.trace_id, root.event_id)
