"""What a submitter can ask of a task's summaries, stored with the task and applied to every request
(SummaryRequest.asked). Part of the event contract: it imports nothing but pydantic."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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

    @classmethod
    def from_stored(cls, stored: str | dict | None) -> TaskOptions:
        if isinstance(stored, str):
            stored = json.loads(stored)
        return cls.model_validate(stored or {})
