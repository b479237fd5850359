"""One task is one trace: from the gateway's request through the four workers, over Kafka's
`traceparent` headers; and each service's JSON log lines name the task and the trace.

The services are processes of their own: each writes its finished spans to a file (DOCSUM_TRACE_FILE,
one JSON line per span, telemetry.JsonLinesExporter), which the test reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from docsum_shared.events import Topic
from tests.documents import english_prose
from tests.integration.conftest import SERVICES, StackFactory
from tests.integration.helpers import eventually, read_topics, submit, task_of, txt, wait_for_task

pytestmark = pytest.mark.integration

# What each worker consumes on the way from a submission to its task's end: a span for each.
HANDLED = {
    Topic.DOCUMENT_SUBMITTED: "parser",
    Topic.DOCUMENT_PARSED: "chunker",
    Topic.CHUNK_CREATED: "summarizer",
    Topic.CHUNK_SUMMARIZED: "merger",
    Topic.DOCUMENT_MERGED: "merger",
}


def _spans(files: dict[str, Path]) -> list[dict[str, Any]]:
    """Every span written so far, with the service whose file it is in (a line still being written is
    skipped: the next read has it)."""
    found = []
    for service, path in files.items():
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                span = json.loads(line)
            except ValueError:
                continue
            span["service"] = service
            found.append(span)
    return found


def _hex(value: str | None) -> str | None:
    return value.removeprefix("0x") if value else None


def _trace(spans: list[dict[str, Any]], task_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The trace id of the parser's span for the task's submission, and every span of that trace."""
    trace_id = next(
        (
            _hex(s["context"]["trace_id"])
            for s in spans
            if s["name"] == f"process {Topic.DOCUMENT_SUBMITTED}" and s["attributes"].get("docsum.task_id") == task_id
        ),
        None,
    )
    return trace_id, [s for s in spans if _hex(s["context"]["trace_id"]) == trace_id]


def _complete(trace: list[dict[str, Any]], task_id: str) -> bool:
    """Every step's span is there, and every span's parent (the trace has all its spans)."""
    handled = {(s["service"], s["name"]) for s in trace if s["attributes"].get("docsum.task_id") == task_id}
    ids = {_hex(s["context"]["span_id"]) for s in trace}
    return all((service, f"process {topic}") in handled for topic, service in HANDLED.items()) and all(
        _hex(s["parent_id"]) in ids for s in trace if s["parent_id"]
    )


async def test_one_task_is_one_trace_across_the_five_services(make_stack: StackFactory, tmp_path: Path) -> None:
    files = {name: tmp_path / f"{name}.spans.jsonl" for name in SERVICES}
    stack = make_stack(services=())
    for name in SERVICES:
        stack.start(name, DOCSUM_TRACE_FILE=str(files[name]), DOCSUM_LOG_FORMAT="json")
    stack.wait_ready()
    async with stack.client() as client:
        task_id = await submit(client, [txt("traced.txt", english_prose(3_000, seed=77))])
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED", task

    def traced() -> list[dict[str, Any]] | None:
        trace_id, trace = _trace(_spans(files), task_id)
        return trace if trace_id and _complete(trace, task_id) else None

    def seen() -> str:
        so_far = sorted({(s["service"], s["name"]) for s in _trace(_spans(files), task_id)[1]})
        return f"every span of the task's trace; so far: {so_far}"

    trace = await eventually(traced, timeout=30, interval=0.5, message=seen, stack=stack)
    trace_id = _hex(trace[0]["context"]["trace_id"])

    # One trace, all five services, one root: the gateway's span for the request that submitted the task.
    assert {s["service"] for s in trace} == set(SERVICES)
    (root,) = [s for s in trace if not s["parent_id"]]
    assert root["service"] == "gateway" and root["kind"] == "SpanKind.SERVER" and root["name"].startswith("POST")
    assert root["attributes"]["docsum.task_id"] == task_id
    assert {s["resource"]["attributes"]["service.name"] for s in trace} == {f"docsum-{name}" for name in SERVICES}
    # The workers' spans for the task (none of another trace): parser -> chunker -> summarizer -> merger.
    by_id = {_hex(s["context"]["span_id"]): s for s in trace}
    chain = {s["name"]: s for s in trace if s["name"].startswith("process ")}

    def ancestors(span: dict[str, Any]) -> list[str]:
        names = []
        while span["parent_id"]:
            span = by_id[_hex(span["parent_id"])]
            names.append(span["name"])
        return names

    assert root["name"] in ancestors(chain[f"process {Topic.DOCUMENT_SUBMITTED}"])
    assert f"process {Topic.DOCUMENT_SUBMITTED}" in ancestors(chain[f"process {Topic.DOCUMENT_PARSED}"])
    assert f"process {Topic.DOCUMENT_PARSED}" in ancestors(chain[f"process {Topic.CHUNK_CREATED}"])
    assert f"process {Topic.CHUNK_CREATED}" in ancestors(chain[f"process {Topic.CHUNK_SUMMARIZED}"])
    assert f"process {Topic.CHUNK_SUMMARIZED}" in ancestors(chain[f"process {Topic.DOCUMENT_MERGED}"])

    # On the wire: every message of the task carries one traceparent of this trace, and its envelope's
    # trace_id is the same trace (task-finished's envelope has none: it is derived from the task).
    prefix = stack.env["DOCSUM_TOPIC_PREFIX"]
    records = [r for r in await read_topics(stack.env, [prefix + t for t in Topic]) if task_of(r) == task_id]
    assert {r.topic.removeprefix(prefix) for r in records} >= set(HANDLED)
    for record in records:
        parents = [v.decode() for k, v in record.headers if k == "traceparent"]
        assert len(parents) == 1, (record.topic, record.headers)
        version, trace_hex, span_hex, flags = parents[0].split("-")
        assert (version, trace_hex) == ("00", trace_id) and len(span_hex) == 16, parents
        assert int(flags, 16) & 1, parents  # sampled
        if not record.topic.endswith(Topic.TASK_FINISHED):
            assert json.loads(record.value)["trace_id"] == trace_id, record.topic

    # Logs: JSON lines; each worker's lines about the task name it, its trace and the span they are in.
    for name in ("parser", "chunker", "summarizer", "merger", "gateway"):
        text = (stack.logs / f"{name}.log").read_text()
        assert all(key not in text for key in stack.keys.values())
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert lines and all({"time", "level", "logger", "message", "service"} <= line.keys() for line in lines)
        about = [line for line in lines if line.get("task_id") == task_id]
        assert about, f"no log line of {name} names the task"
        if name != "gateway":
            assert all(line["trace_id"] == trace_id and "span_id" in line for line in about), about
        else:  # its access lines name the task of the URL (the client polled GET /v1/tasks/<id>)
            assert any(line["logger"] == "uvicorn.access" for line in about), about
