"""Cost approval: a task never pays first and asks later.

Once a document's chunks exist, the task's planned LLM calls and their estimated cost are known (for
every document cut so far). A task over its owner's ceiling waits, AWAITING_APPROVAL, before any call
beyond what was already within the ceiling: `resume` approves it, `cancel` drops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

# What one chunk summary is expected to cost in completion tokens, for estimates before the calls.
EXPECTED_COMPLETION_TOKENS = 150


class Ceiling(BaseModel):
    """The most one task may cost before its owner approves it (None: no limit)."""

    model_config = ConfigDict(frozen=True)

    calls: int | None = Field(None, ge=1)
    cost_usd: float | None = Field(None, gt=0)


@dataclass(frozen=True)
class Plan:
    """What the task's documents cut so far will take: chunk calls, merges, and their estimated cost."""

    chunks: int
    documents_to_merge: int  # documents of more than one chunk: one merge each (at least)
    documents: int
    prompt_tokens: int

    @property
    def calls(self) -> int:
        return self.chunks + self.documents_to_merge + (1 if self.documents > 1 else 0)


def over_ceiling(plan: Plan, cost_usd: float, ceiling: Ceiling) -> str | None:
    """Why the plan needs its owner's approval; None when it stays within the ceiling."""
    if ceiling.calls is not None and plan.calls > ceiling.calls:
        return (
            f"about {plan.calls} LLM calls planned, over this owner's ceiling of {ceiling.calls} per task "
            "(DOCSUM_TASK_MAX_CALLS): resume the task to approve it, or cancel it"
        )
    if ceiling.cost_usd is not None and cost_usd > ceiling.cost_usd:
        return (
            f"about ${cost_usd:.4f} of LLM calls planned, over this owner's ceiling of ${ceiling.cost_usd:.4f} "
            "per task (DOCSUM_TASK_MAX_COST_USD): resume the task to approve it, or cancel it"
        )
    return None
