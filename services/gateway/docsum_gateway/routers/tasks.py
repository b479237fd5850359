"""/v1/tasks: submit a batch of documents, follow it, read its summaries."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from docsum_shared import lifecycle, logs, telemetry
from docsum_shared.errors import Kind, classify
from docsum_shared.events import DocumentSubmitted, TaskEvent
from docsum_shared.handlers import Publish, Sender
from docsum_shared.options import MODES, PRIORITIES, Mode, TaskOptions, TaskPriority, deadline_from
from docsum_shared.readmodel import queries, views
from docsum_shared.readmodel.schemas import FailureView, TaskListItem, TaskView
from docsum_shared.redrive import prepare_redrive
from docsum_shared.retry import retry_until, until_deadline
from docsum_shared.scope import Scope
from docsum_shared.states import TaskStatus

from .. import idempotency, repository
from ..deps import BlobsDep, OwnerDep, PoolDep, PublishDep, ScopeDep, SettingsDep, TaskIdDep, within_task_rate
from ..inputs import StoredText, check_text, echo, invalid, is_task_id
from ..responses import ErrorBody, errors
from ..schemas import CreatedDocument, LifecycleResult, QuotedText, TaskCreated
from ..settings import GatewaySettings
from ..uploads import FILE_FIELD, UploadLimits, read_upload
from ..webhooks import repository as webhooks
from .maintenance import REDRIVE_REFUSED, claim_gate, publish_after_answer, release_gate

log = logging.getLogger(__name__)
# Documents as they are uploaded; pause, resume, retry and cancel as their owner asks.
GATEWAY = Sender("the gateway", emits=(DocumentSubmitted, TaskEvent))
# How long a submission waits for the broker to take its events before it is answered anyway.
PUBLISH_WAIT_S = 10.0
# The longest range of a document's text one request quotes, in characters: a few pages, more than any
# sentence's source.
MAX_QUOTE_CHARS = 20_000
# Offsets are stored as PostgreSQL int.
_MAX_OFFSET = 2**31 - 1
router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


def _waiting(exc: Exception) -> None:
    log.warning("the broker did not take the submission yet (%s); retrying", exc)


def _form_bool(value: object) -> object:
    """A boolean form field is `true` or `false`, as the schema's boolean is written in multipart."""
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise PydanticCustomError("bool_parsing", "must be true or false")
        return value == "true"
    return value


def _form_deadline(value: object) -> object:
    """A deadline is a duration from now (6h) or an instant with its zone; the task keeps the instant."""
    if isinstance(value, str):
        try:
            return deadline_from(value, datetime.now(UTC))
        except ValueError as exc:
            raise PydanticCustomError("deadline_parsing", "{reason}", {"reason": str(exc)}) from None
    return value


class TaskForm(BaseModel):
    """The text fields of `POST /v1/tasks` (the files come in the field `files`)."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[StoredText, Field(max_length=500)] | None = None
    strict: Annotated[bool, BeforeValidator(_form_bool)] = False  # fail a document if any part of it fails
    language: Annotated[StoredText, Field(max_length=40)] | None = None  # summary language; default: the document's
    length: Literal["brief", "standard", "detailed"] = "standard"
    style: Literal["prose", "bullets"] = "prose"
    support: Literal["all", "strict"] = "all"  # strict: sentences their sources do not support are left out
    mode: Mode | None = None  # how the LLM calls are sent; default: DOCSUM_LLM_MODE
    priority: TaskPriority | None = None  # which of the owner's work goes first; default: normal
    deadline: Annotated[datetime | None, BeforeValidator(_form_deadline)] = None  # when the task must be finished
    webhook: str | None = None  # the id of one of the owner's webhook endpoints, told of this task's end
    previous_task: str | None = None  # the id of one of the owner's tasks whose documents these are new versions of


_OPTIONAL_TEXT = {"title", "language", "webhook", "previous_task"}
_NO_NUL = "^[^\\x00]*$"  # documents what `StoredText` enforces (PostgreSQL text holds no NUL)
# The deadlines the schema admits: durations that are all within the 7 days, so that every value it admits
# is accepted whenever it is sent. The gateway takes more (deadline_from): any such duration, and instants.
_DEADLINE_DURATION = (
    "^(?:[1-7]d|[1-6]d(?:1?[0-9]|2[0-3])h|[1-9][0-9]?h(?:[0-9]{1,2}m)?|[1-9][0-9]{0,2}m|[1-9][0-9]{0,3}s)$"
)
UPLOAD_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["files"],
                "additionalProperties": False,
                "properties": {
                    "files": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "minItems": 1,
                        "description": (
                            "the documents to summarize (PDF, DOCX, PPTX, HTML, EPUB, text, Markdown), one part each"
                        ),
                    },
                    "title": {"type": "string", "maxLength": 500, "pattern": _NO_NUL},
                    "strict": {"type": "boolean", "default": False,
                               "description": "fail a document if any part of it fails"},
                    "language": {"type": "string", "maxLength": 40, "pattern": _NO_NUL,
                                 "description": "summary language; default: the document's"},
                    "length": {"type": "string", "enum": ["brief", "standard", "detailed"], "default": "standard"},
                    "style": {"type": "string", "enum": ["prose", "bullets"], "default": "prose"},
                    "support": {"type": "string", "enum": ["all", "strict"], "default": "all",
                                "description": "all: every sentence, an unsupported one marked; strict: a sentence "
                                               "its sources do not support is left out of the summaries"},
                    "mode": {"type": "string", "enum": list(MODES),
                             "description": "how the LLM calls are sent (flex: about half the price, slower); "
                                            "default: the deployment's (DOCSUM_LLM_MODE)"},
                    "priority": {"type": "string", "enum": list(PRIORITIES),
                                 "description": "which of your work goes first: urgent (also before other owners' "
                                                "normal work, from your own share), normal, or background (when "
                                                "nothing else waits); default: normal"},
                    "webhook": {"type": "string", "format": "uuid",
                                "description": "the id of one of your webhook endpoints (POST /v1/webhooks) to "
                                               "tell of this task's end, besides those told of every task"},
                    "previous_task": {"type": "string", "format": "uuid",
                                      "description": "the id of one of your tasks whose documents these are new "
                                                     "versions of (matched by filename): each document's view then "
                                                     "marks what changed in its summary"},
                    "deadline": {"type": "string", "pattern": _DEADLINE_DURATION,
                                 "description": "when the task must be finished: a duration from now (45m, 6h, 2d, "
                                                "1h30m, 90s) or an ISO 8601 instant with its zone "
                                                "(2026-12-03T08:00:00Z), at most 7 days away; in batch mode, a "
                                                "provider's batch that would end later is cancelled and the rest "
                                                "sent in realtime"},
                },
            }
        }
    },
}  # fmt: skip


# Declared here, read by _idempotency_key (which sees every value sent, and says what is wrong with one).
_KEY_PARAMETER: dict[str, Any] = {
    "name": idempotency.HEADER,
    "in": "header",
    "required": False,
    "description": "A key of the client's own for this request, kept per owner: a UUID, quoted as the IETF draft"
    ' writes it (`"8e03978e-40d5-43e8-bc93-6894a57f9324"`) or bare.',
    "schema": {"type": "string", "pattern": idempotency.KEY_PATTERN, "maxLength": idempotency.MAX_KEY_CHARS},
}


# What the new task's id opens (OpenAPI links: clients and test generators follow them).
_TASK_LINKS = {
    name: {"operationRef": f"#/paths/~1v1~1tasks~1{{task_id}}{path.replace('/', '~1')}/{method}",
           "parameters": {"task_id": "$response.body#/task_id"}}
    for name, method, path in [
        ("GetTask", "get", ""), ("GetFailures", "get", "/failures"), ("Pause", "post", "/pause"),
        ("Resume", "post", "/resume"), ("Cancel", "post", "/cancel"), ("Retry", "post", "/retry"),
        ("Ticket", "post", "/ticket"),
    ]
}  # fmt: skip


def upload_limits(settings: GatewaySettings) -> UploadLimits:
    return UploadLimits(
        max_files=settings.max_files_per_task,
        max_file_bytes=settings.max_file_bytes,
        max_total_bytes=settings.upload_bytes,
        spool_bytes=settings.upload_spool_bytes,
        idle_s=settings.upload_idle_s,
    )


def _form(fields: dict[str, list[str]]) -> TaskForm:
    """The text fields, validated: a field the API does not have, or one given twice, is a 422 too."""
    if FILE_FIELD in fields:
        raise invalid(("body", FILE_FIELD), "the field 'files' takes files (parts with a filename), not text")
    for name, values in fields.items():
        if len(values) > 1:
            raise invalid(("body", name), f"the field '{name}' is given {len(values)} times; give it once", values)
    # An empty title or language is no title or language; any other empty field is invalid.
    given = {name: v[0] for name, v in fields.items() if v[0] != "" or name not in _OPTIONAL_TEXT}
    try:
        return TaskForm.model_validate(given)
    except ValidationError as exc:
        raise RequestValidationError(
            [
                {**e, "loc": ("body", *e["loc"]), "input": echo(e.get("input"))}
                for e in exc.errors(include_url=False, include_context=False)
            ]
        ) from None


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskCreated,
    responses={
        201: {
            "links": _TASK_LINKS,
            "headers": {
                idempotency.REPLAYED_HEADER: {
                    "description": "`true` when this is the stored answer of an earlier request with the same"
                    " Idempotency-Key",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            },
        },
        **errors(400, 401, 408, 413, 422, 429, 503),
        409: {
            "model": ErrorBody,
            "description": "Another request with the same Idempotency-Key is being stored now: send this one"
            " again after `Retry-After` seconds, and it gets that request's answer.",
            "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
        },
    },
    dependencies=[Depends(within_task_rate)],
    openapi_extra={"requestBody": UPLOAD_BODY, "parameters": [_KEY_PARAMETER]},
    description="Multipart: one or more `files`, and optionally `title`, `strict`, `language`, `length`, `style`,"
    " `support`, `mode`, `priority`, `deadline`, `webhook`, `previous_task`."
    " The upload streams: each file is spooled and hashed as it arrives, and a request over a limit is"
    " answered 413 as soon as it crosses it; a body that sends nothing for DOCSUM_UPLOAD_IDLE_S is a 408."
    " With an `Idempotency-Key` (README: Integrating), the same request sent again within"
    " DOCSUM_IDEMPOTENCY_KEY_TTL_S gets the first answer (marked `Idempotent-Replayed: true`) and makes no"
    " second task; the key with a different request is a 422; while the first is being stored, a 409.",
)
async def create_task(
    request: Request,
    owner: OwnerDep,
    settings: SettingsDep,
    pool: PoolDep,
    blobs: BlobsDep,
    publish: PublishDep,
) -> Any:
    key = _idempotency_key(request)
    upload = await read_upload(request, upload_limits(settings), request.app.state.uploads.claim(owner))
    try:
        form = _form(upload.fields)
        if not upload.files:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "no files: send one or more as multipart field 'files'")
        documents = [
            repository.NewDocument(repository.new_id(), f, (f.filename or f"document-{i + 1}")[:255])
            for i, f in enumerate(upload.files)
        ]
        options = TaskOptions(
            strict=form.strict,
            language=form.language,
            length=form.length,
            style=form.style,
            support=form.support,
            mode=form.mode,
            priority=form.priority,
            deadline=form.deadline,
            previous_task=await _previous_of(form.previous_task, owner, settings, pool),
        )
        webhook_id = await _webhook_of(form.webhook, owner, settings, pool)
        tasks = repository.TaskRepository(pool, blobs)
        stored_answer: str | None = None  # with a key: the answer as stored, what a replay sends again
        if key is None:
            task_id = await tasks.create_task(
                owner, form.title, documents, options, deployment=settings.deployment, webhook_id=webhook_id
            )
        else:
            sent = idempotency.fingerprint(
                [idempotency.SentFile(f.filename, f.content_type, f.sha256, f.size) for f in upload.files],
                upload.fields,
            )
            keyed = repository.KeyedRequest(key, sent, settings.idempotency_key_ttl_s, status.HTTP_201_CREATED)
            outcome = await tasks.create_task_once(
                Scope(settings.deployment, owner),
                keyed,
                form.title,
                documents,
                options,
                lambda t: _created(t, documents).model_dump_json(),
                webhook_id=webhook_id,
            )
            if not isinstance(outcome, repository.Created):
                return _keyed_answer(outcome, sent)
            task_id, stored_answer = outcome.task_id, outcome.body
    finally:
        upload.close()
    logs.bind(task_id=task_id)  # the request's log lines and span name the task from here on
    telemetry.annotate(task_id=task_id)
    submitted = [
        DocumentSubmitted(
            task_id=task_id,
            document_id=d.id,
            owner=owner,
            filename=d.filename,
            content_type=d.file.content_type,
            blob_sha256=d.file.sha256,
            size_bytes=d.file.size,
            **telemetry.trace_fields(),  # the request's trace id, with OpenTelemetry
        )
        for d in documents
    ]
    try:
        await retry_until(lambda: publish(submitted, sender=GATEWAY), until_deadline(PUBLISH_WAIT_S, _waiting))
    except Exception as exc:
        if classify(exc) is not Kind.RETRIABLE:
            raise
        # Stored is accepted: PostgreSQL holds the task, and reconcile announces its documents once the
        # broker is back. The client gets its task id (and does not submit the same files twice).
        log.warning("task %s stored, not yet announced (%s): reconcile will announce it", task_id, exc)
    log.info("task %s: %d documents submitted by %s", task_id, len(documents), owner)
    if stored_answer is not None:
        return Response(stored_answer, status.HTTP_201_CREATED, media_type="application/json")
    return _created(task_id, documents)


async def _webhook_of(given: str | None, owner: str, settings: GatewaySettings, pool: asyncpg.Pool) -> str | None:
    """The webhook endpoint the task names, if it is one of the owner's (in this deployment); else 422."""
    if given is None:
        return None
    scope = Scope(settings.deployment, owner)
    if not is_task_id(given) or not await webhooks.owned_endpoint(pool, scope, given):
        raise invalid(("body", "webhook"), f"no webhook {given[:100]} of yours: register one with POST /v1/webhooks")
    return given


async def _previous_of(given: str | None, owner: str, settings: GatewaySettings, pool: asyncpg.Pool) -> str | None:
    """The task the new one's documents are new versions of, if it is one of the owner's (in this deployment);
    else 422, said the same way for another owner's task as for none (as GET answers both 404)."""
    if given is None:
        return None
    if not is_task_id(given) or not await queries.owns(pool, Scope(settings.deployment, owner), given):
        raise invalid(("body", "previous_task"), f"no task {given[:100]} of yours: give the id of one of your tasks")
    return given


def _created(task_id: str, documents: list[repository.NewDocument]) -> TaskCreated:
    return TaskCreated(
        task_id=task_id,
        status="PROCESSING",
        documents=[CreatedDocument(document_id=d.id, filename=d.filename) for d in documents],
    )


def _idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key, checked before its body is read; 422 if it is not one key."""
    values = request.headers.getlist(idempotency.HEADER)
    loc = ("header", idempotency.HEADER)
    if not values:
        return None
    if len(values) > 1:
        raise invalid(loc, f"the header is sent {len(values)} times; send one key", values)
    try:
        return idempotency.parse_key(values[0])
    except idempotency.BadKey as exc:
        raise invalid(loc, str(exc), values[0]) from None


def _keyed_answer(outcome: idempotency.Stored | idempotency.InFlight, sent: str) -> Response:
    """The answer to a request whose key is taken: the first answer again, or why not."""
    if isinstance(outcome, idempotency.InFlight):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "a request with this Idempotency-Key is being stored now: send this one again after Retry-After"
            " seconds to get its answer",
            headers={"Retry-After": str(idempotency.IN_FLIGHT_RETRY_AFTER_S)},
        )
    decided = idempotency.decide(outcome, sent)
    if isinstance(decided, idempotency.Mismatch):
        raise invalid(
            ("header", idempotency.HEADER),
            "this Idempotency-Key was used for a different request (other files or fields) within"
            " DOCSUM_IDEMPOTENCY_KEY_TTL_S: send the same request to get its answer, or a new key for a new task",
            kind="idempotency_key_reused",
        )
    log.info("answer replayed for an Idempotency-Key: %s", decided.body[:200])
    return Response(
        decided.body, decided.status_code, headers={idempotency.REPLAYED_HEADER: "true"}, media_type="application/json"
    )


@router.get("", response_model=list[TaskListItem], responses=errors(401, 422))
async def list_tasks(
    scope: ScopeDep, pool: PoolDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[TaskListItem]:
    return await views.list_tasks(pool, scope, limit)


@router.get("/{task_id}", response_model=TaskView, responses=errors(401, 404, 422))
async def get_task(scope: ScopeDep, task_id: TaskIdDep, pool: PoolDep, settings: SettingsDep) -> TaskView:
    view = await views.task_view(pool, settings, scope, task_id)
    if view is None:  # another owner's (or deployment's) task looks exactly like a missing one
        raise _not_found(task_id)
    return view


@router.get("/{task_id}/failures", response_model=list[FailureView], responses=errors(401, 404, 422))
async def get_failures(scope: ScopeDep, task_id: TaskIdDep, pool: PoolDep) -> list[FailureView]:
    listed = await views.failures(pool, scope, task_id)
    if listed is None:
        raise _not_found(task_id)
    return listed


def document_id_path(
    task_id: TaskIdDep,
    document_id: Annotated[
        str,
        Path(
            description="The document's id, as `POST /v1/tasks` answered it (a uuid).",
            json_schema_extra={"format": "uuid"},
        ),
    ],
) -> str:
    """The `{document_id}` path parameter, like the task's: 422 if it cannot be stored, 404 if it cannot be
    an id."""
    check_text(("path", "document_id"), document_id)
    if not is_task_id(document_id):
        raise _no_document(task_id, document_id)
    return document_id


@router.get(
    "/{task_id}/documents/{document_id}/text",
    response_model=QuotedText,
    responses=errors(401, 404, 422),
    description="The document's extracted text from `start` to `end` (character offsets, as a summary sentence's"
    f" `sources` give them), with the page (paragraph, line) each end falls in. At most {MAX_QUOTE_CHARS:,}"
    " characters; a range that is empty, longer, or not inside the text is a 422 saying why.",
)
async def get_document_text(
    scope: ScopeDep,
    task_id: TaskIdDep,
    document_id: Annotated[str, Depends(document_id_path)],
    pool: PoolDep,
    start: Annotated[int, Query(ge=0, le=_MAX_OFFSET - 1, description="The first character, from 0.")],
    end: Annotated[int, Query(ge=1, le=_MAX_OFFSET, description="The character after the last.")],
) -> QuotedText:
    # The query reads no text for a range that is empty or over the cap, and never more than the cap: 40
    # requests for the whole of a 19 MB text grew the gateway by 177 MiB when the text was read first.
    found = await queries.quote(pool, scope, task_id, document_id, start, end, MAX_QUOTE_CHARS)
    if found is None:  # another owner's task, or a document of another task: as missing as no task at all
        await _owned(pool, scope, task_id)
        raise _no_document(task_id, document_id)
    if not found["has_text"]:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"document {document_id} has no extracted text yet")
    if end <= start:
        raise invalid(
            ("query", "end"), f"the range is empty or reversed: end ({end}) must be after start ({start})", end
        )
    if end - start > MAX_QUOTE_CHARS:
        raise invalid(
            ("query", "end"), f"the range has {end - start:,} characters, over the limit of {MAX_QUOTE_CHARS:,}", end
        )
    if end > found["text_chars"]:
        raise invalid(
            ("query", "end"),
            f"the range ends at {end}, past the end of the text ({found['text_chars']} characters)",
            end,
        )
    return QuotedText(
        document_id=document_id,
        filename=found["filename"],
        unit=found["unit"],
        page=found["page"] or None,
        last_page=found["last_page"] or None,
        start=start,
        end=end,
        text=found["text"],
        ocr=bool(found["ocr"]),
    )


_Move = Callable[[asyncpg.Pool, str, GatewaySettings], Awaitable[bool | int]]


@dataclass(frozen=True)
class _Control:
    """One lifecycle route: the guarded transition, what it is called in a 409, and what follows it."""

    move: _Move  # cancel writes the webhook deliveries its end owes (outbox.py): hence the settings
    verb: str
    status: TaskStatus  # the task's status after it
    redrive: bool  # re-drive the freed work from Postgres (else: announce the new status)
    doc: str


def _plain(move: Callable[[asyncpg.Pool, str], Awaitable[bool | int]]) -> _Move:
    """A transition that owes no webhook delivery: it needs no settings."""

    async def moved(pool: asyncpg.Pool, task_id: str, _settings: GatewaySettings) -> bool | int:
        return await move(pool, task_id)

    return moved


_CONTROLS = {
    "pause": _Control(_plain(lifecycle.pause), "paused", TaskStatus.PAUSED, False,
                      "Work in flight finishes and is stored; no new LLM call starts for this task."),
    "resume": _Control(_plain(lifecycle.resume), "resumed", TaskStatus.PROCESSING, True,
                       "Back to PROCESSING; the remaining work is re-driven from Postgres (published after the"
                       " answer; `redriven_events` counts it), except chunks being summarized now."),
    "cancel": _Control(lifecycle.cancel, "cancelled", TaskStatus.CANCELLED, False,
                       "Terminal: nothing more is spent on the task."),
    "retry": _Control(_plain(lifecycle.retry_failed), "retried (nothing failed)", TaskStatus.PROCESSING, True,
                      "Re-drive the FAILED documents and chunks; every stored summary is reused. Published after"
                      " the answer, like resume's."),
}  # fmt: skip


def _control_route(action: str, control: _Control) -> None:
    async def route(
        scope: ScopeDep, task_id: TaskIdDep, pool: PoolDep, publish: PublishDep, settings: SettingsDep
    ) -> LifecycleResult:
        # A task of another deployment is not touched: its re-drive would publish on this one's topics.
        await _owned(pool, scope, task_id)
        if control.redrive:
            return await _move_and_redrive(action, control, task_id, scope.owner, pool, publish, settings)
        if not await control.move(pool, task_id, settings):
            raise await _conflict(pool, task_id, control.verb)
        await publish([TaskEvent(task_id=task_id, status=control.status)], sender=GATEWAY)
        return LifecycleResult(task_id=task_id, status=control.status)

    codes = errors(401, 404, 409, 422)
    router.add_api_route(
        f"/{{task_id}}/{action}", route, methods=["POST"], response_model=LifecycleResult, name=action,
        description=control.doc, responses={**codes, **REDRIVE_REFUSED} if control.redrive else codes,
    )  # fmt: skip


async def _move_and_redrive(
    action: str,
    control: _Control,
    task_id: str,
    owner: str,
    pool: asyncpg.Pool,
    publish: Publish,
    settings: GatewaySettings,
) -> LifecycleResult:
    """Resume or retry: through the owner's re-drive gate (429 before anything moves), the transition,
    then the freed work claimed and counted now and published after the answer."""
    gate = await claim_gate(pool, owner, settings)
    try:
        if not await control.move(pool, task_id, settings):
            raise await _conflict(pool, task_id, control.verb)
        # Said on task-events first (the progress log's "resumed"/"retried"), then the work re-driven.
        await publish([TaskEvent(task_id=task_id, status=control.status, detail={"action": action})], sender=GATEWAY)
        redrive = await prepare_redrive(pool, settings, task_id)
    except BaseException:
        await release_gate(pool, gate)
        raise
    redrives = [redrive] if redrive is not None else []
    publish_after_answer(pool, publish, settings, gate, redrives)
    events = sum(len(r.events) for r in redrives)
    return LifecycleResult(task_id=task_id, status=control.status, redriven_events=events)


for _action, _control in _CONTROLS.items():
    _control_route(_action, _control)


def _not_found(task_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no task {task_id}")


def _no_document(task_id: str, document_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no document {document_id} in task {task_id}")


async def _owned(pool: asyncpg.Pool, scope: Scope, task_id: str) -> None:
    if not await queries.owns(pool, scope, task_id):
        raise _not_found(task_id)


async def _conflict(pool: asyncpg.Pool, task_id: str, verb: str) -> HTTPException:
    current = await repository.TaskRepository(pool).task_status(task_id)
    return HTTPException(status.HTTP_409_CONFLICT, f"task {task_id} is {current} and cannot be {verb}")
