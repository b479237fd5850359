"""Log lines of every service: text for a terminal, or one JSON object per line (DOCSUM_LOG_FORMAT=json,
for a log collector under Kubernetes).

Each line says which task, document and chunk it is about without each call passing them: the consumer
shell binds the ids of the event it handles (`bound`), the gateway's routes those of their task (`bind`),
and `Context` copies them from a context variable onto every record — every line of a handler, of
the libraries it calls included, carries them. With the OpenTelemetry extra, a line written inside a span
also carries its trace_id and span_id (telemetry.py).

A JSON line: {"time", "level", "logger", "message", "service", then the ids known: "task_id",
"document_id", "chunk_id", "trace_id", "span_id"; "exc_info" with a traceback}.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from . import telemetry

LogFormat = Literal["text", "json"]
ID_FIELDS = ("task_id", "document_id", "chunk_id", "trace_id", "span_id")
_ids: ContextVar[dict[str, str] | None] = ContextVar("docsum_log_ids", default=None)


def current_ids() -> dict[str, str]:
    """The ids bound in this context (task_id, document_id, chunk_id, trace_id)."""
    return dict(_ids.get() or {})


@contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Every record logged inside carries these ids (those given as None are left out)."""
    token = _ids.set({**(_ids.get() or {}), **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        _ids.reset(token)


def bind(**ids: str | None) -> None:
    """Bind ids for the rest of this context: for a request, which runs in a context of its own."""
    _ids.set({**(_ids.get() or {}), **{k: v for k, v in ids.items() if v}})


class Context(logging.Filter):
    """Puts the service's name and the ids known in this context on each record (a record's own, from
    `extra=`, win). Set on a handler, it sees the records of every logger."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        known = {**(_ids.get() or {}), **telemetry.current_ids()}  # a span's trace id wins: it is the export's
        for name, value in known.items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        return True


class Json(JsonFormatter):
    """One JSON object per record; the time in UTC, ISO 8601 with milliseconds."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            json_ensure_ascii=False,
            # Not fields: uvicorn's coloured copy of the message, and Python 3.12's asyncio task name.
            reserved_attrs=[*RESERVED_ATTRS, "color_message", "taskName"],
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Text(logging.Formatter):
    """The familiar line, with the ids known appended: `... message [task_id=... chunk_id=...]`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{n}={v}" for n in ID_FIELDS[:3] if (v := getattr(record, n, None)))
        if not ids:
            return line
        first, newline, rest = line.partition("\n")  # after the message, before a traceback
        return f"{first} [{ids}]{newline}{rest}"


def handler(service: str, log_format: LogFormat, filters: Iterable[logging.Filter] = ()) -> logging.Handler:
    """A stderr handler writing `log_format` lines, with the context ids (and any further filters,
    applied first: e.g. the gateway's redaction)."""
    out = logging.StreamHandler()
    out.setFormatter(Json() if log_format == "json" else Text())
    for f in filters:
        out.addFilter(f)
    out.addFilter(Context(service))
    return out


def configure(
    service: str, log_format: LogFormat = "text", filters: Iterable[logging.Filter] = (), level: int = logging.INFO
) -> logging.Handler:
    """Root logging through one `handler` (replacing any other); aiokafka's chatter held to warnings, and
    httpx2's line per request (every LLM call: the ledger and the metrics count them)."""
    out = handler(service, log_format, filters)
    logging.basicConfig(level=level, handlers=[out], force=True)
    for chatty in ("aiokafka", "httpx2"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    return out
