"""Log lines carry the ids of what is being handled (text and JSON) and never a credential; the trace
context goes out in a `traceparent` header and comes back as the parent of the consumer's span."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from docsum_gateway import logs as gateway_logs
from docsum_shared import logs, telemetry

TASK, DOCUMENT, CHUNK = "0b6f3c1e-6a59-4d2b-9a57-3f1f2b0c9d11", "doc-1", "chunk-7"


def _capture(handler: logging.Handler) -> io.StringIO:
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    handler.setStream(out)
    return out


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of the test's own whose records reach only the handler the test gives it."""
    log = logging.getLogger(f"docsum.test.{id(object())}")
    log.propagate, log.level = False, logging.INFO
    yield log
    log.handlers.clear()


def _json_lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_json_line_carries_the_ids_bound_in_its_context(logger: logging.Logger) -> None:
    handler = logs.handler("summarizer", "json")
    out = _capture(handler)
    logger.addHandler(handler)

    with logs.bound(task_id=TASK, document_id=DOCUMENT, chunk_id=CHUNK, trace_id="ab" * 16):
        logger.info("chunk %d summarized", 7)
        with logs.bound(chunk_id=None):  # None adds nothing and removes nothing
            logger.warning("still inside")
    logger.info("outside")

    inside, nested, outside = _json_lines(out)
    assert inside["message"] == "chunk 7 summarized"
    assert inside["level"] == "INFO" and inside["logger"] == logger.name and inside["service"] == "summarizer"
    assert inside["time"].endswith("Z") and "T" in inside["time"]
    assert (inside["task_id"], inside["document_id"], inside["chunk_id"]) == (TASK, DOCUMENT, CHUNK)
    assert inside["trace_id"] == "ab" * 16
    assert nested["chunk_id"] == CHUNK and nested["level"] == "WARNING"
    assert not {"task_id", "document_id", "chunk_id", "trace_id"} & outside.keys()
    assert outside["service"] == "summarizer"


def test_a_json_line_keeps_a_traceback_and_an_extra_id(logger: logging.Logger) -> None:
    handler = logs.handler("merger", "json")
    out = _capture(handler)
    logger.addHandler(handler)
    with logs.bound(task_id=TASK):
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("merge failed", extra={"document_id": DOCUMENT})
    (line,) = _json_lines(out)
    assert line["task_id"] == TASK and line["document_id"] == DOCUMENT
    assert "ValueError: boom" in line["exc_info"]


def test_a_text_line_names_the_ids_after_the_message(logger: logging.Logger) -> None:
    handler = logs.handler("parser", "text")
    out = _capture(handler)
    logger.addHandler(handler)
    with logs.bound(task_id=TASK, document_id=DOCUMENT):
        logger.info("parsed")
    logger.info("idle")
    parsed, idle = out.getvalue().splitlines()
    assert parsed.endswith(f"parsed [task_id={TASK} document_id={DOCUMENT}]")
    assert idle.endswith(": idle")


def test_the_gateways_json_lines_never_show_a_key_and_name_the_task_of_a_url() -> None:
    key = "k3y-" + "s" * 30
    root, access = logging.getLogger(), logging.getLogger("uvicorn.access")
    saved = root.handlers[:], root.level
    # uvicorn's loggers as the gateway's process has them (log_config=None): another test's in-process
    # uvicorn may have given them handlers of their own that do not propagate.
    uvicorn_loggers = [logging.getLogger("uvicorn"), access]
    saved_uvicorn = [(lg.handlers[:], lg.level, lg.propagate) for lg in uvicorn_loggers]
    for lg in uvicorn_loggers:
        lg.handlers[:], lg.level, lg.propagate = [], logging.NOTSET, True
    redact = gateway_logs.configure(secrets=[key], log_format="json")
    try:
        out = _capture(root.handlers[0])
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", f"/v1/tasks/{TASK}?token={key}", "1.1", 200)
        logging.getLogger("docsum_gateway.test").info("Authorization: Bearer %s", "other-secret-token")
        line, bearer = _json_lines(out)
    finally:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).removeFilter(redact)
        root.handlers[:], root.level = saved
        for lg, (handlers, level, propagate) in zip(uvicorn_loggers, saved_uvicorn, strict=True):
            lg.handlers[:], lg.level, lg.propagate = handlers, level, propagate
    assert key not in json.dumps(line) and f"/v1/tasks/{TASK}?token=[redacted]" in line["message"]
    assert line["task_id"] == TASK and line["service"] == "gateway" and line["logger"] == "uvicorn.access"
    assert "other-secret-token" not in json.dumps(bearer) and bearer["message"] == "Authorization: Bearer [redacted]"


# --- traces ------------------------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Spans made as telemetry.setup would, into memory, without touching the process's global provider
    (nor instrumenting aiokafka for the rest of the session)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setitem(telemetry._state, "active", True)
    monkeypatch.setitem(telemetry._state, "provider", provider)
    monkeypatch.setitem(telemetry._state, "kafka_instrumented", False)
    return exporter


def _record(headers: list[tuple[str, bytes]]) -> SimpleNamespace:
    return SimpleNamespace(topic="p.chunk-created", partition=3, offset=42, headers=tuple(headers))


def test_without_spans_nothing_is_written_and_nothing_is_made() -> None:
    assert not telemetry.active()
    assert telemetry.headers() == []
    with telemetry.consumer_span("parser", "document-submitted", _record([]), {"task_id": TASK}):
        assert telemetry.current_ids() == {} and telemetry.trace_fields() == {}
    with telemetry.root_span("redrive", {"task_id": TASK}) as trace_id:
        assert trace_id is None


def test_the_consumer_span_continues_the_trace_of_the_traceparent_header(
    spans: InMemorySpanExporter, logger: logging.Logger
) -> None:
    handler = logs.handler("summarizer", "json")
    out = _capture(handler)
    logger.addHandler(handler)
    tracer = telemetry._state["provider"].get_tracer("test")
    with tracer.start_as_current_span("POST /v1/tasks", kind=trace.SpanKind.SERVER) as request:
        sent = telemetry.headers()
        assert telemetry.trace_fields() == {"trace_id": format(request.get_span_context().trace_id, "032x")}
    (name, value), *_ = sent
    trace_hex = format(request.get_span_context().trace_id, "032x")
    assert name == "traceparent" and value.decode().split("-")[1] == trace_hex

    ids = {"task_id": TASK, "chunk_id": CHUNK}
    with logs.bound(**ids), telemetry.consumer_span("summarizer", "chunk-created", _record(sent), ids, "g"):
        logger.info("summarizing")
        onward = telemetry.headers()

    process = next(s for s in spans.get_finished_spans() if s.name == "process chunk-created")
    assert process.context.trace_id == request.get_span_context().trace_id
    assert process.parent is not None and process.parent.span_id == request.get_span_context().span_id
    assert process.kind is trace.SpanKind.CONSUMER
    attributes = process.attributes
    assert attributes is not None and attributes["docsum.task_id"] == TASK and attributes["docsum.chunk_id"] == CHUNK
    assert attributes["messaging.kafka.offset"] == 42
    # What the handler publishes carries the consumer's span; its log lines name that span.
    assert onward[0][1].decode().split("-")[2] == format(process.context.span_id, "016x")
    (line,) = _json_lines(out)
    assert line["trace_id"] == trace_hex and line["span_id"] == format(process.context.span_id, "016x")
    assert line["task_id"] == TASK


def test_a_redrive_starts_a_new_trace_linked_to_its_cause(spans: InMemorySpanExporter) -> None:
    tracer = telemetry._state["provider"].get_tracer("test")
    with tracer.start_as_current_span("POST /v1/tasks/x/resume") as request:
        with telemetry.root_span("redrive", {"task_id": TASK}) as trace_id:
            sent = telemetry.headers()
    (redrive,) = [s for s in spans.get_finished_spans() if s.name == "redrive"]
    assert trace_id == format(redrive.context.trace_id, "032x") != format(request.get_span_context().trace_id, "032x")
    assert redrive.parent is None
    assert [link.context.span_id for link in redrive.links] == [request.get_span_context().span_id]
    assert sent[0][1].decode().split("-")[1] == trace_id


_WITHOUT = """
import sys, importlib.abc

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == p or name.startswith(p + ".") for p in {blocked!r}):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, Missing())
from types import SimpleNamespace
from docsum_shared import consumer, kafka, logs, redrive, telemetry

assert not telemetry.setup("parser", "/nonexistent/spans.jsonl") and not telemetry.active()
assert telemetry.headers() == []
parent = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"
record = SimpleNamespace(topic="t", partition=0, offset=1, headers=(("traceparent", parent),))
with telemetry.consumer_span("parser", "t", record, {{"task_id": "x"}}):
    assert telemetry.headers() == [] and telemetry.current_ids() == {{}}
with telemetry.root_span("redrive", {{}}) as trace_id:
    assert trace_id is None
print("ok")
"""


@pytest.mark.parametrize("blocked", [("opentelemetry",), ("opentelemetry.sdk", "opentelemetry.instrumentation")])
def test_without_the_otel_extra_the_services_run_and_make_no_spans(blocked: tuple[str, ...]) -> None:
    """Without OpenTelemetry at all, or with only the API (fastapi brings it), nothing breaks."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(blocked=blocked)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
