"""Strict inputs: what the gateway takes from a request is checked before it reaches PostgreSQL.

PostgreSQL text (and jsonb) cannot hold the NUL character, and UTF-8 cannot hold a lone surrogate:
any text input carrying one is a 422 naming the input, never a failed INSERT. Task ids are the
gateway's own (canonical uuid4 strings, see repository.new_id): anything else is a task that cannot
exist, a 404 without a query.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

from fastapi import HTTPException, Path, status
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

_UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")
UNSTORABLE = "unstorable_text"  # the error type of text PostgreSQL cannot store


def unstorable(text: str) -> str | None:
    """Why PostgreSQL cannot store `text`, or None if it can."""
    found = _UNSTORABLE_CHARS.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"contains a NUL character (at {found.start()}), which cannot be stored"
    return f"contains a lone surrogate (at {found.start()}), which is not valid UTF-8"


def storable(text: str) -> str:
    """A pydantic AfterValidator: `text` unchanged, or a validation error saying what is wrong."""
    if (problem := unstorable(text)) is not None:
        raise PydanticCustomError(UNSTORABLE, problem)
    return text


StoredText = Annotated[str, AfterValidator(storable)]


def echo(value: Any) -> Any:
    """An input as a 422 may show it: a lone surrogate (which UTF-8 JSON cannot carry) escaped."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [echo(v) for v in value]
    return value


def invalid(loc: tuple[str | int, ...], message: str, value: Any = None, kind: str = "value_error") -> Exception:
    """A 422 in FastAPI's own shape ({"detail": [{"loc", "msg", "type", "input"}]})."""
    return RequestValidationError([{"type": kind, "loc": loc, "msg": message, "input": echo(value)}])


def check_text(loc: tuple[str | int, ...], text: str) -> str:
    if (problem := unstorable(text)) is not None:
        raise invalid(loc, problem, text, kind=UNSTORABLE)
    return text


def is_task_id(text: str) -> bool:
    """Whether `text` is an id the gateway could have made (str(uuid.uuid4()): lower-case, hyphenated)."""
    if len(text) != 36:
        return False
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def task_id_path(
    task_id: Annotated[
        str,
        Path(
            description="The task's id, as `POST /v1/tasks` answered it (a uuid).",
            json_schema_extra={"format": "uuid"},
        ),
    ],
) -> str:
    """The `{task_id}` path parameter: 422 if it cannot even be stored, 404 if it cannot be an id."""
    check_text(("path", "task_id"), task_id)
    if not is_task_id(task_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")
    return task_id
