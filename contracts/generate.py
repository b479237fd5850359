"""The event contract as JSON Schema, one file per Kafka topic, and as one AsyncAPI 3.0 document.

Both are generated from the models in events.py.

    python contracts/generate.py            # (re)write contracts/ (what `make contracts` runs)
    python contracts/generate.py --check    # exit 1 if contracts/ differs from the models

Each schema describes a topic's message value in validation mode, i.e. what consumers accept (fields
with defaults are optional; unknown fields are ignored), as JSON Schema draft 2020-12. Besides the
standard keywords it names the topic (`x-kafka-topic`) and the field whose value is the message key
(`x-kafka-key`). The output is deterministic: sorted keys, two-space indent, a trailing newline.

contracts/asyncapi.yaml describes the same topics as an AsyncAPI 3.0.0 document: the broker and its
security schemes, one channel per topic and per dead-letter topic (with the Kafka bindings: partitions,
replicas, the message key), each message's payload (the topic's JSON Schema, inlined under
components.schemas) with an example built from the model, and what docsum sends and receives on each.

Who sends and who receives each topic is found in the code, not written here (`found_roles`): the
pipeline's plan (docsum_pipeline.plan) names each stage, whose `Handlers` registry says what
it receives and, per handler, what it emits, and whose `Sender`s say what else it publishes. Only
the words for what each does are written here
(SENDS, RECEIVES), and generation fails while the code and the words disagree.
scripts/asyncapi.sh validates it with the AsyncAPI parser (tests/integration/test_contract_asyncapi.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tomllib
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from docsum_pipeline.plan import stages
from pydantic import BaseModel, ValidationError

from docsum_shared.events import EVENT_TYPES, INTAKE_TOPIC, TOPIC_OF, Topic, decode
from docsum_shared.handlers import Handlers, Sender
from docsum_shared.kafka import DLQ_SUFFIX, topic_partitions
from docsum_shared.settings import Settings, env_name

DRAFT = "https://json-schema.org/draft/2020-12/schema"
README = "README.md"
ASYNCAPI = "asyncapi.yaml"
DEFAULT_DIR = Path("contracts")
REGENERATE = "run `make contracts`"


def file_name(topic: Topic) -> str:
    return f"{topic.value}.schema.json"


def schema(topic: Topic) -> dict[str, Any]:
    """The JSON Schema of the value of a message on `topic`."""
    model = EVENT_TYPES[topic]
    body = model.model_json_schema(mode="validation")
    key = model.KEY_FIELD
    where = f"Kafka topic `{topic.value}`; message key: the `{key}` property."
    return {
        "$schema": DRAFT,
        "$id": f"urn:docsum:contracts:{topic.value}",
        **body,
        "description": "\n\n".join(part for part in (body.get("description", "").strip(), where) if part),
        "x-kafka-topic": topic.value,
        "x-kafka-key": key,
    }


def _dump(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _readme() -> str:
    rows = "\n".join(
        f"| `{t.value}` | `{m.__name__}` | `{m.KEY_FIELD}` | [{file_name(t)}]({file_name(t)}) |"
        for t, m in ((t, EVENT_TYPES[t]) for t in Topic)
    )
    return f"""# Event contracts

One JSON Schema (draft 2020-12) per Kafka topic, describing the message value (JSON) as consumers
accept it. Generated from the pydantic models in `shared/docsum_shared/events.py` by
`contracts/generate.py`: do not edit these files, change the models and regenerate with

    make contracts

(`python contracts/generate.py`). `make lint` and `tests/unit/test_contracts.py` fail while
this copy differs from the models (`python contracts/generate.py --check`).

Compatibility: consumers ignore unknown properties, so a new optional property is a compatible
change; `schema_version` is raised only for a change that older consumers cannot read. Each schema
names its topic (`x-kafka-topic`) and the property whose value is the message key (`x-kafka-key`).

Every event carries the same envelope: `event_id`, `schema_version`, `occurred_at`, `task_id`,
`trace_id` (one per submission, copied to every event it causes) and `causation_id` (the `event_id`
of the event that caused it; null for a root event such as a submission or a re-drive).

| Topic | Model | Key | Schema |
|---|---|---|---|
{rows}

## AsyncAPI

[{ASYNCAPI}]({ASYNCAPI}) describes the same contract as one [AsyncAPI 3.0](https://www.asyncapi.com/docs/reference/specification/v3.0.0)
document: the Kafka broker (plain, or secured with SASL/SCRAM or PLAIN), one channel per topic and per
dead-letter topic (`<topic>{DLQ_SUFFIX}`: the original value, byte for byte, with the error in its headers),
their partitions and message keys, each message's payload (the schemas above, inlined) with an example,
and which service sends and receives what. Every name is prefixed on the broker with the deployment's
`DOCSUM_TOPIC_PREFIX` (empty by default). It is generated with the schemas and checked by the AsyncAPI
parser (`scripts/asyncapi.sh validate`, part of `make test`).

To read it rendered, open it in AsyncAPI Studio (https://studio.asyncapi.com: paste or import the file),
or start Studio locally with the AsyncAPI CLI (npm `@asyncapi/cli`; 4.1 is the newest that runs on Node 20):
`asyncapi start studio contracts/{ASYNCAPI}`.
"""


# --- AsyncAPI -----------------------------------------------------------------------------------------

ASYNCAPI_VERSION = "3.0.0"
KAFKA_BINDING = "0.5.0"  # the version of the Kafka bindings used below
REPLICAS = 1  # ensure_topics (kafka.py) creates every topic with replication factor 1
ROOT_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@dataclass(frozen=True)
class Roles:
    """Who produces and who consumes a topic: the topic table."""

    sent_by: tuple[tuple[str, str], ...]  # (who, when): the parts of docsum (or others) that produce it
    received_by: tuple[tuple[str, str], ...]  # (who, what for): the parts of docsum that consume it
    groups: tuple[str, ...] = ()  # the consumer groups that read it
    dead_letter_groups: tuple[str, ...] = ()  # those of them that dead-letter what they cannot handle


# What each part of docsum does with a topic, in words. Who does it is found in the code (found_roles).
REDRIVES = "resume, retry and reconcile, from the state stored in PostgreSQL"
SENDS: dict[tuple[str, str], str] = {
    ("the gateway", "document-submitted"): "for every uploaded file, once its bytes are stored",
    ("the re-drives", "document-submitted"): REDRIVES,
    ("the parser", "document-parsed"): "once the document's plain text is stored",
    ("the re-drives", "document-parsed"): REDRIVES,
    ("the summarizer's admission", "chunk-created"): (
        "when the stored chunk is admitted: given its slot in the fair order between owners"
    ),
    ("the re-drives", "chunk-created"): REDRIVES,
    ("the summarizer's round scheduler", "chunk-created"): "when a chunk's next round is due",
    ("the summarizer's batch driver", "chunk-created"): (
        "when the provider's batch answered a chunk's line, or did not (the chunk is then called in realtime)"
    ),
    ("the summarizer", "chunk-summarized"): "once the chunk's summary is stored, or the chunk FAILED",
    ("the re-drives", "chunk-summarized"): REDRIVES,
    ("the parser", "document-merged"): "when the document cannot be parsed: it FAILED",
    ("the chunker", "document-merged"): "when the document's text cannot be cut into chunks: it FAILED",
    ("the merger", "document-merged"): "once the document's summary is stored, or the document FAILED",
    ("the re-drives", "document-merged"): REDRIVES,
    ("the gateway", "task-events"): "on pause, resume, retry and cancel",
    ("the summarizer's batch driver", "task-events"): "when a task's batch is submitted, gets lines done, or ends",
    ("the chunker", "task-events"): "when a task awaits its owner's approval",
    ("the parser's reading progress", "task-events"): "as each scanned page of a document is read by OCR",
    ("the merger", "task-events"): "when a task finishes",
    ("the merger's maintenance", "task-events"): "when a task expires",
    ("the merger", "task-finished"): (
        "once a task reached a final status, whoever ended it (a replay or a re-drive may publish it again, identical)"
    ),
}
PROGRESS = "appends the task's progress log, which the gateway streams to the task's clients"
RECEIVES: dict[tuple[str, str], str] = {
    ("the parser", "document-submitted"): "parses the document and stores its plain text",
    ("the chunker", "document-parsed"): "cuts the text into chunks and stores them",
    ("the summarizer", "chunk-created"): "summarizes the chunk and stores its summary",
    ("the merger", "chunk-summarized"): "merges the document's summaries once every chunk is final",
    ("the merger", "document-merged"): "finishes the task once every document is final",
    ("the merger", "task-events"): "publishes the result of a task that reached a final status on task-finished",
    **{
        ("the gateway's progress recorder", topic): PROGRESS
        for topic in ("document-submitted", "document-parsed", "chunk-created", "chunk-summarized")
    },
    ("the gateway's progress recorder", "document-merged"): PROGRESS,
    ("the gateway's progress recorder", "task-events"): PROGRESS,
}
# A topic of events.py that no part of docsum declares it sends (yet): published as sent by docsum.
UNDECLARED = (("docsum", "(no handler or sender declares this topic yet)"),)


def declarations() -> tuple[list[Handlers[Any]], list[Sender]]:
    """Every consumer group's registry and every sender, as the pipeline's plan names them: a topic's
    owner before the readers beside it (the gateway's progress recorder), each in pipeline order."""
    plan = stages()
    registries = sorted((stage.handlers for stage in plan), key=lambda registry: not registry.dead_letters)
    senders = list(dict.fromkeys(sender for stage in plan for sender in stage.senders))
    return registries, senders


def found_roles() -> dict[str, Roles]:
    """The topic table, from the declarations: ValueError when they and SENDS/RECEIVES disagree."""
    registries, senders = declarations()
    sent: set[tuple[str, str]] = set()
    received: dict[tuple[str, str], Handlers[Any]] = {}
    for registry in registries:
        for event_type in registry.receives:
            received[(registry.who, TOPIC_OF[event_type].value)] = registry
            sent |= {(registry.who, TOPIC_OF[out].value) for out in registry.emits(event_type)}
    sent |= {(sender.who, TOPIC_OF[out].value) for sender in senders for out in sender.emits}
    drift = [f"sent by {who} on {topic}, with no words in SENDS" for who, topic in sorted(sent - set(SENDS))]
    drift += [f"SENDS says {who} sends {topic}; the code does not" for who, topic in sorted(set(SENDS) - sent)]
    drift += [f"received by {w} on {t}, with no words in RECEIVES" for w, t in sorted(set(received) - set(RECEIVES))]
    drift += [f"RECEIVES says {w} receives {t}; the code does not" for w, t in sorted(set(RECEIVES) - set(received))]
    if drift:
        raise ValueError("the topic table and the code disagree:\n" + "\n".join(drift))
    roles = {}
    for topic in Topic:
        readers = [(who, r) for (who, t), r in received.items() if t == topic.value]
        roles[topic.value] = Roles(
            tuple((who, SENDS[(who, t)]) for who, t in SENDS if t == topic.value) or UNDECLARED,
            tuple((who, RECEIVES[(who, topic.value)]) for who, _ in readers),
            tuple(str(r.group) for _, r in readers),
            tuple(str(r.group) for _, r in readers if r.dead_letters),
        )
    return roles


# What a channel's description adds to its model's summary.
CHANNEL_NOTES: dict[str, str] = {
    "document-submitted": (
        "The pipeline's own topic: it takes the stored form only (the bytes already stored in PostgreSQL), as"
        " the gateway and the re-drives publish it; only the pipeline's principal may write it. Another"
        f" system publishes its documents (inline or by URI) on its own topic, `{INTAKE_TOPIC}`: a message in"
        " another form here is dead-lettered, with that reason."
    ),
    "chunk-created": (
        "A document's chunks go round the topic's partitions in turn, from one the document's id picks (chunk i"
        " to partition (crc32(document_id) + i) mod the partition count), not where their keys hash to: each"
        " member of the summarizer group gets an even share of a long document, and a chunk announced again"
        " goes where it went the first time."
    ),
}
# The topic each producer of another system publishes on (one per producer, DOCSUM_INTAKE_PRODUCERS).
INTAKE_CHANNEL = "intake"
INTAKE_ROLES = Roles(
    (("another system", "submitting its documents, inline or by URI, for the owners it may act for"),),
    (("the parser", "takes the document in (creating the task on first sight), then parses it"),),
    ("parser",),
    ("parser",),
)

EXAMPLE_DATETIME = "2026-01-15T09:30:00Z"
# Example values by field name, for the message examples (any field not here gets a value derived from
# its schema). A field that a model would refuse in a combination is left out of that model's example.
EXAMPLE_VALUES: dict[str, Any] = {
    "event_id": "0b7c1e5a9d3f4e21a6c8b2d4f0e1a3c5",
    "schema_version": 1,
    "occurred_at": EXAMPLE_DATETIME,
    "trace_id": "5e2d8c4b1a9f4d37b6e0c2a8f1d3b5e7",
    "causation_id": "9a4f2c7e1b5d4a83c0e6f8b2d4a1c3e5",
    "task_id": "3f1c2b9e-7d4a-4e8b-9c6f-2a5d1e0b8c47",
    "document_id": "c2a7e4d1-5b3f-4a9c-8e2d-6f1b0a9c3d75",
    "chunk_id": "c2a7e4d1-5b3f-4a9c-8e2d-6f1b0a9c3d75-c00003",
    "chunk_index": 3,
    "owner": "alice",
    "filename": "annual-report-2025.pdf",
    "title": "Annual reports",
    "content_type": "application/pdf",
    "blob_sha256": "f1e8bf1621c3909f835ff77b3e52c2538cdb345799c1bd2379f87e76fc59fc49",
    "size_bytes": 482113,
    "task_documents": 2,
    "content_base64": "UmV2ZW51ZSBncmV3IDEyJSBpbiAyMDI1Lgo=",
    "source_uri": "file:///srv/docsum/inbox/annual-report-2025.pdf",
    "text_chars": 23750,
    "size_level": "MEDIUM",
    "outcome": "COMPLETED",
    "status": "COMPLETED",
    "language": "en",
    "length": "standard",
    "style": "prose",
    "summary": "Revenue grew 12% in 2025, driven by the new subscription plans; costs stayed flat.",
    "updated_at": EXAMPLE_DATETIME,
    "chunks": {"done": 12, "failed": 0, "total": 12},
    "usage": {
        "prompt_tokens": 18250,
        "completion_tokens": 2410,
        "llm_calls": 14,
        "cached_calls": 2,
        "cost_usd": 0.0042,
    },
    "recovery": {"attempts": 12, "interruptions": 0, "redrives": 0, "calls_saved": 2},
}

# The headers of a dead letter (consumer.py's _dead_letter): the values are UTF-8 text.
DEAD_LETTER_HEADERS: dict[str, str] = {
    "error": "Why the message could not be handled: the exception (at most 4,000 characters).",
    "source-topic": "The topic the message was read from (with the deployment's prefix).",
    "source-partition": "Its partition, in decimal.",
    "source-offset": "Its offset in that partition, in decimal.",
    "service": "The service that gave up on it.",
}


def project_version() -> str:
    return str(tomllib.loads(ROOT_PYPROJECT.read_text())["project"]["version"])


def _sample(name: str, node: dict[str, Any], defs: dict[str, Any], table: bool = True) -> Any:
    """A value for the property `name` with the schema `node`: the table's (unless `table` is off),
    else one its schema allows (null where it allows null)."""
    if table and name in EXAMPLE_VALUES:
        return EXAMPLE_VALUES[name]
    if "$ref" in node:
        return _sample(name, defs[node["$ref"].rsplit("/", 1)[-1]], defs, table)
    for key in ("const", "default"):
        if key in node:
            return node[key]
    if node.get("enum"):
        return node["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key, [])
        if any(b.get("type") == "null" for b in branches):
            return None
        if branches:
            return _sample(name, branches[0], defs, table)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object":
        properties = node.get("properties", {})
        return {k: _sample(k, properties[k], defs, table) for k in node.get("required", []) if k in properties}
    if kind == "array":
        return [_sample(name, node.get("items", {}), defs, table)] * max(1, node.get("minItems", 1))
    if kind == "string":
        return EXAMPLE_DATETIME if node.get("format") == "date-time" else f"example-{name.replace('_', '-')}"
    if kind in ("integer", "number"):
        return max(1, node.get("minimum", 1))
    if kind == "boolean":
        return False
    return None


def _errors(model: type[BaseModel], values: dict[str, Any]) -> int:
    try:
        model.model_validate(values)
    except ValidationError as exc:
        return max(1, exc.error_count())
    return 0


def example(topic: Topic) -> dict[str, Any]:
    """A realistic value of a message on `topic`, with the fields it sets (the defaults left out).

    Built from the model: its required fields, then each optional field that EXAMPLE_VALUES names,
    kept unless it makes the model refuse the event (e.g. a second form of a one-of-several choice).
    Should the table's values make a required field's nested value wrong, the schema's are used there.
    """
    model = EVENT_TYPES[topic]
    body = model.model_json_schema(mode="validation")
    defs, properties = body.get("$defs", {}), body.get("properties", {})
    required = [name for name in properties if name in set(body.get("required", []))]
    for table in (True, False):
        # The table's value for a field itself; for what a field nests, the table's only at first.
        values = {n: EXAMPLE_VALUES.get(n, _sample(n, properties[n], defs, table)) for n in required}
        for name in properties:
            if name in required or name not in EXAMPLE_VALUES:
                continue
            candidate = {**values, name: EXAMPLE_VALUES[name]}
            # Kept when the model accepts it as well as before: a valid example stays valid, and an
            # invalid one (a field that needs a companion: one form of a choice) may take what it lacks.
            if _errors(model, candidate) <= _errors(model, values):
                values = candidate
        try:
            return model.model_validate(values).model_dump(mode="json", exclude_unset=True)
        except ValidationError as exc:
            error = exc
    raise ValueError(f"no example of {model.__name__} from EXAMPLE_VALUES in contracts.py: {error}") from error


def _dead_letter_example(topic: Topic) -> tuple[str, str]:
    """A value that the consumers of `topic` refuse, and the error they give: the example without its
    key field (or, should the model accept that, the example cut short)."""
    value = example(topic)
    text = json.dumps(value, ensure_ascii=False)
    keyless = json.dumps({k: v for k, v in value.items() if k != EVENT_TYPES[topic].KEY_FIELD}, ensure_ascii=False)
    for raw in (keyless, text[: len(text) // 2]):
        try:
            decode(topic, raw.encode())
        except ValidationError as exc:
            lines = "".join(traceback.format_exception_only(exc)).strip().splitlines()
            return raw, "\n".join(line for line in lines if "errors.pydantic.dev" not in line)  # no pydantic version
    raise AssertionError(f"{topic}: a truncated event was accepted")


def _hoist(body: dict[str, Any], shared: dict[str, Any], owner: str) -> dict[str, Any]:
    """`body` with its $defs moved into `shared` (components.schemas) and its references pointed there.

    A definition that another schema already put there under the same name with other content is
    renamed `<owner>.<name>`.
    """
    body = copy.deepcopy(body)
    defs: dict[str, Any] = body.pop("$defs", {})
    targets = {name: name for name in defs}

    def point(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: f"#/components/schemas/{targets[v[8:]]}" if k == "$ref" and v.startswith("#/$defs/") else point(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [point(v) for v in node]
        return node

    for name, definition in defs.items():
        if name in shared and shared[name] != point(definition):
            targets[name] = f"{owner}.{name}"
    for name, definition in defs.items():
        shared[targets[name]] = point(definition)
    return dict(point(body))


def _ref(*path: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)}


def _key_binding(key: str, what: str) -> dict[str, Any]:
    return {
        "key": {"type": "string", "description": f"{what} (UTF-8)."},
        "bindingVersion": KAFKA_BINDING,
    }


def _channel_binding(address: str, partitions: dict[str, int]) -> dict[str, Any]:
    return {
        "kafka": {
            "topic": address,
            "partitions": partitions[address],
            "replicas": REPLICAS,
            "bindingVersion": KAFKA_BINDING,
        }
    }


def _names(who: Sequence[tuple[str, str]]) -> str:
    names = [name for name, _ in who]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _operation(
    action: str, channel: str, who: Sequence[tuple[str, str]], groups: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`action` (send or receive) on `channel`, by `who` ((service, when or what for) pairs)."""
    verb = "Sent" if action == "send" else "Received"
    lines = [f"- {name}: {what}" for name, what in who]
    operation: dict[str, Any] = {
        "action": action,
        "channel": _ref("channels", channel),
        "summary": f"{verb} by {_names(who)}.",
        "description": f"{verb} by\n\n" + "\n".join(lines),
        "messages": [_ref("channels", channel, "messages", channel)],
    }
    if groups:
        operation["bindings"] = {
            "kafka": {
                "groupId": {
                    "type": "string",
                    "enum": [f"docsum-{g}" for g in groups],
                    "description": "The consumer group, after the deployment's DOCSUM_TOPIC_PREFIX.",
                },
                "bindingVersion": KAFKA_BINDING,
            }
        }
    return operation


def env(field: str) -> str:
    """The environment variable of a setting (KeyError for a setting that does not exist)."""
    Settings.model_fields[field]
    return env_name(Settings, field)


_SASL = f"`{env('kafka_sasl_mechanism')}`={{}} with `{env('kafka_sasl_username')}` and `{env('kafka_sasl_password')}`."
# What a client of the secured broker may authenticate with: each as docsum's settings name it.
SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "scramSha512": {"type": "scramSha512", "description": "SASL/SCRAM-SHA-512: " + _SASL.format("SCRAM-SHA-512")},
    "scramSha256": {"type": "scramSha256", "description": "SASL/SCRAM-SHA-256: " + _SASL.format("SCRAM-SHA-256")},
    "plain": {
        "type": "plain",
        "description": "SASL/PLAIN (the password travels as it is: use SASL_SSL): " + _SASL.format("PLAIN"),
    },
    "clientCertificate": {
        "type": "X509",
        "description": (
            f"TLS with a client certificate: `{env('kafka_security_protocol')}`=SSL with"
            f" `{env('kafka_ssl_certfile')}` and `{env('kafka_ssl_keyfile')}`."
        ),
    },
}


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every topic, its dead-letter topic and what docsum does with them."""
    partitions = topic_partitions(Settings.model_construct())  # the defaults: no prefix, no environment
    table = found_roles()
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    schemas["DeadLetterHeaders"] = {
        "type": "object",
        "description": "The headers a dead letter carries besides its original key and value.",
        "required": list(DEAD_LETTER_HEADERS),
        "properties": {name: {"type": "string", "description": text} for name, text in DEAD_LETTER_HEADERS.items()},
    }
    for topic in Topic:
        model = EVENT_TYPES[topic]
        name, key = topic.value, model.KEY_FIELD
        roles = table[name]
        body = {k: v for k, v in schema(topic).items() if k not in ("$schema", "$id")}
        schemas[model.__name__] = _hoist(body, schemas, model.__name__)
        summary = (model.__doc__ or name).strip().splitlines()[0]
        messages[name] = {
            "name": model.__name__,
            "title": model.__name__,
            "summary": summary,
            "contentType": "application/json",
            "correlationId": _ref("components", "correlationIds", "trace"),
            "payload": _ref("components", "schemas", model.__name__),
            "bindings": {"kafka": _key_binding(key, f"The event's `{key}`")},
            "examples": [
                {"name": f"{name}-example", "summary": f"A {model.__name__} event.", "payload": example(topic)}
            ],
        }
        prefixed = "On the broker its name starts with the deployment's `DOCSUM_TOPIC_PREFIX` (empty by default)."
        channels[name] = {
            "address": name,
            "title": name,
            "description": f"{summary}\n\nMessage key: `{key}`. {prefixed}"
            + (f"\n\n{CHANNEL_NOTES[name]}" if name in CHANNEL_NOTES else ""),
            "messages": {name: _ref("components", "messages", name)},
            "bindings": _channel_binding(name, partitions),
        }
        for action, who in (("send", roles.sent_by), ("receive", roles.received_by)):
            if who:
                operations[f"{action}-{name}"] = _operation(action, name, who, roles.groups * (action == "receive"))
        dlq = name + DLQ_SUFFIX
        raw, error = _dead_letter_example(topic)
        consumer = roles.dead_letter_groups[0] if roles.dead_letter_groups else "consumer"
        messages[dlq] = {
            "name": f"{model.__name__}DeadLetter",
            "title": f"{name} dead letter",
            "summary": f"A message of {name} that its consumer could not handle, with the reason.",
            "contentType": "application/octet-stream",
            "headers": _ref("components", "schemas", "DeadLetterHeaders"),
            "payload": {
                "description": (
                    f"The original value, byte for byte: usually JSON meant as a {model.__name__}, but it"
                    " may be anything a producer wrote on the topic."
                )
            },
            "bindings": {"kafka": _key_binding(key, f"The original message's key: normally the event's `{key}`")},
            "examples": [
                {
                    "name": f"{dlq}-example",
                    "summary": f"An event its {consumer} refused, with the reason.",
                    "headers": {
                        "error": error,
                        "source-topic": name,
                        "source-partition": "0",
                        "source-offset": "1187",
                        "service": consumer,
                    },
                    "payload": raw,
                }
            ],
        }
        channels[dlq] = {
            "address": dlq,
            "title": dlq,
            "description": (
                f"Dead letters of {name}: a message that its consumer could not decode, or kept failing to"
                " handle after its retries, goes here with the reason in its headers, so that it never blocks"
                f" the topic. Message key: the original key. {prefixed}"
                + (
                    ""
                    if roles.dead_letter_groups
                    else "\n\nNo docsum consumer group dead-letters this topic: nothing of docsum writes here."
                )
            ),
            "messages": {dlq: _ref("components", "messages", dlq)},
            "bindings": _channel_binding(dlq, partitions),
        }
        if roles.dead_letter_groups:  # a reader beside the topic's owner skips what it cannot take
            why = "gives up on a message it cannot decode, or keeps failing to handle; operators read these"
            operations[f"send-{dlq}"] = _operation("send", dlq, [(f"the {g}", why) for g in roles.dead_letter_groups])

    _intake_channels(channels, operations, partitions)

    description = (
        "docsum summarizes batches of documents with an LLM: the gateway takes uploads, and the parser,"
        " chunker, summarizer and merger pass the work on over these Kafka topics, each handling its"
        " events idempotently against the state stored in PostgreSQL (Kafka carries intents, never"
        " document bytes or texts).\n\n"
        "Every event is JSON and carries the same envelope: `event_id`, `schema_version`, `occurred_at`,"
        " `task_id`, `trace_id` (one per submission, copied to every event it causes) and `causation_id`"
        " (the `event_id` of the event that caused it; null for a root event). Consumers ignore unknown"
        " properties, so a new optional property is a compatible change; `schema_version` is raised only"
        " for a change that older consumers cannot read.\n\n"
        "Every topic and consumer group name is prefixed with the deployment's `DOCSUM_TOPIC_PREFIX`"
        " (empty by default), so that several deployments can share one cluster.\n\n"
        "Generated from shared/docsum_shared/events.py and the handlers and senders the services declare, by"
        " contracts/generate.py (`make contracts`): do not edit."
    )
    bootstrap = {
        "host": {
            "default": Settings.model_fields["kafka_bootstrap_servers"].default,
            "description": "host:port of a bootstrap broker (KAFKA_BOOTSTRAP_SERVERS).",
        }
    }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "id": "urn:docsum",
        "info": {
            "title": "docsum",
            "version": project_version(),
            "description": description,
        },
        "defaultContentType": "application/json",
        "servers": {
            "kafka": {
                "host": "{host}",
                "protocol": "kafka",
                "title": "Kafka (plaintext)",
                "description": (
                    f"The cluster docsum runs on, without authentication (`{env('kafka_security_protocol')}`"
                    " PLAINTEXT, the default; `make up` starts one)."
                ),
                "variables": bootstrap,
            },
            "kafka-secured": {
                "host": "{host}",
                "protocol": "kafka-secure",
                "title": "Kafka (SASL or TLS)",
                "description": (
                    "The same cluster behind authentication: SASL (SASL_PLAINTEXT, or SASL_SSL over TLS) with"
                    " one of these mechanisms, or TLS with a client certificate (SSL). Every client of docsum"
                    f" takes them from `{env('kafka_security_protocol')}`, `{env('kafka_sasl_mechanism')}`,"
                    f" `{env('kafka_sasl_username')}`, `{env('kafka_sasl_password')}` and `{env('kafka_ssl_cafile')}`;"
                    " the broker's ACLs decide which topics and groups a principal may use (the README's"
                    ' "Kafka security and ACLs" lists them).'
                ),
                "variables": bootstrap,
                "security": [_ref("components", "securitySchemes", name) for name in SECURITY_SCHEMES],
            },
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas,
            "messages": messages,
            "securitySchemes": SECURITY_SCHEMES,
            "correlationIds": {
                "trace": {
                    "description": "One id per submission, copied to every event it causes.",
                    "location": "$message.payload#/trace_id",
                }
            },
        },
    }


def _intake_channels(channels: dict[str, Any], operations: dict[str, Any], partitions: dict[str, int]) -> None:
    """`intake.{producer}` (and its dead letters): one topic per producer of another system, carrying the
    document-submitted message in its inline or URI form."""
    submitted = Topic.DOCUMENT_SUBMITTED.value
    parameter = {
        "producer": {
            "description": (
                'The producer, as DOCSUM_INTAKE_PRODUCERS names it (\'{"crm": ["alice", "bob"]}\': the'
                " producer crm, acting for alice and bob). The broker's ACLs let only that producer's principal"
                " write its topic, so the topic tells the parser who published a message."
            ),
            "examples": ["crm"],
        }
    }
    binding = {"kafka": {"partitions": partitions[submitted], "replicas": REPLICAS, "bindingVersion": KAFKA_BINDING}}
    channels[INTAKE_CHANNEL] = {
        "address": INTAKE_TOPIC,
        "title": INTAKE_TOPIC,
        "description": (
            "Another system's documents: the document-submitted message, inline (`content_base64`) or by URI"
            " (`source_uri`), never the stored form. The parser believes `owner` only for the owners the"
            " producer may act for (DOCSUM_INTAKE_PRODUCERS): a message naming another owner is"
            " dead-lettered, with the reason. Message key: `document_id`. On the broker its name starts with"
            " the deployment's `DOCSUM_TOPIC_PREFIX`; the parser creates it at start for every configured"
            " producer."
        ),
        "parameters": parameter,
        "messages": {INTAKE_CHANNEL: _ref("components", "messages", submitted)},
        "bindings": binding,
    }
    dlq = INTAKE_CHANNEL + DLQ_SUFFIX
    channels[dlq] = {
        "address": INTAKE_TOPIC + DLQ_SUFFIX,
        "title": INTAKE_TOPIC + DLQ_SUFFIX,
        "description": (
            f"Dead letters of {INTAKE_TOPIC}: a message the parser refused (another owner, another task's id,"
            " a count that disagrees...), with the reason in its headers. Message key: the original key."
        ),
        "parameters": parameter,
        "messages": {dlq: _ref("components", "messages", submitted + DLQ_SUFFIX)},
        "bindings": {"kafka": {**binding["kafka"], "partitions": 1}},
    }
    operations[f"send-{INTAKE_CHANNEL}"] = _operation("send", INTAKE_CHANNEL, INTAKE_ROLES.sent_by)
    operations[f"receive-{INTAKE_CHANNEL}"] = _operation(
        "receive", INTAKE_CHANNEL, INTAKE_ROLES.received_by, INTAKE_ROLES.groups
    )
    why = "gives up on a message it cannot decode or refuses; operators and the producer read these"
    operations[f"send-{dlq}"] = _operation("send", dlq, [("the parser", why)])


class _Dumper(yaml.SafeDumper):
    """Block style, text with newlines as literal blocks, and no anchors (the file is read by people)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    # Text over several lines as a block: folded (wrapped) when it has long lines, unless a line starts
    # with a space (folding would change it) or is an item of a list; literal otherwise.
    style = None
    if "\n" in text:
        lines = text.splitlines()
        kept = any(line[:1].isspace() or line.startswith("- ") for line in lines)  # indented text, lists
        folded = any(len(line) > 100 for line in lines) and not kept
        style = ">" if folded else "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def _dump_yaml(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120, default_flow_style=False)


def render() -> dict[str, str]:
    """Every file of the contracts directory, by name, as it should read."""
    files = {file_name(topic): _dump(schema(topic)) for topic in Topic}
    files[ASYNCAPI] = _dump_yaml(asyncapi())
    files[README] = _readme()
    return files


def stale(directory: Path) -> list[str]:
    """What differs between `directory` and the models: missing, outdated and extra files."""
    expected = render()
    present = {p.name for p in directory.iterdir() if p.is_file()} if directory.is_dir() else set()
    present.discard(Path(__file__).name)  # this generator lives beside what it writes
    problems = []
    for name, text in expected.items():
        if name not in present:
            problems.append(f"{name}: missing")
        elif (directory / name).read_bytes() != text.encode():
            problems.append(f"{name}: out of date")
    problems += [f"{name}: not generated from any topic" for name in sorted(present - expected.keys())]
    return problems


def write(directory: Path) -> list[str]:
    """Bring `directory` up to date; returns the names written or removed."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = render()
    changed = []
    for name, text in expected.items():
        path = directory / name
        if not path.is_file() or path.read_bytes() != text.encode():
            path.write_bytes(text.encode())
            changed.append(name)
    for path in sorted(directory.glob("*.schema.json")):  # a topic that no longer exists
        if path.name not in expected:
            path.unlink()
            changed.append(path.name)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contracts/generate.py", description="Write or check contracts/.")
    parser.add_argument("--check", action="store_true", help="only check that the directory is up to date")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the contracts directory (default: contracts)")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.dir)
        for problem in problems:
            print(f"{args.dir}/{problem}", file=sys.stderr)
        if problems:
            print(f"{args.dir}/ does not match the event models: {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    changed = write(args.dir)
    print(f"{args.dir}/: {', '.join(changed) if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
