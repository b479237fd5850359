"""What a submitter can ask of a task's summaries, stored with the task and applied to every request
(SummaryRequest.asked). Part of the event contract: it imports nothing but pydantic."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

# How a task's LLM calls are sent: "realtime" at the provider's default tier, "flex" at its flex tier
# (about half the price, slower, may be refused for lack of capacity), "batch" through the provider's
# Batch API for the chunks (half the price, answered within its window) and flex for the merges.
# A new mode is one more name here.
Mode = Literal["realtime", "flex", "batch"]
MODES: tuple[str, ...] = get_args(Mode)
# Which of its owner's work goes first (the summarizer's admission, docsum_summarizer/schedule.py): urgent
# (also before other owners' normal work, within a bounded credit of its owner's own share), normal, or
# background (after everyone's normal work, until it has waited long enough).
TaskPriority = Literal["urgent", "normal", "background"]
PRIORITIES: tuple[str, ...] = get_args(TaskPriority)


class TaskOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    strict: bool = Field(
        False,
        description="Fail a document when any of its chunks failed, instead of summarizing the rest and saying so.",
    )
    language: str | None = Field(
        None,
        min_length=1,
        max_length=40,
        description='The summaries\' language ("en", "zh", "French"...); null: each document\'s own language.',
    )
    length: Literal["brief", "standard", "detailed"] = Field("standard", description="How long the summaries are.")
    style: Literal["prose", "bullets"] = Field("prose", description="Paragraphs, or bullet points.")
    support: Literal["all", "strict"] = Field(
        "all",
        description='Which summary sentences are shown: "all", each with its support (an unsupported one marked); '
        '"strict": a sentence its sources do not support is left out of the summary texts and of what the merges '
        "above it are made from (it stays in the summary's sentences, labelled unsupported).",
    )
    mode: Mode | None = Field(
        None,
        description='How the LLM calls are sent: "realtime"; "flex" (about half the price, slower, may wait for '
        'capacity); or "batch" (the chunks through the provider\'s Batch API at about half the price, answered '
        "within hours); null: the deployment's default (DOCSUM_LLM_MODE).",
    )
    priority: TaskPriority | None = Field(
        None,
        description="Which of its owner's work goes first: \"urgent\" (also before other owners' normal work, "
        'spending its owner\'s own share early), "normal", or "background" (when nothing else waits, or once it has '
        "waited DOCSUM_BACKGROUND_AFTER_S); null: normal. Owners share the LLM fairly whatever their priorities.",
    )
    deadline: AwareDatetime | None = Field(
        None,
        description="When the task must be finished: an ISO 8601 instant with its zone, kept in UTC. In batch mode, a "
        "provider's batch that would end later is cancelled and the rest sent in realtime; null: no deadline.",
    )

    previous_task: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:-]{1,64}$",
        description="The id of a task of the same owner whose documents this task's are new versions of, matched "
        "by document key (intake's document_key) or else by filename: each document's view then says what of its "
        "summary changed. The owner's result cache answers what did not change, with or without it.",
    )

    @field_validator("deadline", mode="before")
    @classmethod
    def _an_instant(cls, value: object) -> object:
        # A number would pass as a Unix time; the contract says an ISO 8601 instant, and only that is taken.
        if isinstance(value, int | float):
            raise ValueError("a deadline is an ISO 8601 instant with its zone, such as 2026-12-03T08:00:00Z")
        return value

    @field_validator("deadline")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        try:
            return value.astimezone(UTC) if value is not None else None
        except OverflowError:  # year 1 or 9999 moved past the calendar's end by its offset
            raise ValueError("the deadline is outside the years 1-9999 in UTC") from None

    @classmethod
    def from_stored(cls, stored: str | dict | None) -> TaskOptions:
        if isinstance(stored, str):
            stored = json.loads(stored)
        return cls.model_validate(stored or {})


# How far ahead a deadline may be: the providers' batch windows are 24 hours, and a week leaves room.
DEADLINE_HORIZON = timedelta(days=7)
# A duration from now: days, hours, minutes, seconds, in that order, each at most once ("1h30m").
_DURATION = re.compile(r"(?:([0-9]{1,9})d)?(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?")
_FORMS = "a duration from now (45m, 6h, 2d, 1h30m) or an ISO 8601 instant with its zone (2026-12-03T08:00:00Z)"


def deadline_from(text: str, now: datetime) -> datetime:
    """The instant a deadline names, in UTC: `text` is a duration from `now` (aware) or an ISO 8601 instant
    with its zone. ValueError, with what to give instead, when it is malformed, not after `now`, or more
    than DEADLINE_HORIZON after it."""
    given = text.strip()
    duration = _DURATION.fullmatch(given)
    if given and duration:
        days, hours, minutes, seconds = (int(part or 0) for part in duration.groups())
        ahead = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if ahead > DEADLINE_HORIZON:  # checked before adding: a huge duration is no date at all
            raise ValueError(
                f"{given} is more than {DEADLINE_HORIZON.days} days away; give at most {DEADLINE_HORIZON.days}d"
            )
        instant = now + ahead
    else:
        try:
            instant = datetime.fromisoformat(given)
        except ValueError:
            raise ValueError(f"{given!r} is not {_FORMS}") from None
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError(f"{given} has no zone: add Z (UTC) or an offset such as +01:00")
    if (problem := deadline_error(instant, now)) is not None:
        hint = "" if instant > now else " or a duration from now (6h)"
        raise ValueError(f"{given} {problem}{hint}")
    return instant.astimezone(UTC)


def deadline_error(instant: datetime, now: datetime) -> str | None:
    """Why the aware `instant` cannot be a deadline set at `now` (None: it can), what to give instead
    following: not after `now`, or more than DEADLINE_HORIZON after it. The gateway's rule, and the
    intake's for a task published on Kafka (whose deadline no gateway saw): a time between two instants
    is always a date, so an instant at the calendar's ends is judged like any other."""
    if instant - now > DEADLINE_HORIZON:
        return f"is more than {DEADLINE_HORIZON.days} days away; give an earlier instant"
    if instant <= now:
        return "is not in the future; give a later instant"
    return None
