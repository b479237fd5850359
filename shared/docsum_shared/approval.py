"""Cost approval: a task never pays first and asks later.

Once a document's chunks exist, the task's planned LLM calls and their estimated cost are known (for
every document cut so far). A task over its owner's ceiling waits, AWAITING_APPROVAL, before any call
beyond what was already within the ceiling: `resume` approves it, `cancel` drops it.

What the owner approves is that plan — its calls and its cost — not the task whatever it becomes: a
document cut later (the rest of a task, another system's documents arriving one by one) that takes the
task beyond the approved plan holds it again.
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
    """What the task's documents cut so far will take: chunk calls, merge calls, and the prompt tokens."""

    chunks: int
    merges: int  # every merge node of every document's tree, and the task's
    prompt_tokens: int

    @property
    def calls(self) -> int:
        return self.chunks + self.merges


def merge_calls(inputs: int, fan_in: int | None) -> int:
    """The merge calls that bring `inputs` summaries down to one, `fan_in` at a time (None: all in one
    call, as with an unlimited context): every call turns up to fan_in summaries into one."""
    if inputs <= 1:
        return 0
    if fan_in is None:
        return 1
    fan_in = max(2, fan_in)
    return -(-(inputs - 1) // (fan_in - 1))


def plan_of(chunk_counts: list[int], prompt_tokens: int, fan_in: tuple[int | None, int | None]) -> Plan:
    """The plan of documents of these chunk counts: a tree per document over its chunk summaries
    (fan_in[0] at a time), and one over the document summaries when there are several (fan_in[1])."""
    chunk_fan_in, document_fan_in = fan_in
    merges = sum(merge_calls(n, chunk_fan_in) for n in chunk_counts) + merge_calls(len(chunk_counts), document_fan_in)
    return Plan(sum(chunk_counts), merges, prompt_tokens)


@dataclass(frozen=True)
class Approved:
    """The plan an owner said yes to (the one shown when the task was held)."""

    calls: int
    cost_usd: float


@dataclass(frozen=True)
class Hold:
    """A task that must wait for its owner: why, and the plan the owner is asked to approve."""

    reason: str
    calls: int
    cost_usd: float


def needs_approval(plan: Plan, cost_usd: float, ceiling: Ceiling, approved: Approved | None) -> Hold | None:
    """Whether the task waits for its owner: its plan is over the ceiling and beyond what was approved."""
    if approved is not None and plan.calls <= approved.calls and cost_usd <= approved.cost_usd * (1 + 1e-9):
        return None
    reason = over_ceiling(plan, cost_usd, ceiling)
    if reason is None:
        return None
    if approved is not None:
        reason = (
            f"the task grew beyond the plan approved (about {approved.calls} LLM calls, "
            f"${approved.cost_usd:.4f}): {reason}"
        )
    return Hold(reason, plan.calls, cost_usd)


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
