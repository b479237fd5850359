"""contracts/asyncapi.yaml is a valid AsyncAPI 3.0 document as the AsyncAPI parser reads it.

The parser (npm @asyncapi/parser, pinned in scripts/asyncapi/package-lock.json) runs in Node through
scripts/asyncapi.sh, which installs it into the state dir on first use. It checks the document
against the AsyncAPI schema (bindings included), resolves every reference, and applies its own rules
(an operation's messages must belong to its channel...). Needs Node.js, not the broker.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from docsum_shared import contracts
from docsum_shared.events import Topic
from tests import contract_changes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "asyncapi.sh"


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "validate", str(path)], capture_output=True, text=True, timeout=240)


def _read(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    assert " error:" not in result.stderr and " warning:" not in result.stderr, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_checked_in_document_is_valid() -> None:
    seen = _read(_validate(ROOT / "contracts" / contracts.ASYNCAPI))
    assert (seen["asyncapi"], seen["title"], seen["version"]) == ("3.0.0", "docsum", contracts.project_version())
    addresses = {t.value for t in Topic} | {t.value + ".dlq" for t in Topic}
    assert seen["channels"] == {a: a for a in addresses}
    assert sorted(seen["messages"]) == sorted(addresses)
    assert {f"receive-{t.value}" for t in Topic} - set(seen["operations"]) == set()  # docsum reads them all
    assert seen["warnings"] == 0


def test_a_broken_document_is_refused(tmp_path: Path) -> None:
    document = contracts.asyncapi()
    document["channels"]["document-parsed"]["bindings"]["kafka"]["partitions"] = "six"
    document["operations"]["send-chunk-created"]["channel"] = {"$ref": "#/channels/chunk-deleted"}
    broken = tmp_path / "asyncapi.yaml"
    broken.write_text(yaml.safe_dump(document, sort_keys=False))
    result = _validate(broken)
    assert result.returncode == 1
    assert "/channels/document-parsed/bindings/kafka/partitions" in result.stderr
    assert "'#/channels/chunk-deleted' does not exist" in result.stderr


def test_a_new_topic_and_a_one_of_payload_stay_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = contract_changes.extend(monkeypatch)
    assert contracts.main(["--dir", str(tmp_path)]) == 0
    seen = _read(_validate(tmp_path / contracts.ASYNCAPI))
    assert seen["channels"]["task-finished"] == "task-finished"
    assert seen["operations"]["send-task-finished"] == "send"
    assert len(seen["channels"]) == 2 * len(topic)
