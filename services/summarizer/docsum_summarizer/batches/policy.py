"""Batch mode's decisions, pure functions of what is stored and what the provider said."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_shared.errors import Kind, LLMError, classify
from docsum_shared.options import Mode
from docsum_shared.settings import LLMSettings
from docsum_shared.states import LINE_LIVE as LIVE
from docsum_shared.states import BatchState, LineStatus


def batch_endpoint(settings: LLMSettings) -> str:
    """The endpoint a batch and its lines belong to: the provider's URL, the model and the account. Two
    accounts on one URL see only their own batches at the provider, so each has its own batches, lock
    and driver here. The account is named by a hash of its API key: the key itself is never stored nor
    logged. (A new key is a new account here: a batch made with the old one is polled with the old.)"""
    account = hashlib.sha256((settings.openai_api_key or "").encode()).hexdigest()[:16]
    return f"{settings.openai_base_url or 'openai'}|{settings.llm_model}|{account}"


# The metadata key that names our batch at the provider: a batch created but not recorded is found by it.
BATCH_KEY = "docsum_batch"
TASK_KEY = "docsum_task"
__all__ = ["LIVE", "BatchState", "LineStatus"]  # the states are the read model's too: shared


@dataclass(frozen=True)
class ChunkLine:
    """A chunk's line, as the chunk handler sees it."""

    status: LineStatus
    custom_id: str


class Route(enum.Enum):
    CALL = "call"  # call the provider now (realtime, or flex)
    QUEUE = "queue"  # queue the request as a batch line
    TAKE_ANSWER = "take_answer"  # the batch answered it: complete from the result cache


def route(mode: Mode, line: ChunkLine | None, can_batch: bool) -> Route:
    """How a leased chunk is summarized."""
    if line is not None and line.status is LineStatus.ANSWERED:
        return Route.TAKE_ANSWER  # paid already, whatever the mode is now
    if mode != "batch" or not can_batch:
        return Route.CALL
    if line is None or line.status is LineStatus.DROPPED:
        return Route.QUEUE
    return Route.CALL  # sent back by its batch


def call_mode(mode: Mode | None, line: ChunkLine | None) -> Mode | None:
    """The mode of a call the batch sent back: realtime, to finish before the deadline it may be racing."""
    return "realtime" if line is not None and line.status is LineStatus.REALTIME else mode


def request_json(request: SummaryRequest) -> dict[str, Any]:
    return asdict(request)


def request_from(stored: dict[str, Any]) -> SummaryRequest:
    fields = dict(stored)
    return SummaryRequest(
        **{
            **fields,
            "kind": SummaryKind(fields["kind"]),
            "texts": tuple(fields.get("texts") or ()),
            "labels": tuple(fields.get("labels") or ()),
        }
    )


# --- the batch's outcome ----------------------------------------------------------------------------


class Ending(enum.StrEnum):
    """How an ended batch ends for docsum (its provider status, read)."""

    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    SPLIT = "split"  # refused as over the enqueued-token cap: its lines go again in two halves
    FAILED = "failed"  # refused for another reason: its lines go realtime
    LOST = "lost"  # the provider no longer knows it: its lines are queued again


def ending(provider_status: str, errors: tuple[str, ...], lines: int) -> Ending:
    if provider_status == "failed":
        return Ending.SPLIT if "token_limit_exceeded" in errors and lines > 1 else Ending.FAILED
    return Ending(provider_status) if provider_status in ("completed", "expired", "cancelled") else Ending.FAILED


def unrun_status(task_takes_work: bool) -> LineStatus:
    """Where a line goes that its ended batch never answered."""
    return LineStatus.REALTIME if task_takes_work else LineStatus.DROPPED


def halves(custom_ids: list[str]) -> tuple[list[str], list[str]]:
    middle = len(custom_ids) // 2
    return custom_ids[:middle], custom_ids[middle:]


# --- deadlines --------------------------------------------------------------------------------------


def must_finish_now(now: datetime, deadline: datetime | None, margin: timedelta) -> bool:
    """Whether what is left must go realtime now to end before the deadline. Compared as the time left:
    `deadline - margin` falls before year 1 for a deadline there (OverflowError), the time between
    two instants never does."""
    return deadline is not None and deadline - now <= margin


def will_miss(
    now: datetime, deadline: datetime | None, margin: timedelta, submitted_at: datetime | None, done: int, total: int
) -> bool:
    """Whether a running batch will not end in time: the deadline is within the margin, or, at the pace
    its lines are done so far, the rest would end after it."""
    if deadline is None:
        return False
    if must_finish_now(now, deadline, margin):
        return True
    if submitted_at is None or done <= 0 or total <= done:
        return False
    still_needs = (now - submitted_at) * ((total - done) / done)
    return still_needs > (deadline - now) - margin


# --- what a failure means for a batch, a task's gathering or a line -----------------------------------

# The longest reason stored on a batch or a line: enough to read, never a whole provider page.
REASON_CHARS = 500


def passes(exc: BaseException) -> bool:
    """Whether a step that raised `exc` is tried again at the next poll (the provider or the database
    away, the provider's rate limit): anything else is the item's own and ends it, alone."""
    return classify(exc) in (Kind.RETRIABLE, Kind.RATE_LIMITED)


def reason(exc: BaseException) -> str:
    """`exc` in words a user can read, storable: no NUL nor lone surrogate (PostgreSQL's text takes
    neither), at most REASON_CHARS. docsum's own errors speak for themselves; another (a bug, a shape
    the provider should not have sent) is named by its type."""
    said = str(exc) or type(exc).__name__
    return readable(said if isinstance(exc, LLMError) else f"{type(exc).__name__}: {said}")


def readable(said: str) -> str:
    """What a provider said (an error line's message, a batch's errors), storable: as `reason`."""
    clean = said.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return clean if len(clean) <= REASON_CHARS else clean[: REASON_CHARS - 1] + "…"
