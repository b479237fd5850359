"""contracts/asyncapi.yaml: one channel per topic and dead-letter topic, payloads that are the topics'
JSON Schemas, examples that those schemas and the models accept, and a generator that follows the models.

The AsyncAPI parser's own verdict is in tests/integration/test_contract_asyncapi.py.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from docsum_shared import kafka
from docsum_shared.consumer import ConsumerService
from docsum_shared.events import EVENT_TYPES, TOPIC_OF, TaskEvent, Topic, decode
from docsum_shared.handlers import Sender
from docsum_shared.settings import Settings
from tests import contract_changes, generators

contracts = generators.contracts()


def _unhoist(payload: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """The payload as a standalone schema again: what it references (transitively) back under $defs,
    by the names they had there (a definition renamed for a clash is `<model>.<name>`)."""
    wanted: set[str] = set()
    todo = [payload]
    while todo:
        for name in re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(todo.pop())):
            if name not in wanted:
                wanted.add(name)
                todo.append(shared[name])
    own = f"{payload['title']}."
    body = {**payload, "$defs": {name.removeprefix(own): shared[name] for name in wanted}} if wanted else payload
    text = re.sub(r'"#/components/schemas/([^"]+)"', lambda m: f'"#/$defs/{m[1].removeprefix(own)}"', json.dumps(body))
    return dict(json.loads(text))


def _check_document(document: dict[str, Any], topics: list[Any]) -> None:
    """What every rendering must say, whatever the topics and models are."""
    partitions = kafka.topic_partitions(Settings.model_construct())
    schemas = document["components"]["schemas"]
    messages = document["components"]["messages"]
    expected = {t.value for t in topics} | {t.value + kafka.DLQ_SUFFIX for t in topics}
    assert set(messages) == expected
    # Besides, each producer's topic intake.{producer} (and its dead letters), with document-submitted's message.
    assert set(document["channels"]) == expected | {
        contracts.INTAKE_CHANNEL,
        contracts.INTAKE_CHANNEL + kafka.DLQ_SUFFIX,
    }
    for topic in topics:
        model, name = contracts.EVENT_TYPES[topic], topic.value
        for address in (name, name + kafka.DLQ_SUFFIX):
            channel = document["channels"][address]
            assert channel["address"] == address
            assert channel["bindings"]["kafka"]["partitions"] == partitions[address]
            assert channel["bindings"]["kafka"]["replicas"] == 1
            assert "DOCSUM_TOPIC_PREFIX" in channel["description"]
            assert channel["messages"] == {address: {"$ref": f"#/components/messages/{address}"}}

        message = messages[name]
        assert message["bindings"]["kafka"]["key"]["type"] == "string"
        assert f"`{model.KEY_FIELD}`" in message["bindings"]["kafka"]["key"]["description"]
        # The payload is the topic's JSON Schema (inlined; its $defs shared under components.schemas).
        payload = schemas[message["payload"]["$ref"].rsplit("/", 1)[-1]]
        standalone = {k: v for k, v in contracts.schema(topic).items() if k not in ("$schema", "$id")}
        assert _unhoist(payload, schemas) == standalone

        # The example is what the model accepts, and both the topic's schema and the payload accept it.
        (example,) = message["examples"]
        value = example["payload"]
        event = decode(topic, json.dumps(value).encode())
        assert event.key() == value[model.KEY_FIELD]
        Draft202012Validator(contracts.schema(topic)).validate(value)
        Draft7Validator(_unhoist(payload, schemas)).validate(value)  # AsyncAPI schemas are draft-07 based

        dead = messages[name + kafka.DLQ_SUFFIX]
        (dead_example,) = dead["examples"]
        headers = schemas[dead["headers"]["$ref"].rsplit("/", 1)[-1]]
        Draft7Validator(headers).validate(dead_example["headers"])
        assert dead_example["headers"]["source-topic"] == name
        with pytest.raises(Exception, match="validation error"):
            decode(topic, dead_example["payload"].encode())

    operations = document["operations"]
    for operation in operations.values():
        channel = operation["channel"]["$ref"].removeprefix("#/channels/")
        assert operation["action"] in ("send", "receive")
        assert operation["messages"] == [{"$ref": f"#/channels/{channel}/messages/{channel}"}]
        assert operation["summary"] and operation["description"]
    for topic in topics:
        assert f"send-{topic.value}" in operations, topic


def test_the_document_describes_every_topic_and_its_dead_letters() -> None:
    document = contracts.asyncapi()
    assert document["asyncapi"] == "3.0.0"
    assert document["info"]["title"] == "docsum"
    assert document["info"]["version"] == contracts.project_version() == "0.1.0"
    assert document["defaultContentType"] == "application/json"
    assert {s["protocol"] for s in document["servers"].values()} == {"kafka", "kafka-secure"}
    secured = document["servers"]["kafka-secured"]["security"]
    assert {s["$ref"].rsplit("/", 1)[-1] for s in secured} == set(document["components"]["securitySchemes"])
    _check_document(document, list(Topic))


def test_operations_follow_the_services() -> None:
    operations = contracts.asyncapi()["operations"]
    parser = operations["receive-document-submitted"]
    assert "parser" in parser["summary"]
    assert parser["bindings"]["kafka"]["groupId"]["enum"] == ["docsum-parser", "docsum-gateway-progress"]
    assert "gateway" in operations["send-document-submitted"]["summary"]
    assert "summarizer" in operations["receive-chunk-created"]["summary"]
    assert "send-chunk-created.dlq" in operations  # the summarizer dead-letters
    # The progress recorder is a consumer group too, and skips what it cannot take: the merger alone
    # dead-letters task-events.
    assert operations["receive-task-events"]["bindings"]["kafka"]["groupId"]["enum"] == [
        "docsum-merger",
        "docsum-gateway-progress",
    ]
    assert "merger" in operations["send-task-events.dlq"]["summary"]
    assert "progress" not in operations["send-task-events.dlq"]["summary"]
    for sender in ("the parser", "the chunker", "the merger", "the re-drives"):
        assert sender in operations["send-document-merged"]["description"]
    assert "send-task-finished.dlq" not in operations  # no docsum consumer group reads task-finished
    assert "merger" in operations["send-task-finished"]["summary"]
    assert "receive-task-finished" not in operations  # other systems read it


def test_senders_and_receivers_are_the_ones_the_code_declares() -> None:
    """Every handler registry's received and emitted types, and every Sender's, are in the document,
    and nothing else is."""
    registries, senders = contracts.declarations()
    assert {r.group for r in registries} == {"parser", "chunker", "summarizer", "merger", "gateway-progress"}
    sent = {(s.who, TOPIC_OF[t].value) for s in senders for t in s.emits}
    received = set()
    for registry in registries:
        for event_type in registry.receives:
            received.add((registry.who, TOPIC_OF[event_type].value))
            sent |= {(registry.who, TOPIC_OF[t].value) for t in registry.emits(event_type)}
    operations = contracts.asyncapi()["operations"]
    documented = {
        (line.removeprefix("- ").split(":")[0], op["channel"]["$ref"].rsplit("/", 1)[-1], op["action"])
        for name, op in operations.items()
        if not name.endswith(".dlq") and "intake" not in name
        for line in op["description"].splitlines()
        if line.startswith("- ")
    }
    assert documented == {(w, t, "send") for w, t in sent} | {(w, t, "receive") for w, t in received}


def test_a_sender_the_words_do_not_know_or_words_for_a_sender_gone_stop_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registries, senders = contracts.declarations()
    extra = Sender("the archiver", emits=(TaskEvent,))
    monkeypatch.setattr(contracts, "declarations", lambda: (registries, [*senders, extra]))
    with pytest.raises(ValueError, match="sent by the archiver on task-events, with no words in SENDS"):
        contracts.found_roles()
    monkeypatch.setattr(contracts, "declarations", lambda: (registries, senders))
    words = {k: v for k, v in contracts.SENDS.items() if k != ("the chunker", "task-events")}
    monkeypatch.setattr(contracts, "SENDS", {**words, ("the chunker", "task-finished"): "never"})
    with pytest.raises(ValueError) as drift:
        contracts.found_roles()
    assert "sent by the chunker on task-events, with no words in SENDS" in str(drift.value)
    assert "SENDS says the chunker sends task-finished; the code does not" in str(drift.value)


def test_each_producer_has_its_own_channel_and_document_submitted_is_the_pipelines() -> None:
    document = contracts.asyncapi()
    intake = document["channels"]["intake"]
    assert intake["address"] == "intake.{producer}" and set(intake["parameters"]) == {"producer"}
    assert intake["messages"] == {"intake": {"$ref": "#/components/messages/document-submitted"}}
    assert document["channels"]["intake.dlq"]["address"] == "intake.{producer}.dlq"
    operations = document["operations"]
    assert operations["receive-intake"]["bindings"]["kafka"]["groupId"]["enum"] == ["docsum-parser"]
    assert "another system" in operations["send-intake"]["summary"]
    assert "other systems" not in operations["send-document-submitted"]["summary"]
    assert "it takes the stored form only" in document["channels"]["document-submitted"]["description"]


def test_dead_letter_headers_are_the_ones_the_consumer_writes() -> None:
    written = set(re.findall(r'\("([a-z-]+)", ', inspect.getsource(ConsumerService._dead_letter)))
    assert written == set(contracts.DEAD_LETTER_HEADERS)
    headers = contracts.asyncapi()["components"]["schemas"]["DeadLetterHeaders"]
    assert set(headers["required"]) == written


def test_the_file_reads_back_as_the_document() -> None:
    text = contracts.render()[contracts.ASYNCAPI]
    assert yaml.safe_load(text) == contracts.asyncapi()
    assert "&id" not in text and "*id" not in text  # no YAML anchors: the file is read by people


def test_a_new_topic_and_a_one_of_payload_need_regeneration_only(monkeypatch: pytest.MonkeyPatch) -> None:
    topic = contract_changes.extend(monkeypatch)
    document = contracts.asyncapi()
    _check_document(document, list(topic))

    archived = document["channels"]["task-archived"]
    assert archived["bindings"]["kafka"]["partitions"] == Settings.model_construct().topic_partitions
    assert "no handler or sender declares this topic yet" in document["operations"]["send-task-archived"]["description"]
    assert "receive-task-archived" not in document["operations"]
    example = document["components"]["messages"]["task-archived"]["examples"][0]["payload"]
    assert example["documents"][0]["status"] == "COMPLETED"

    # Its DocumentResult is not task-finished's: each keeps its own, under its own name.
    assert "TaskArchived.DocumentResult" in document["components"]["schemas"]
    submitted = document["components"]["schemas"]["DocumentSubmitted"]
    assert len(submitted["oneOf"]) == 3
    value = document["components"]["messages"]["document-submitted"]["examples"][0]["payload"]
    assert value["blob_sha256"] and "content_base64" not in value and "source_uri" not in value
    with pytest.raises(SchemaError):  # the schema really tells the forms apart
        Draft202012Validator(contracts.schema(topic("document-submitted"))).validate(
            {**value, "source_uri": "file:///srv/a.pdf"}
        )
    assert yaml.safe_load(contracts.render()[contracts.ASYNCAPI]) == document


def test_examples_are_fixed() -> None:
    for topic in Topic:
        assert contracts.example(topic) == contracts.example(topic)
        assert contracts.example(topic)["occurred_at"] == "2026-01-15T09:30:00Z"
    assert set(EVENT_TYPES) == set(Topic)
