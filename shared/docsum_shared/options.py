"""What a submitter can ask of a task's summaries, stored with the task and applied to every request
(SummaryRequest.asked). Part of the event contract: it imports nothing but pydantic."""

from __future__ import annotations

import json
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

# How a task's LLM calls are sent: "realtime" at the provider's default tier, "flex" at its flex tier
# (about half the price, slower, may be refused for lack of capacity). A new mode is one more name here.
Mode = Literal["realtime", "flex"]
MODES: tuple[str, ...] = get_args(Mode)


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
    mode: Mode | None = Field(
        None,
        description='How the LLM calls are sent: "realtime", or "flex" (about half the price, slower, may wait for '
        "capacity); null: the deployment's default (DOCSUM_LLM_MODE).",
    )

    @classmethod
    def from_stored(cls, stored: str | dict | None) -> TaskOptions:
        if isinstance(stored, str):
            stored = json.loads(stored)
        return cls.model_validate(stored or {})
