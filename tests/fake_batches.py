"""The stand-in's Batch and Files APIs, its flex tier and its prices (mounted by `tests.fake_llm.FakeLLM.app`).

It serves what OpenAI's Batch API serves, in the shapes of the `openai` package's types (``FileObject``,
``FileDeleted``, ``Batch``, a cursor page of batches):

- ``POST /v1/files`` (multipart ``file`` + ``purpose``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``,
  ``DELETE /v1/files/{id}``. A ``batch`` file over `batch_max_file_bytes` (200 MB) is refused at upload;
  its lines are checked when a batch is created from it, as OpenAI checks them: the batch is created,
  then ``failed`` after validating, its ``errors`` listing each bad line (``invalid_json_line``,
  ``duplicate_custom_id``, ``url_mismatch``, ``model_mismatch``, ``empty_file``, ``too_many_tasks`` over
  `batch_max_lines` (50,000) lines, ``invalid_request`` for a missing field or a method other than POST).
- ``POST /v1/batches`` (``input_file_id``, ``endpoint`` ``/v1/chat/completions``, ``completion_window``
  ``24h``, up to 16 ``metadata`` pairs), ``GET /v1/batches/{id}``, ``GET /v1/batches`` (newest first,
  ``after`` / ``limit`` pagination, the metadata listed back), ``POST /v1/batches/{id}/cancel``.

Files and batches belong to the account that made them (the API key of the request, as OpenAI scopes them
to an organization and project): another key is answered 404 for them and lists none of them.

A batch moves validating -> in_progress -> finalizing -> completed (or failed, expired, cancelling ->
cancelled) on a scaled clock: its durations are provider seconds (`batch_validating_s`, `batch_line_s`
per line, or `batch_in_progress_s` for all its lines, `batch_finalizing_s`, `batch_cancelling_s`, the
24 h window) times `batch_time_scale` (1.0: real time; 1/36000 runs "24 h" in 2.4 s). The clock is read
whenever the stand-in is asked anything (an endpoint here, or its ledger), so nothing runs in the
background: a line is answered when the clock has passed its turn.

Each line is answered by the realtime machinery (the same answer, token counts and usage as
``/v1/chat/completions``; its context limit, `reject_marker` and `fail_rate` apply, not the realtime
queue of `fail_next` nor `rpm_limit`: batches have their own pool) and recorded in the ledger with
``tier="batch"``, its ``batch_id`` and ``custom_id``, and ``price_factor`` `batch_price_factor` (0.5).
A ``service_tier: "flex"`` chat call is recorded with ``tier="flex"`` and `flex_price_factor` (0.5); a
realtime one with ``tier="realtime"`` and 1.0. `prices` (USD per million prompt and completion tokens,
per model, ``"*"`` for any other) turn the answered calls into the ledger's ``cost_by_tier``.

What a test can make it do (config fields, set like the others with ``configure`` or ``POST /_config``;
a batch keeps the values in force when it was created):

- `batch_expire_after_lines`: n lines run, the rest never do; at the window's end the batch is
  ``expired``: the finished lines in its output file, the rest in its error file as ``batch_expired``.
  (A batch whose lines do not all fit in the window expires the same way.)
- `batch_shuffle_output`: the output file in an order of its own (fixed by `seed` and the batch id).
- `batch_fail_custom_ids` / `batch_fail_lines` (0-based positions in the input file): those lines answer
  500 with OpenAI's server-error body, in the error file.
- `batch_enqueued_token_limit`: a batch whose prompt tokens, with those of the model's batches still
  validating, in progress or finalizing, exceed it, ``failed`` with ``token_limit_exceeded``.
- `batch_lose_create_next`: the next n creates are performed (the batch exists and runs) but their HTTP
  response is cut off after its headers, so the client sees a connection error.
- `batch_hold`: the points where a request waits while its name is listed (configured away, or reset,
  it goes on as usual): ``"upload"`` (``POST /v1/files``, before the file is stored), ``"create"``
  (``POST /v1/batches``, before the batch is created), ``"created"`` (the batch is created and runs on its
  clock; its response waits), ``"retrieve"`` (``GET /v1/batches/{id}``), ``"content"``
  (``GET /v1/files/{id}/content``). A request whose client leaves while it waits ends there (499): nothing
  is stored or created for it (a ``"created"`` batch stays). ``FakeLLM.held()`` (``GET /_held``) counts
  the requests waiting at each point; ``FakeLLM.wait_held(point)`` waits, bounded, until they are there.
- `batch_answer_text`: {marker: text}: a line whose prompt holds the marker is answered 200 with that
  assistant text, as sent (a model can answer a NUL, ``"\\u0000"``, or half a surrogate pair,
  ``"\\ud800"``: the file is JSON, and JSON escapes carry both).
- `batch_answer_line`: {marker: raw line}: that line of the output file, verbatim (``{custom_id}`` in it
  replaced by the line's): a line of a shape no provider should send (``"message": "x"``,
  ``"usage": []``) or nested deeper than a JSON parser recurses.
- `batch_refuse`: [{"point", "status", "marker"}]: requests at that point answered that 4xx with
  OpenAI's error body (a batch of another project, 403; a file not downloadable, 400): ``"retrieve"``
  (``GET /v1/batches/{id}``) and ``"content"`` (``GET /v1/files/{id}/content``, its output and error
  files) for a batch with a line whose prompt holds the marker (any batch without one), ``"list"``
  (``GET /v1/batches``). Read when asked, not when the batch was created.
- `flex_unavailable_rate`: that share of flex calls (1.0: all) is refused 429 "resource unavailable"
  (decided per prompt and attempt, like `fail_rate`); nothing is billed for them.
- `flex_known`: false stands for a server without a flex tier: every flex call is refused 400, naming
  ``service_tier`` (as Azure OpenAI refuses an argument it does not know).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import secrets
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from tests.fake_llm import _POLL_S, LedgerEntry, _Decision, _error_body, estimate_tokens, prompt_text, user_text

if TYPE_CHECKING:
    from tests.fake_llm import FakeLLM

log = logging.getLogger(__name__)

CHAT_ENDPOINT = "/v1/chat/completions"
WINDOW_S = {"24h": 24 * 3600}  # the completion windows OpenAI accepts, in provider seconds
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
HOLD_POINTS = ("upload", "create", "created", "retrieve", "content")  # where `batch_hold` can keep a request
REFUSE_POINTS = ("retrieve", "content", "list")  # where `batch_refuse` can refuse a request
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
BATCH_FILE_LIFETIME_S = 30 * 24 * 3600  # files with purpose=batch expire after 30 days
ORGANIZATION = "org-fakellm"
ACTIVE = ("validating", "in_progress", "finalizing")
TERMINAL = ("failed", "completed", "expired", "cancelled")
# OpenAI's texts for what a line or a batch meets.
SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request could not be executed before the batch was cancelled."
TIMEOUT_MESSAGE = "The underlying call to the model timed out."
FLEX_UNKNOWN_MESSAGE = "Unrecognized request argument supplied: service_tier"
FLEX_UNAVAILABLE_MESSAGE = (
    "Resource unavailable: there is not enough flex capacity to serve this request now. Please retry later, "
    "or send it with service_tier 'auto'."
)

# The config this module owns, with its defaults (FakeLLM.config() lists them with its own).
DEFAULTS: dict[str, Any] = {
    "prices": {"*": [1.0, 4.0]},  # USD per million (prompt, completion) tokens, per model; "*" = any other
    "batch_price_factor": 0.5,  # what a batch line costs, relative to the same realtime call
    "flex_price_factor": 0.5,  # what a flex call costs, relative to the same realtime call
    "flex_unavailable_rate": 0.0,  # share of flex calls refused 429 "resource unavailable"
    "flex_known": True,  # False: flex calls are refused 400 naming service_tier
    "batch_time_scale": 1.0,  # real seconds per provider second (1/36000: a 24 h window lasts 2.4 s)
    "batch_validating_s": 30.0,  # provider seconds a batch validates
    "batch_line_s": 2.0,  # provider seconds each line takes (lines run one after the other)
    "batch_in_progress_s": None,  # provider seconds all the lines take together (overrides batch_line_s)
    "batch_finalizing_s": 30.0,  # provider seconds from the last line to completed
    "batch_cancelling_s": 30.0,  # provider seconds from cancelling to cancelled
    "batch_expire_after_lines": None,  # only that many lines run; the batch expires at the window's end
    "batch_shuffle_output": False,  # the output file in an order of its own
    "batch_fail_custom_ids": [],  # these lines answer 500
    "batch_fail_lines": [],  # the lines at these 0-based positions of the input file answer 500
    "batch_enqueued_token_limit": None,  # per model: prompt tokens of active batches; beyond -> failed
    "batch_lose_create_next": 0,  # the next n creates are performed but their response is cut off
    "batch_hold": [],  # the HOLD_POINTS where requests wait while listed
    "batch_answer_text": {},  # {marker: text}: lines whose prompt holds the marker answer that text
    "batch_answer_line": {},  # {marker: raw line}: their output line, verbatim ({custom_id} filled in)
    "batch_refuse": [],  # [{point, status, marker}]: those requests answered that 4xx
    "batch_max_lines": 50_000,  # OpenAI's limit on the requests of one input file
    "batch_max_file_bytes": 200 * 1024 * 1024,  # OpenAI's limit on the size of a batch input file
}


def _number(name: str, value: Any, *, nullable: bool = False, positive: bool = False, share: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a number {'> 0' if positive else '>= 0'}{' or null' if nullable else ''}")
    if share and value > 1:
        raise ValueError(f"{name} must be between 0 and 1")
    return float(value)


def _count(name: str, value: Any, *, nullable: bool = False, minimum: int = 0) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{' or null' if nullable else ''}")
    return value


def validate(name: str, value: Any) -> Any:
    """The value of one of this module's config fields, checked (ValueError says what is wrong)."""
    if name == "prices":
        if not isinstance(value, dict) or not all(
            isinstance(k, str)
            and isinstance(v, list | tuple)
            and len(v) == 2
            and all(not isinstance(p, bool) and isinstance(p, int | float) and p >= 0 for p in v)
            for k, v in value.items()
        ):
            raise ValueError('prices must map model names (or "*") to [prompt, completion] USD per million tokens')
        return {k: [float(v[0]), float(v[1])] for k, v in value.items()}
    if name in ("batch_price_factor", "flex_price_factor"):
        return _number(name, value)
    if name == "flex_unavailable_rate":
        return _number(name, value, share=True)
    if name == "batch_time_scale":
        return _number(name, value, positive=True)
    if name in ("batch_validating_s", "batch_line_s", "batch_finalizing_s", "batch_cancelling_s"):
        return _number(name, value)
    if name == "batch_in_progress_s":
        return _number(name, value, nullable=True)
    if name in ("batch_expire_after_lines", "batch_enqueued_token_limit"):
        return _count(name, value, nullable=True)
    if name == "batch_lose_create_next":
        return _count(name, value)
    if name in ("batch_max_lines", "batch_max_file_bytes"):
        return _count(name, value, minimum=1)
    if name in ("batch_shuffle_output", "flex_known"):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name == "batch_fail_custom_ids":
        if isinstance(value, str) or not isinstance(value, list | tuple) or not all(isinstance(c, str) for c in value):
            raise ValueError("batch_fail_custom_ids must be a list of custom_ids")
        return list(value)
    if name == "batch_fail_lines":
        if not isinstance(value, list | tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
        ):
            raise ValueError("batch_fail_lines must be a list of 0-based line positions")
        return list(value)
    if name in ("batch_answer_text", "batch_answer_line"):
        markers = value.items() if isinstance(value, dict) else None
        if markers is None or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in markers):
            raise ValueError(f"{name} must map markers (non-empty strings) to strings")
        return dict(value)
    if name == "batch_refuse":
        rules = value if isinstance(value, list | tuple) else None
        if rules is None or not all(
            isinstance(r, dict)
            and set(r) <= {"point", "status", "marker"}
            and r.get("point") in REFUSE_POINTS
            and isinstance(r.get("status"), int)
            and not isinstance(r.get("status"), bool)
            and 400 <= r["status"] < 500
            and isinstance(r.get("marker"), str | None)
            for r in rules
        ):
            raise ValueError(
                f"batch_refuse must be a list of {{point ({', '.join(REFUSE_POINTS)}), status (4xx), marker}}"
            )
        return [{"point": r["point"], "status": r["status"], "marker": r.get("marker")} for r in rules]
    if name == "batch_hold":
        if isinstance(value, str) or not isinstance(value, list | tuple) or not all(p in HOLD_POINTS for p in value):
            raise ValueError(f"batch_hold must be a list of points among {', '.join(HOLD_POINTS)}")
        return list(dict.fromkeys(value))
    raise ValueError(f"unknown config field: {name}")  # pragma: no cover


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def price_of(prices: dict[str, list[float]], model: str) -> tuple[float, float]:
    prompt, completion = prices.get(model) or prices.get("*") or [0.0, 0.0]
    return prompt, completion


def cost_usd(entry: LedgerEntry, prices: dict[str, list[float]]) -> float:
    """What an answered call cost (nothing for one that was not answered)."""
    if entry.status != 200:
        return 0.0
    prompt, completion = price_of(prices, entry.model)
    full = (entry.usage_prompt_tokens * prompt + entry.completion_tokens * completion) / 1_000_000
    return full * entry.price_factor


def cost_by_tier(entries: Iterable[LedgerEntry], prices: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per tier ("realtime", "flex", "batch"): the answered calls, their tokens and what they cost."""
    tiers: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry.status != 200:
            continue
        tier = tiers.setdefault(entry.tier, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0})
        tier["calls"] += 1
        tier["prompt_tokens"] += entry.usage_prompt_tokens
        tier["completion_tokens"] += entry.completion_tokens
        tier["cost_usd"] += cost_usd(entry, prices)
    for tier in tiers.values():
        tier["cost_usd"] = round(tier["cost_usd"], 9)
    return tiers


def _draw(seed: int, kind: str, key: str) -> float:
    """A number in [0, 1) fixed by (seed, kind, key)."""
    digest = hashlib.sha256(f"{seed}:{kind}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def flex_unavailable(rate: float, seed: int, prompt_sha256: str, attempt: int) -> _Decision | None:
    """The 429 a flex call gets when flex has no capacity for it (None: it is served)."""
    if not rate or _draw(seed, "flex", f"{prompt_sha256}:{attempt}") >= rate:
        return None
    body = _error_body(FLEX_UNAVAILABLE_MESSAGE, "service_unavailable_error", "resource_unavailable")
    return _Decision(429, "flex_unavailable", body=body)


# ------------------------------------------------------------------------------------------------------
# Files and batches


def _new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    account: str = ""  # the API key that made it: only that key sees it

    def as_object(self) -> dict[str, Any]:
        """The ``FileObject``."""
        expires_at = self.created_at + BATCH_FILE_LIFETIME_S if self.purpose in ("batch", "batch_output") else None
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "expires_at": expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass
class Line:
    index: int  # 0-based, in the input file
    custom_id: str
    body: dict[str, Any]
    start: float  # when the provider starts it (time.time() scale)
    finish: float  # when its answer is made (math.inf: never)
    ran: bool = False
    output: dict[str, Any] | None = None  # its line of the output or the error file, once it ran
    answered: bool = False  # answered 200 (output file), else the error file
    usage: tuple[int, int] = (0, 0)
    raw: str | None = None  # its output line as `batch_answer_line` writes it, verbatim


@dataclass
class StoredBatch:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    model: str | None
    created: float
    validated: float  # when it leaves validating
    window_end: float
    finalizing_s: float  # real seconds
    cancelling_s: float  # real seconds
    lines: list[Line]
    errors: list[dict[str, Any]]  # why it fails validation (empty: it does not)
    knobs: dict[str, Any]  # the config in force when it was created
    status: str = "validating"
    in_progress_at: float | None = None
    finalizing_at: float | None = None
    completed_at: float | None = None
    failed_at: float | None = None
    expired_at: float | None = None
    cancelling_at: float | None = None
    cancelled_at: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    order: list[int] = field(default_factory=list)  # the lines in the order they ran
    account: str = ""  # the API key that made it: only that key sees it (and its files)

    def as_object(self) -> dict[str, Any]:
        """The ``Batch``."""
        ran = [line for line in self.lines if line.ran]
        prompt = sum(line.usage[0] for line in ran)
        completion = sum(line.usage[1] for line in ran)

        def stamp(value: float | None) -> int | None:
            return None if value is None else int(value)

        counted = self.status not in ("validating", "failed")
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": {"object": "list", "data": self.errors} if self.status == "failed" else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created),
            "in_progress_at": stamp(self.in_progress_at),
            "expires_at": int(self.window_end),
            "finalizing_at": stamp(self.finalizing_at),
            "completed_at": stamp(self.completed_at),
            "failed_at": stamp(self.failed_at),
            "expired_at": stamp(self.expired_at),
            "cancelling_at": stamp(self.cancelling_at),
            "cancelled_at": stamp(self.cancelled_at),
            "request_counts": {
                "total": len(self.lines) if counted else 0,
                "completed": sum(line.answered for line in ran),
                "failed": sum(not line.answered for line in ran),
            },
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            },
            "metadata": self.metadata,
        }


def _prompt_of(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    return prompt_text(messages) if isinstance(messages, list) and all(isinstance(m, dict) for m in messages) else ""


def _marked(by_marker: dict[str, str], prompt: str) -> str | None:
    """What a knob keyed by markers says for the line whose prompt is `prompt` (None: nothing)."""
    return next((value for marker, value in by_marker.items() if marker in prompt), None)


def _line_error(line: int | None, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "line": line, "message": message, "param": param}


def check_input(content: bytes, endpoint: str, max_lines: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The requests of a batch input file, and what is wrong with it (OpenAI's validation errors, each
    with its 1-based line)."""
    errors: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    try:
        rows = content.decode().splitlines()
    except UnicodeDecodeError:
        return [], [_line_error(None, "invalid_file_format", "The batch input file is not valid UTF-8 text.")]
    if not any(row.strip() for row in rows):
        return [], [_line_error(None, "empty_file", "The batch input file is empty.")]
    if len(rows) > max_lines:
        message = f"The batch input file has {len(rows):,} requests, over the maximum of {max_lines:,}."
        return [], [_line_error(None, "too_many_tasks", message)]
    seen: set[str] = set()
    model: str | None = None
    for number, row in enumerate(rows, 1):
        try:
            request = json.loads(row)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            errors.append(_line_error(number, "invalid_json_line", "This line is not parseable as valid JSON."))
            continue
        missing = [k for k in ("custom_id", "method", "url", "body") if k not in request]
        if missing:
            message = f"Missing required parameter: '{missing[0]}'."
            errors.append(_line_error(number, "invalid_request", message, missing[0]))
            continue
        custom_id, body = request["custom_id"], request["body"]
        if not isinstance(custom_id, str) or not custom_id:
            errors.append(_line_error(number, "invalid_request", "custom_id must be a non-empty string.", "custom_id"))
            continue
        if request["method"] != "POST":
            message = f"Invalid method '{request['method']}' for this request: only POST is supported."
            errors.append(_line_error(number, "invalid_request", message, "method"))
            continue
        if request["url"] != endpoint:
            message = "The provided URL for this request does not match the batch endpoint."
            errors.append(_line_error(number, "url_mismatch", message, "url"))
            continue
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            message = "Missing required parameter: 'body.model'."
            errors.append(_line_error(number, "invalid_request", message, "body.model"))
            continue
        if custom_id in seen:
            message = (
                "The custom_id for this request is a duplicate of another request. "
                "The custom_id parameter must be unique for each request in a batch."
            )
            errors.append(_line_error(number, "duplicate_custom_id", message, "custom_id"))
            continue
        if model is not None and body["model"] != model:
            message = (
                "The provided model for this request does not match the model of the other requests "
                "in the batch: all the requests of a batch must use the same model."
            )
            errors.append(_line_error(number, "model_mismatch", message, "body.model"))
            continue
        seen.add(custom_id)
        model = body["model"]
        requests.append(request)
    return requests, errors


def enqueued_tokens(requests: Iterable[dict[str, Any]]) -> int:
    """The prompt tokens a batch enqueues (what the per-model enqueued-token limit counts)."""
    total = 0
    for request in requests:
        messages = request["body"].get("messages")
        texts = prompt_text(messages) if isinstance(messages, list) else ""
        total += max(1, estimate_tokens(texts))
    return total


def schedule(requests: list[dict[str, Any]], start: float, knobs: dict[str, Any]) -> list[Line]:
    """When each line runs: one after the other from `start`; past `batch_expire_after_lines`, never."""
    scale = knobs["batch_time_scale"]
    total = knobs["batch_in_progress_s"]
    step = (total / max(1, len(requests)) if total is not None else knobs["batch_line_s"]) * scale
    stall = knobs["batch_expire_after_lines"]
    lines = []
    for index, request in enumerate(requests):
        begins = start + index * step
        finish = math.inf if stall is not None and index >= stall else begins + step
        lines.append(Line(index, request["custom_id"], request["body"], begins, finish))
    return lines


class _CutOff(Response):
    """A response whose headers are sent and whose body never is: uvicorn closes the connection, and the
    client sees it fail (the response to a request the server did perform, lost on the way)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.status_code, self.background = 200, None
        length = str(len(json.dumps(body).encode()))
        self.raw_headers = [(b"content-type", b"application/json"), (b"content-length", length.encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})


class BatchDesk:
    """The files and batches of one FakeLLM, its tier prices and the knobs above. It shares the
    FakeLLM's lock, so a batch line is recorded in the ledger as atomically as a realtime call."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.values: dict[str, Any] = _copy(DEFAULTS)
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, StoredBatch] = {}
        self.waiting: Counter[str] = Counter()  # requests held at each point of `batch_hold` now

    # -- config ------------------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        with self.llm._lock:
            return _copy(self.values)

    def check(self, changes: dict[str, Any]) -> dict[str, Any]:
        """`changes` validated (ValueError on the first bad one); nothing is applied."""
        return {name: validate(name, value) for name, value in changes.items()}

    def apply(self, values: dict[str, Any]) -> None:
        with self.llm._lock:
            self.values.update(values)

    def lose(self, batch_id: str) -> bool:
        """The provider loses a batch (it happens: a region's incident): from now on it answers 404 for it
        and lists it no more. Whether it had it."""
        with self.llm._lock:
            return self.batches.pop(batch_id, None) is not None

    def reset(self, config: bool = False) -> None:
        with self.llm._lock:
            self.files.clear()
            self.batches.clear()
            if config:
                self.values = _copy(DEFAULTS)

    # -- holds -------------------------------------------------------------------------------------

    def holds(self, point: str) -> bool:
        """Whether a request reaching `point` waits there now."""
        with self.llm._lock:
            return point in self.values["batch_hold"]

    def count_held(self, point: str, change: int) -> None:
        with self.llm._lock:
            self.waiting[point] += change

    def held(self) -> dict[str, int]:
        """How many requests wait at each point now."""
        with self.llm._lock:
            return {point: self.waiting[point] for point in HOLD_POINTS}

    def wait_held(self, point: str, count: int = 1, timeout: float = 5.0) -> bool:
        """Waits until exactly `count` requests wait at `point`; False when they are not there after `timeout` s."""
        if point not in HOLD_POINTS:
            raise ValueError(f"no hold point {point!r}: the points are {', '.join(HOLD_POINTS)}")
        deadline = time.monotonic() + timeout
        while self.held()[point] != count:
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def price_factor(self, tier: str) -> float:
        return {"batch": self.values["batch_price_factor"], "flex": self.values["flex_price_factor"]}.get(tier, 1.0)

    def flex_decision(self, prompt_sha256: str, attempt: int) -> _Decision | None:
        """Called under the lock, for a flex call that would otherwise be answered."""
        if not self.values["flex_known"]:
            body = _error_body(FLEX_UNKNOWN_MESSAGE, "invalid_request_error", None, "service_tier")
            return _Decision(400, "flex_unknown", body=body)
        return flex_unavailable(self.values["flex_unavailable_rate"], self.llm.seed, prompt_sha256, attempt)

    def costs(self, entries: Iterable[LedgerEntry]) -> dict[str, dict[str, Any]]:
        return cost_by_tier(entries, self.config()["prices"])

    # -- files -------------------------------------------------------------------------------------

    def add_file(self, filename: str, purpose: str, content: bytes, account: str = "") -> StoredFile:
        stored = StoredFile(_new_id("file-"), filename, purpose, content, int(time.time()), account)
        with self.llm._lock:
            self.files[stored.id] = stored
        return stored

    # -- batches -----------------------------------------------------------------------------------

    def create(
        self, input_file: StoredFile, endpoint: str, window: str, metadata: dict[str, str] | None
    ) -> StoredBatch:
        """A batch of `input_file`'s requests, the file's account's."""
        now = time.time()
        with self.llm._lock:
            self.tick(now)
            knobs = _copy(self.values)
            scale = knobs["batch_time_scale"]
            requests, errors = check_input(input_file.content, endpoint, knobs["batch_max_lines"])
            model = requests[0]["body"]["model"] if requests else None
            limit = knobs["batch_enqueued_token_limit"]
            if not errors and limit is not None and model is not None:
                queued = sum(
                    enqueued_tokens({"body": line.body} for line in b.lines)
                    for b in self.batches.values()
                    if b.model == model and b.status in ACTIVE
                )
                if queued + enqueued_tokens(requests) > limit:
                    message = (
                        f"Enqueued token limit reached for {model} in organization {ORGANIZATION}. "
                        f"Limit: {limit:,} enqueued tokens. "
                        "Please try again once some in_progress batches have been completed."
                    )
                    errors = [_line_error(None, "token_limit_exceeded", message)]
            validated = now + knobs["batch_validating_s"] * scale
            batch = StoredBatch(
                id=_new_id("batch_"),
                input_file_id=input_file.id,
                endpoint=endpoint,
                completion_window=window,
                metadata=metadata,
                model=model,
                created=now,
                validated=validated,
                window_end=now + WINDOW_S[window] * scale,
                finalizing_s=knobs["batch_finalizing_s"] * scale,
                cancelling_s=knobs["batch_cancelling_s"] * scale,
                lines=[] if errors else schedule(requests, validated, knobs),
                errors=errors,
                knobs=knobs,
                account=input_file.account,
            )
            self.batches[batch.id] = batch
            return batch

    def marked(self, batch: StoredBatch | None, marker: str) -> bool:
        """Whether a line of `batch` has `marker` in its prompt."""
        with self.llm._lock:
            lines = batch.lines if batch is not None else []
            return any(marker in _prompt_of(line.body) for line in lines)

    def batch(self, batch_id: str, account: str) -> StoredBatch | None:
        """The account's batch `batch_id` (None: no such batch, or another account's)."""
        with self.llm._lock:
            batch = self.batches.get(batch_id)
            return batch if batch is not None and batch.account == account else None

    def batch_of_file(self, file_id: str) -> StoredBatch | None:
        """The batch whose output or error file `file_id` is."""
        with self.llm._lock:
            return next((b for b in self.batches.values() if file_id in (b.output_file_id, b.error_file_id)), None)

    def take_lost_create(self) -> bool:
        """Whether this create's response is to be lost (counts down `batch_lose_create_next`)."""
        with self.llm._lock:
            if self.values["batch_lose_create_next"] <= 0:
                return False
            self.values["batch_lose_create_next"] -= 1
            return True

    def cancel(self, batch: StoredBatch) -> str | None:
        """Starts cancelling `batch`; why it cannot be cancelled otherwise."""
        now = time.time()
        with self.llm._lock:
            self.advance(batch, now)
            if batch.status not in ("validating", "in_progress"):
                return f"Cannot cancel a batch with status '{batch.status}'."
            batch.status, batch.cancelling_at = "cancelling", now
            return None

    def tick(self, now: float | None = None) -> None:
        """Brings every batch up to the clock: runs the lines whose turn has come, moves statuses on."""
        now = time.time() if now is None else now
        with self.llm._lock:
            for batch in self.batches.values():
                self.advance(batch, now)

    def advance(self, batch: StoredBatch, now: float) -> None:
        if batch.status == "validating" and now >= batch.validated:
            if batch.errors:
                batch.status, batch.failed_at = "failed", batch.validated
                return
            batch.status, batch.in_progress_at = "in_progress", batch.validated
        if batch.status == "in_progress":
            self._run_lines(batch, min(now, batch.window_end))
            if all(line.ran for line in batch.lines):
                last = max((line.finish for line in batch.lines), default=batch.validated)
                batch.status, batch.finalizing_at = "finalizing", last
            elif now >= batch.window_end:
                batch.status, batch.expired_at = "expired", batch.window_end
                self._write_files(batch, "batch_expired", EXPIRED_MESSAGE)
        if batch.status == "finalizing" and batch.finalizing_at is not None:
            if now >= batch.finalizing_at + batch.finalizing_s:
                batch.status, batch.completed_at = "completed", batch.finalizing_at + batch.finalizing_s
                self._write_files(batch, "batch_expired", EXPIRED_MESSAGE)
        if batch.status == "cancelling" and batch.cancelling_at is not None:
            if batch.in_progress_at is not None:
                self._run_lines(batch, min(batch.cancelling_at, batch.window_end))
            if now >= batch.cancelling_at + batch.cancelling_s:
                batch.status, batch.cancelled_at = "cancelled", batch.cancelling_at + batch.cancelling_s
                self._write_files(batch, "batch_cancelled", CANCELLED_MESSAGE)

    def _run_lines(self, batch: StoredBatch, until: float) -> None:
        for line in batch.lines:
            if not line.ran and line.finish <= until:
                self._run_line(batch, line)

    def _run_line(self, batch: StoredBatch, line: Line) -> None:
        """Answers one line as a realtime call would be answered, and records it in the ledger."""
        llm, knobs, body = self.llm, batch.knobs, line.body
        messages = body.get("messages")
        model = str(body.get("model") or "")
        request_id = secrets.token_hex(16)
        line.ran = True
        batch.order.append(line.index)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            error = _error_body("invalid request: messages must be a list of objects", "invalid_request_error", None)
            self._record_refusal(batch, line, model, 400, "invalid_request")
            line.output = self._output(line, 400, request_id, error)
            return
        prompt, user = prompt_text(messages), user_text(messages)
        sha, tokens = hashlib.sha256(prompt.encode()).hexdigest(), max(1, estimate_tokens(prompt))
        attempt = llm._attempts[sha]
        llm._attempts[sha] += 1
        context = llm.context_size()
        decision = llm._decide_content(sha, tokens, prompt, attempt)
        failing = line.custom_id in knobs["batch_fail_custom_ids"] or line.index in knobs["batch_fail_lines"]
        if decision.status == 200 and not decision.hung and failing:
            body_500 = _error_body(SERVER_ERROR_MESSAGE, "server_error", None)
            decision = _Decision(500, "batch_fail", body=body_500)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        entry = LedgerEntry(
            line.start,
            line.finish,
            model,
            decision.status,
            sha,
            prompt,
            user,
            len(prompt),
            tokens,
            0,
            attempt=attempt,
            in_flight=0,
            error=decision.error,
            over_budget=decision.over_budget,
            hung=decision.hung,
            max_tokens=asked if isinstance(asked, int) and not isinstance(asked, bool) else None,
            num_ctx=context,
            frequency_penalty=body.get("frequency_penalty"),
            tier="batch",
            price_factor=knobs["batch_price_factor"],
            batch_id=batch.id,
            custom_id=line.custom_id,
        )
        if decision.hung:  # the provider gives the line up: no response, an error
            entry.status, entry.error = 504, "request_timeout"
            line.output = self._error_line(line, "request_timeout", TIMEOUT_MESSAGE)
        elif decision.status != 200:
            line.output = self._output(line, decision.status, request_id, decision.body or {})
        else:
            reply = llm._reply(messages, body, tokens, llm.dialect, context)
            if (text := _marked(knobs["batch_answer_text"], prompt)) is not None:
                reply = replace(reply, text=text)
            entry.truncated_to = reply.truncated_to
            entry.completion_tokens, entry.finish_reason = reply.completion_tokens, reply.finish_reason
            usage = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            }
            answer = {
                "id": f"chatcmpl-{sha[:12]}-{secrets.token_hex(4)}",
                "object": "chat.completion",
                "created": int(line.finish),
                "model": model,
                "system_fingerprint": "fake-llm",
                "service_tier": "default",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": reply.finish_reason,
                        "message": {"role": "assistant", "content": reply.text},
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            }
            line.output = self._output(line, 200, request_id, answer)
            line.answered, line.usage = True, (reply.prompt_tokens, reply.completion_tokens)
            line.raw = _marked(knobs["batch_answer_line"], prompt)
        llm.ledger.append(entry)

    def _record_refusal(self, batch: StoredBatch, line: Line, model: str, status: int, error: str) -> None:
        entry = LedgerEntry(line.start, line.finish, model, status, hashlib.sha256(b"").hexdigest(), "", "", 0, 0, 0)
        entry.error, entry.in_flight, entry.tier, entry.batch_id = error, 0, "batch", batch.id
        entry.price_factor, entry.custom_id = batch.knobs["batch_price_factor"], line.custom_id
        self.llm.ledger.append(entry)

    @staticmethod
    def _output(line: Line, status: int, request_id: str, body: dict[str, Any]) -> dict[str, Any]:
        response = {"status_code": status, "request_id": request_id, "body": body}
        return {"id": _new_id("batch_req_"), "custom_id": line.custom_id, "response": response, "error": None}

    @staticmethod
    def _error_line(line: Line, code: str, message: str) -> dict[str, Any]:
        return {
            "id": _new_id("batch_req_"),
            "custom_id": line.custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }

    def _write_files(self, batch: StoredBatch, unrun_code: str, unrun_message: str) -> None:
        """The output file (answered lines) and the error file (the others, and the lines that never ran)."""
        order = list(batch.order)
        if batch.knobs["batch_shuffle_output"]:
            random.Random(f"{self.llm.seed}:{batch.id}").shuffle(order)
        ran = [batch.lines[i] for i in order]
        answered = [line.output for line in ran if line.answered and line.output is not None]
        failed = [line.output for line in ran if not line.answered and line.output is not None]
        failed += [self._error_line(line, unrun_code, unrun_message) for line in batch.lines if not line.ran]

        def jsonl(rows: list[dict[str, Any]]) -> bytes:
            # ASCII, escaped: a lone surrogate in an answer is JSON ("\ud800"), never UTF-8.
            return "".join(json.dumps(row) + "\n" for row in rows).encode()

        raw = {line.custom_id: line.raw for line in ran if line.raw is not None}
        if raw:  # lines written as the knob says, verbatim
            answered = [row for row in answered if row["custom_id"] not in raw]
        if answered or raw:
            name = f"batch_{batch.id}_output.jsonl"
            verbatim = "".join(text.replace("{custom_id}", custom_id) + "\n" for custom_id, text in raw.items())
            content = jsonl(answered) + verbatim.encode("utf-8", "surrogatepass")
            batch.output_file_id = self.add_file(name, "batch_output", content, batch.account).id
        if failed:
            name = f"batch_{batch.id}_error.jsonl"
            batch.error_file_id = self.add_file(name, "batch_output", jsonl(failed), batch.account).id

    def listing(self, after: str | None, limit: int, account: str = "") -> dict[str, Any]:
        """``GET /v1/batches``: the account's, newest first, the page after the batch `after`."""
        with self.llm._lock:
            self.tick()
            ours = [b for b in self.batches.values() if b.account == account]
            ordered = sorted(ours, key=lambda b: b.created, reverse=True)
            ids = [b.id for b in ordered]
            start = ids.index(after) + 1 if after in ids else 0
            page = [b.as_object() for b in ordered[start : start + limit]]
            return {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": start + limit < len(ordered),
            }


# ------------------------------------------------------------------------------------------------------
# HTTP


def _invalid(message: str, param: str | None = None, status: int = 400, code: str | None = None) -> JSONResponse:
    return JSONResponse(_error_body(message, "invalid_request_error", code, param), status)


def _check_metadata(metadata: Any) -> str | None:
    """Why `metadata` is not what OpenAI accepts (None: it is)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return "Invalid type for 'metadata': expected an object."
    if len(metadata) > MAX_METADATA_PAIRS:
        return f"Invalid 'metadata': too many properties. Expected at most {MAX_METADATA_PAIRS}, got {len(metadata)}."
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            return f"Invalid 'metadata': key '{key[:20]}...' is longer than {MAX_METADATA_KEY} characters."
        if not isinstance(value, str):
            return f"Invalid type for 'metadata.{key}': expected a string."
        if len(value) > MAX_METADATA_VALUE:
            return f"Invalid 'metadata.{key}': string too long. Expected at most {MAX_METADATA_VALUE} characters."
    return None


def mount(app: FastAPI, llm: FakeLLM) -> None:
    """Adds the Files and Batch endpoints to `app` (at /v1 and at the root, like the chat endpoint).
    They answer 404 in the llamacpp and ollama dialects, which have no Batch API."""
    desk = llm.batches
    stopping = app.state.stopping

    def served() -> bool:
        return llm.dialect == "openai"

    def not_found() -> JSONResponse:
        return JSONResponse({"detail": "Not Found"}, 404)

    def no_file(file_id: str) -> JSONResponse:
        return _invalid(f"No such File object: {file_id}", "id", 404)

    def no_batch(batch_id: str) -> JSONResponse:
        return _invalid(f"No batch found with id '{batch_id}'.", "id", 404)

    def account(request: Request) -> str:
        """Whose request it is: its API key (``Authorization: Bearer <key>``)."""
        return request.headers.get("authorization", "").removeprefix("Bearer ").strip()

    def refused(point: str, batch: StoredBatch | None = None) -> JSONResponse | None:
        """The 4xx `batch_refuse` answers at `point` (about `batch`), if a rule says so."""
        for rule in desk.config()["batch_refuse"]:
            if rule["point"] == point and (rule["marker"] is None or desk.marked(batch, rule["marker"])):
                status = rule["status"]
                kind = {401: "authentication_error", 403: "permission_error"}.get(status, "invalid_request_error")
                return JSONResponse(_error_body(f"The request was refused ({status}).", kind, None), status)
        return None

    async def hold(point: str, request: Request) -> Response | None:
        """Keeps the request at `point` while `batch_hold` lists it. None: it goes on; else what it gets
        instead, its client having left (499: nothing more happens for it) or the server stopping (503)."""
        if not desk.holds(point):
            return None
        desk.count_held(point, 1)
        try:
            while desk.holds(point):
                if stopping.is_set():
                    return JSONResponse(_error_body("the stand-in is shutting down", "server_error", None), 503)
                if await request.is_disconnected():
                    log.info("a request held at %r was left by its client", point)
                    return Response(status_code=499)
                await asyncio.sleep(_POLL_S)
            return None
        finally:
            desk.count_held(point, -1)

    async def upload(request: Request) -> Response:
        if not served():
            return not_found()
        form = await request.form()
        upload, purpose = form.get("file"), form.get("purpose")
        if purpose not in FILE_PURPOSES:
            return _invalid(f"Invalid value for 'purpose': expected one of {', '.join(FILE_PURPOSES)}.", "purpose")
        if upload is None or isinstance(upload, str):
            return _invalid("Missing required parameter: 'file'.", "file")
        content = await upload.read()
        limit = desk.config()["batch_max_file_bytes"]
        if purpose == "batch" and len(content) > limit:
            message = (
                f"The file is {len(content):,} bytes, over the maximum of {limit:,} bytes for a batch input file. "
                "Split it into smaller files."
            )
            return _invalid(message, "file")
        if (instead := await hold("upload", request)) is not None:
            return instead
        stored = desk.add_file(upload.filename or "upload.jsonl", str(purpose), content, account(request))
        return JSONResponse(stored.as_object())

    def find_file(file_id: str, request: Request) -> StoredFile | None:
        with llm._lock:
            desk.tick()
            stored = desk.files.get(file_id)
            return stored if stored is not None and stored.account == account(request) else None

    async def get_file(file_id: str, request: Request) -> Response:
        if not served():
            return not_found()
        stored = find_file(file_id, request)
        return JSONResponse(stored.as_object()) if stored else no_file(file_id)

    async def file_content(file_id: str, request: Request) -> Response:
        if not served():
            return not_found()
        if (instead := await hold("content", request)) is not None:
            return instead
        if (instead := refused("content", desk.batch_of_file(file_id))) is not None:
            return instead
        stored = find_file(file_id, request)
        return Response(stored.content, media_type="application/octet-stream") if stored else no_file(file_id)

    async def delete_file(file_id: str, request: Request) -> Response:
        if not served():
            return not_found()
        with llm._lock:
            if find_file(file_id, request) is None:
                return no_file(file_id)
            desk.files.pop(file_id)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    async def create_batch(request: Request) -> Response:
        if not served():
            return not_found()
        try:
            data = await request.json()
        except ValueError:
            return _invalid("We could not parse the JSON body of your request.")
        if not isinstance(data, dict):
            return _invalid("The body of your request must be a JSON object.")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(data.get(name), str):
                return _invalid(f"Missing required parameter: '{name}'.", name)
        if data["endpoint"] != CHAT_ENDPOINT:
            return _invalid(
                f"Invalid value for 'endpoint': this server serves batches for '{CHAT_ENDPOINT}' only.", "endpoint"
            )
        if data["completion_window"] not in WINDOW_S:
            return _invalid("Invalid value for 'completion_window': supported values are: '24h'.", "completion_window")
        if (problem := _check_metadata(data.get("metadata"))) is not None:
            return _invalid(problem, "metadata")
        stored = find_file(data["input_file_id"], request)
        if stored is None:
            return _invalid(f"No such File object: {data['input_file_id']}", "input_file_id", 404)
        if stored.purpose != "batch":
            return _invalid(
                f"Invalid 'input_file_id': {stored.id} was uploaded with purpose '{stored.purpose}', not 'batch'.",
                "input_file_id",
            )
        if (instead := await hold("create", request)) is not None:
            return instead
        batch = desk.create(stored, data["endpoint"], data["completion_window"], data.get("metadata"))
        answer = batch.as_object()  # the batch as created, however late the response leaves
        if (instead := await hold("created", request)) is not None:
            return instead
        if desk.take_lost_create():
            log.warning("the response to the create of %s is cut off (batch_lose_create_next)", batch.id)
            return _CutOff(answer)
        return JSONResponse(answer)

    async def get_batch(batch_id: str, request: Request) -> Response:
        if not served():
            return not_found()
        if (instead := await hold("retrieve", request)) is not None:
            return instead
        if (instead := refused("retrieve", desk.batch(batch_id, account(request)))) is not None:
            return instead
        with llm._lock:
            desk.tick()
            batch = desk.batch(batch_id, account(request))
            return JSONResponse(batch.as_object()) if batch else no_batch(batch_id)

    async def list_batches(request: Request, after: str | None = None, limit: int = 20) -> Response:
        if not served():
            return not_found()
        if not 1 <= limit <= 100:
            return _invalid("Invalid 'limit': expected an integer between 1 and 100.", "limit")
        if (instead := refused("list")) is not None:
            return instead
        return JSONResponse(desk.listing(after, limit, account(request)))

    async def cancel_batch(batch_id: str, request: Request) -> Response:
        if not served():
            return not_found()
        batch = desk.batch(batch_id, account(request))
        if batch is None:
            return no_batch(batch_id)
        if (problem := desk.cancel(batch)) is not None:
            return _invalid(problem, status=409)
        with llm._lock:
            return JSONResponse(batch.as_object())

    for prefix in ("/v1", ""):
        app.add_api_route(f"{prefix}/files", upload, methods=["POST"])
        app.add_api_route(f"{prefix}/files/{{file_id}}", get_file, methods=["GET"])
        app.add_api_route(f"{prefix}/files/{{file_id}}/content", file_content, methods=["GET"])
        app.add_api_route(f"{prefix}/files/{{file_id}}", delete_file, methods=["DELETE"])
        app.add_api_route(f"{prefix}/batches", create_batch, methods=["POST"])
        app.add_api_route(f"{prefix}/batches", list_batches, methods=["GET"])
        app.add_api_route(f"{prefix}/batches/{{batch_id}}", get_batch, methods=["GET"])
        app.add_api_route(f"{prefix}/batches/{{batch_id}}/cancel", cancel_batch, methods=["POST"])
