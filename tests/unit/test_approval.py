"""The cost approval's rules, pure: how many merge calls a plan takes, and when a task waits."""

from __future__ import annotations

from docsum_chunker.policy import merge_fan_in
from docsum_chunker.settings import ChunkerSettings
from docsum_shared.approval import Approved, Ceiling, Plan, merge_calls, needs_approval, plan_of


def test_merge_calls_count_every_node_of_the_tree() -> None:
    assert merge_calls(1, 4) == 0 and merge_calls(0, None) == 0
    assert merge_calls(30, None) == 1  # no budget: one call takes them all
    assert merge_calls(4, 4) == 1
    assert merge_calls(5, 4) == 2  # 4 -> 1, then that one and the fifth
    assert merge_calls(100, 10) == 11  # 10 nodes of 10, then one over the 10 results
    assert merge_calls(9, 1) == 8  # a fan-in below two still merges two at a time


def test_the_plan_counts_the_task_merge_over_its_documents() -> None:
    assert plan_of([5], 0, (None, None)) == Plan(chunks=5, merges=1, prompt_tokens=0)
    assert plan_of([1, 1, 1], 0, (None, None)).calls == 4  # three chunk calls and the task's merge
    assert plan_of([100, 1], 0, (10, 10)).calls == 101 + 11 + 1


def test_the_fan_in_follows_the_context_budget() -> None:
    assert merge_fan_in(ChunkerSettings(_env_file=None)) == (None, None)
    settings = ChunkerSettings(_env_file=None, llm_context_tokens=4_000, llm_max_tokens_chunk=300)
    # room beside the document's answer (600) for chunk summaries of 300; beside the task's (800) for 600s
    assert merge_fan_in(settings) == (3_400 // 300, 3_200 // 600)


def test_a_task_waits_beyond_both_its_ceiling_and_its_approved_plan() -> None:
    plan = Plan(chunks=20, merges=1, prompt_tokens=10_000)
    ceiling = Ceiling(calls=10)
    first = needs_approval(plan, 0.02, ceiling, None)
    assert first is not None and (first.calls, first.cost_usd) == (21, 0.02) and "ceiling of 10" in first.reason
    assert needs_approval(plan, 0.02, ceiling, Approved(21, 0.02)) is None
    assert needs_approval(Plan(5, 0, 0), 0.0, ceiling, None) is None  # within the ceiling: no question
    grown = needs_approval(Plan(chunks=21, merges=1, prompt_tokens=10_500), 0.021, ceiling, Approved(21, 0.02))
    assert grown is not None and grown.reason.startswith("the task grew beyond the plan approved (about 21")
    # over the approved cost alone, with as many calls
    dearer = needs_approval(plan, 0.05, Ceiling(cost_usd=0.01), Approved(21, 0.02))
    assert dearer is not None and "DOCSUM_TASK_MAX_COST_USD" in dearer.reason
