"""contracts/asyncapi.yaml is a valid AsyncAPI 3.0 document as the AsyncAPI parser reads it.

The parser (npm @asyncapi/parser, pinned in scripts/asyncapi/package-lock.json) runs in Node through
scripts/asyncapi.sh, which installs it into the state dir on first use. It checks a document against
the AsyncAPI schema (bindings included), resolves every reference, and applies its own rules (an
operation's messages must belong to its channel...). One run reads three documents: the checked-in
one, a broken one (so that the check is seen to fail), and the one the models would give after a
change (a new topic, a oneOf payload). Needs Node.js, not the broker.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from docsum_shared.events import Topic
from tests import contract_changes, generators

contracts = generators.contracts()

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "asyncapi.sh"


def _broken() -> dict[str, Any]:
    document = contracts.asyncapi()
    document["channels"]["document-parsed"]["bindings"]["kafka"]["partitions"] = "six"
    document["operations"]["send-chunk-created"]["channel"] = {"$ref": "#/channels/chunk-deleted"}
    return document


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[dict[str, Any], list[str]]]]:
    """What the parser said of each document: its JSON line and its diagnostics, by name."""
    directory = tmp_path_factory.mktemp("asyncapi")
    broken = directory / "broken.yaml"
    broken.write_text(yaml.safe_dump(_broken(), sort_keys=False))
    with pytest.MonkeyPatch.context() as monkeypatch:
        topics = contract_changes.extend(monkeypatch)
        changed = directory / "changed"
        assert contracts.main(["--dir", str(changed)]) == 0
        assert "task-archived" in {t.value for t in topics}
    files = {
        "checked-in": ROOT / "contracts" / contracts.ASYNCAPI,
        "broken": broken,
        "changed": changed / "asyncapi.yaml",
    }
    result = subprocess.run(
        [str(SCRIPT), "validate", *map(str, files.values())], capture_output=True, text=True, timeout=300
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [line["file"] for line in lines] == list(map(str, files.values())), result.stderr
    assert result.returncode == 1  # the broken one
    yield {
        name: (line, [d for d in result.stderr.splitlines() if d.startswith(f"{path}:")])
        for (name, path), line in zip(files.items(), lines, strict=True)
    }


def test_the_checked_in_document_is_valid(verdicts: dict[str, tuple[dict[str, Any], list[str]]]) -> None:
    seen, diagnostics = verdicts["checked-in"]
    assert seen["valid"] and diagnostics == [], diagnostics  # no error, no warning
    assert (seen["asyncapi"], seen["title"], seen["version"]) == ("3.0.0", "docsum", contracts.project_version())
    addresses = {t.value for t in Topic} | {t.value + ".dlq" for t in Topic}
    # and each producer's own topic, with its dead letters (a channel parameter: the producer)
    intake = {"intake": "intake.{producer}", "intake.dlq": "intake.{producer}.dlq"}
    assert seen["channels"] == {**{a: a for a in addresses}, **intake}
    assert sorted(seen["messages"]) == sorted(addresses)
    assert {f"send-{t.value}" for t in Topic} <= set(seen["operations"])  # docsum writes every topic


def test_a_broken_document_is_refused(verdicts: dict[str, tuple[dict[str, Any], list[str]]]) -> None:
    seen, diagnostics = verdicts["broken"]
    assert not seen["valid"] and seen["errors"] >= 2
    text = "\n".join(diagnostics)
    assert "/channels/document-parsed/bindings/kafka/partitions" in text
    assert "'#/channels/chunk-deleted' does not exist" in text


def test_a_new_topic_and_a_one_of_payload_stay_valid(verdicts: dict[str, tuple[dict[str, Any], list[str]]]) -> None:
    seen, diagnostics = verdicts["changed"]
    assert seen["valid"] and diagnostics == [], diagnostics
    assert seen["channels"]["task-archived"] == "task-archived"
    assert seen["operations"]["send-task-archived"] == "send"
    assert len(seen["channels"]) == 2 * (len(Topic) + 1) + 2  # every topic, the new one, the intake channels
