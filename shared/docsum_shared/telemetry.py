"""Traces: one trace per submission, from the gateway's request through every service (OpenTelemetry).

The context travels as a W3C `traceparent` header on each Kafka message: the gateway's request span
(FastAPI's instrumentation) publishes `document-submitted` with it; each consumer extracts it from the
record's headers and handles the message in a child span (`consumer_span`), so the events the handler
publishes carry that span's context. aiokafka's instrumentation wraps `send` in a producer span and
injects the header itself (it also wraps `getmany`, but only with "receive" spans that end before the
handler runs — hence our own span around the handler); without it, `inject` here writes the header. A
re-drive starts a new trace (`root_span`), linked to whatever asked for it. asyncpg's instrumentation
adds a span per query.

All of this is the optional extra `docsum-shared[otel]`, and only when spans go somewhere: an OTLP
endpoint or DOCSUM_TRACE_FILE. Without it, without either (or with OTEL_SDK_DISABLED=true) every
function here is a no-op: the services run the same, no span is made and no header written; the
events' own `trace_id` still ties a submission's log lines together. With it, spans are exported over
OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, configured by
the standard OTEL_* variables (OTEL_SERVICE_NAME defaults to docsum-<service>), and written as JSON
lines to DOCSUM_TRACE_FILE when that is set (the tests read them).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import ReadableSpan

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import Getter, Setter
except ImportError:  # the otel extra is not installed
    trace = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
TRACER = "docsum"
_state: dict[str, Any] = {"active": False, "kafka_instrumented": False, "provider": None}


def active() -> bool:
    """Spans are being made (the extra is installed and `setup` ran)."""
    return bool(_state["active"])


def setup(service: str, trace_file: str | None = None) -> bool:
    """Make spans in this process, if the SDK is installed and not disabled; True if so."""
    if _state["active"]:
        return True
    if trace is None or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporting = any(os.environ.get(f"OTEL_EXPORTER_OTLP_{part}ENDPOINT") for part in ("", "TRACES_"))
    if not (exporting or trace_file):
        return False  # spans with nowhere to go: all cost (a span per query and message), no use
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        return False
    # An OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) is taken by Resource.create.
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {SERVICE_NAME: f"docsum-{service}"}))
    if exporting:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if trace_file:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(trace_file)))
    trace.set_tracer_provider(provider)
    _state.update(active=True, provider=provider)
    _instrument_libraries(provider)
    return True


def _instrument_libraries(provider: Any) -> None:
    try:
        from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    except ImportError:
        return
    kafka = AIOKafkaInstrumentor()
    kafka.instrument(tracer_provider=provider)
    _state["kafka_instrumented"] = kafka.is_instrumented_by_opentelemetry
    AsyncPGInstrumentor().instrument(tracer_provider=provider)


def instrument_app(app: FastAPI) -> None:
    """A server span per HTTP request (none for health and metrics), when spans are made."""
    if not active():
        return
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError:
        return
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=_state["provider"], excluded_urls="/healthz,/readyz,/metrics"
    )


# --- the context in Kafka headers --------------------------------------------------------------------

if trace is not None:

    class _HeaderGetter(Getter[Sequence[tuple[str, bytes]]]):
        def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
            values = [v.decode("latin-1") for k, v in carrier if k == key and v is not None]
            return values or None

        def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
            return [k for k, _ in carrier]

    class _HeaderSetter(Setter[Headers]):
        def set(self, carrier: Headers, key: str, value: str) -> None:
            carrier[:] = [(k, v) for k, v in carrier if k != key]
            carrier.append((key, value.encode("latin-1")))

    _getter, _setter = _HeaderGetter(), _HeaderSetter()


def headers() -> Headers:
    """The headers of a message published now: `traceparent` (and `tracestate`) of the current span —
    unless aiokafka's instrumentation adds them itself, around its producer span."""
    carrier: Headers = []
    if trace is not None and not _state["kafka_instrumented"]:
        propagate.inject(carrier, setter=_setter)
    return carrier


def carried() -> str | None:
    """The current span's context as a W3C `traceparent` value, stored with work that another process
    announces later (the chunks the summarizer's admission publishes); None without a span."""
    if not active():
        return None
    carrier: Headers = []
    propagate.inject(carrier, setter=_setter)
    return next((value.decode("latin-1") for key, value in carrier if key == "traceparent"), None)


@contextmanager
def resumed(traceparent: str | None, name: str, ids: Mapping[str, str | None]) -> Iterator[None]:
    """Continue the trace `traceparent` carries (`carried`) in a span `name`: what is published inside
    carries that trace on."""
    if not active() or not traceparent:
        yield
        return
    tracer = _state["provider"].get_tracer(TRACER)
    context = _extract([("traceparent", traceparent.encode("latin-1"))])
    with tracer.start_as_current_span(name, context=context, attributes=_attributes(ids)):
        yield


def _extract(record_headers: Sequence[tuple[str, bytes]] | None) -> Context:
    return propagate.extract(list(record_headers or ()), getter=_getter)


# --- spans -------------------------------------------------------------------------------------------

_ID_ATTRIBUTES = ("task_id", "document_id", "chunk_id")


def _attributes(ids: Mapping[str, str | None]) -> dict[str, str]:
    return {f"docsum.{name}": value for name in _ID_ATTRIBUTES if (value := ids.get(name))}


@contextmanager
def consumer_span(
    service: str, topic: str, record: Any, ids: Mapping[str, str | None], group: str | None = None
) -> Iterator[None]:
    """Handle `record` in a span that continues the trace its headers carry (or starts one)."""
    if not active():
        yield
        return
    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.offset": record.offset,
        "docsum.service": service,
        **_attributes(ids),
    }
    if group:
        attributes["messaging.consumer.group.name"] = group
    tracer = _state["provider"].get_tracer(TRACER)
    with tracer.start_as_current_span(
        f"process {topic}", context=_extract(record.headers), kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield


@contextmanager
def root_span(name: str, ids: Mapping[str, str | None]) -> Iterator[str | None]:
    """A span starting a new trace, linked to the current span if any; yields the new trace id (hex)."""
    if not active():
        yield None
        return
    caller = trace.get_current_span().get_span_context()
    links = [trace.Link(caller)] if caller.is_valid else []
    tracer = _state["provider"].get_tracer(TRACER)
    with tracer.start_as_current_span(name, context=Context(), links=links, attributes=_attributes(ids)) as span:
        yield format(span.get_span_context().trace_id, "032x")


def annotate(**ids: str | None) -> None:
    """Put ids (task_id, document_id, chunk_id) on the current span."""
    if active():
        trace.get_current_span().set_attributes(_attributes(ids))


def failed(reason: str) -> None:
    """Mark the current span as failed (e.g. its message was dead-lettered)."""
    if active():
        trace.get_current_span().set_status(trace.Status(trace.StatusCode.ERROR, reason[:500]))


def current_ids() -> dict[str, str]:
    """The current span's trace_id and span_id (hex), or {} outside a span or without the extra."""
    if not active():
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def trace_fields() -> dict[str, str]:
    """`trace_id=` for a root event made inside a span, so the event's trace id is the span's."""
    ids = current_ids()
    return {"trace_id": ids["trace_id"]} if ids else {}


# --- a file exporter for tests -----------------------------------------------------------------------

try:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
except ImportError:  # without the SDK no exporter is ever made
    SpanExporter = object  # type: ignore[assignment,misc]


class JsonLinesExporter(SpanExporter):  # type: ignore[misc,valid-type]
    """Appends each finished span to a file as one JSON line (ReadableSpan.to_json): how the tests see the
    spans of processes they run."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(span.to_json(indent=None) + "\n" for span in spans)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass
