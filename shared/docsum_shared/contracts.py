"""The event contract as JSON Schema: one file per Kafka topic, generated from the models in events.py.

    python -m docsum_shared.contracts            # (re)write contracts/ (what `make contracts` runs)
    python -m docsum_shared.contracts --check    # exit 1 if contracts/ differs from the models

Each schema describes a topic's message value in validation mode, i.e. what consumers accept (fields
with defaults are optional; unknown fields are ignored), as JSON Schema draft 2020-12. Besides the
standard keywords it names the topic (`x-kafka-topic`) and the field whose value is the message key
(`x-kafka-key`). The output is deterministic: sorted keys, two-space indent, a trailing newline.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .events import EVENT_TYPES, Topic

DRAFT = "https://json-schema.org/draft/2020-12/schema"
README = "README.md"
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
`shared/docsum_shared/contracts.py`: do not edit these files, change the models and regenerate with

    make contracts

(`python -m docsum_shared.contracts`). `make lint` and `tests/unit/test_contracts.py` fail while
this copy differs from the models (`python -m docsum_shared.contracts --check`).

Compatibility: consumers ignore unknown properties, so a new optional property is a compatible
change; `schema_version` is raised only for a change that older consumers cannot read. Each schema
names its topic (`x-kafka-topic`) and the property whose value is the message key (`x-kafka-key`).

Every event carries the same envelope: `event_id`, `schema_version`, `occurred_at`, `task_id`,
`trace_id` (one per submission, copied to every event it causes) and `causation_id` (the `event_id`
of the event that caused it; null for a root event such as a submission or a re-drive).

| Topic | Model | Key | Schema |
|---|---|---|---|
{rows}
"""


def render() -> dict[str, str]:
    """Every file of the contracts directory, by name, as it should read."""
    files = {file_name(topic): _dump(schema(topic)) for topic in Topic}
    files[README] = _readme()
    return files


def stale(directory: Path) -> list[str]:
    """What differs between `directory` and the models: missing, outdated and extra files."""
    expected = render()
    present = {p.name for p in directory.iterdir() if p.is_file()} if directory.is_dir() else set()
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
    parser = argparse.ArgumentParser(prog="python -m docsum_shared.contracts", description="Write or check contracts/.")
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
