"""The error answers of the API, as the OpenAPI schema declares them: each route lists every status it
can give (`responses=errors(...)`), each with the body it really has."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    """What went wrong, in a sentence that says what to do about it."""

    detail: str


class ValidationErrorItem(BaseModel):
    loc: list[str | int]  # where: ("body", "title"), ("path", "task_id"), ("query", "limit")...
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class ValidationErrorBody(BaseModel):
    """An input is invalid (FastAPI's validation error shape)."""

    detail: list[ValidationErrorItem]


_DESCRIPTIONS = {
    400: "The body is not a well-formed multipart/form-data upload, or it has no files.",
    401: "No valid API key: send `Authorization: Bearer <key>`.",
    404: "No such task. Another owner's task answers the same; so does an id the gateway cannot have made.",
    406: "The request does not accept what the route sends (the progress stream: `Accept: text/event-stream`).",
    408: "The body stopped arriving: no byte of it for DOCSUM_UPLOAD_IDLE_S. The upload is dropped; send it again.",
    409: "The task's status does not allow this (a finished task cannot be paused, say).",
    413: (
        "Over an upload limit: bytes per file (DOCSUM_MAX_FILE_BYTES), files per task (DOCSUM_MAX_FILES_PER_TASK),"
        " bytes per task (DOCSUM_MAX_TASK_BYTES), or the size of a form field or of the body. The upload is cut"
        " off when it crosses the limit."
    ),
    429: (
        "Over the owner's task creation rate (DOCSUM_TASKS_PER_MINUTE), or the owner's uploads in progress hold"
        " their share of the gateway (DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER): try again after `Retry-After` seconds."
    ),
    503: (
        "The gateway holds as many upload bytes as it may at once (DOCSUM_UPLOAD_INFLIGHT_BYTES): send the request"
        " again after `Retry-After` seconds."
    ),
    422: (
        "An input is invalid: out of range, not one of its choices, or text that PostgreSQL cannot store"
        " (a NUL character)."
    ),
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route that can answer with these error statuses."""
    declared: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {
            "model": ValidationErrorBody if code == 422 else ErrorBody,
            "description": _DESCRIPTIONS[code],
        }
        if code == 401:
            entry["headers"] = {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}}
        if code in (429, 503):
            entry["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}
        declared[code] = entry
    return declared
