"""The admission's decision (admission.plan, no IO) and its settings: who is admitted next, from the
counters, the slots in use and the waiting work as the repository reads them; and a task's priority as
each way in takes it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from docsum_cli import main as cli
from docsum_gateway.routers.tasks import _form
from docsum_shared.events import DocumentSubmitted, Topic, decode
from docsum_shared.options import PRIORITIES
from docsum_shared.settings import parse_weights
from docsum_summarizer.admission import Wake, plan
from docsum_summarizer.repository import ShareView
from docsum_summarizer.schedule import Policy, Priority, Waiting
from docsum_summarizer.settings import SummarizerSettings
from tests.cli_doubles import recording_gateway


def _waiting(owner: str, items: int, *, priority: Priority = Priority.NORMAL, oldest_s: float = 1.0) -> Waiting:
    return Waiting(f"task-{owner}-{priority}", owner, priority, items, items * 1_300, oldest_s)


def test_a_newcomer_behind_a_backlog_gets_the_next_slot_and_starts_at_the_lowest_served_counter() -> None:
    view = ShareView({"alice": 4}, [_waiting("alice", 7_000, oldest_s=60.0), _waiting("bob", 1)], {"alice": 9e6})
    decided = plan(view, 1, {})
    assert decided.grants == {("bob", Priority.NORMAL): 1}
    assert decided.floors["bob"] == pytest.approx(9e6)  # lifted: its idle time is not saved up against alice
    both = plan(view, 2, {})  # then alice's turn: bob is charged his estimate first
    assert both.grants == {("alice", Priority.NORMAL): 1, ("bob", Priority.NORMAL): 1}
    assert both.floors["alice"] == 0.0  # not lifted: her counter is left as it is


def test_owners_returning_together_to_an_idle_deployment_share_the_slots_from_one_level() -> None:
    # Nobody is served: no running counter to lift to. Bob's counter is far below alice's only because he
    # was away while she was served alone, long ago: he is lifted to hers, and the slots alternate.
    view = ShareView({}, [_waiting("alice", 100), _waiting("bob", 100)], {"alice": 5e6, "bob": 1_000.0})
    decided = plan(view, 10, {})
    assert decided.grants == {("alice", Priority.NORMAL): 5, ("bob", Priority.NORMAL): 5}
    assert decided.floors == {"alice": 0.0, "bob": pytest.approx(5e6)}  # only bob lifted, alice as she was
    alone = plan(ShareView({}, [_waiting("bob", 100)], {"bob": 1_000.0}), 3, {})
    assert alone.floors == {"bob": 0.0}  # a lone returning owner is left where it is


def test_no_free_slot_admits_nothing_and_the_slots_go_round_the_owners_with_work() -> None:
    view = ShareView({}, [_waiting("alice", 100), _waiting("bob", 100), _waiting("carol", 1)], {})
    assert plan(view, 0, {}).grants == {}
    assert plan(view, 6, {}).grants == {
        ("alice", Priority.NORMAL): 3,
        ("bob", Priority.NORMAL): 2,
        ("carol", Priority.NORMAL): 1,
    }


def test_an_owner_split_over_many_tasks_gets_the_share_of_one_task() -> None:
    split = [Waiting(f"a{i}", "alice", Priority.NORMAL, 1, 1_300, 1.0) for i in range(100)]
    view = ShareView({}, [*split, _waiting("bob", 100)], {})
    assert plan(view, 10, {}).grants == {("alice", Priority.NORMAL): 5, ("bob", Priority.NORMAL): 5}


def test_weights_give_shares_in_proportion() -> None:
    view = ShareView({}, [_waiting("alice", 1_000), _waiting("bob", 1_000)], {})
    assert plan(view, 400, {"alice": 3.0}).grants == {("alice", Priority.NORMAL): 300, ("bob", Priority.NORMAL): 100}


def test_urgent_work_goes_first_within_its_credit_and_background_last() -> None:
    view = ShareView(
        {"alice": 1, "bob": 1},
        [_waiting("alice", 50), _waiting("bob", 50), _waiting("bob", 5, priority=Priority.URGENT)],
        {"alice": 0.0, "bob": 0.0},
    )
    first = plan(view, 5, {}, Policy(urgent_credit=2_600))  # two urgent items' worth ahead of alice
    # Bob's urgent work goes first while his counter leads alice's by at most the credit: 3 of the
    # first 3 slots, then alice's one, then bob's again (3,900 ≤ 1,300 + 2,600).
    assert first.grants == {("bob", Priority.URGENT): 4, ("alice", Priority.NORMAL): 1}
    background = ShareView({}, [_waiting("alice", 5, priority=Priority.BACKGROUND), _waiting("bob", 5)], {})
    assert plan(background, 5, {}).grants == {("bob", Priority.NORMAL): 5}


def test_a_newcomer_behind_a_backlogs_spare_is_ranked_before_it_and_alternates_with_it_after() -> None:
    """Alice's counter was charged at admission for the spare chunks announced behind her calls: ranked
    at her counter, bob's chunk would be served after all of them. He is ranked at the level service has
    reached (the lowest rank of the chunks holding slots, just below it), ahead of her spare; and while
    he catches up with her counter, his chunks' ranks interleave with those of her spare."""
    spare = [1_000.0 + 1_300.0 * i for i in range(64)]  # her 64 chunks in hand, as admitted one by one
    counter = spare[-1] + 1_300.0
    view = ShareView(
        {"alice": 64}, [_waiting("alice", 7_000), _waiting("bob", 3)], {"alice": counter}, {"alice": spare[0]},
        {"alice": 64 * 1_300.0},
    )  # fmt: skip
    first = plan(view, 1, {})
    assert first.grants == {("bob", Priority.NORMAL): 1}
    ((tier, start),) = first.ranks[("bob", Priority.NORMAL)]
    assert tier == 1 and start < spare[0]  # before every chunk of hers in hand
    assert first.floors["bob"] == start  # his counter starts where his rank does
    three = plan(view, 3, {})
    assert three.grants == {("bob", Priority.NORMAL): 3}  # he is behind her counter: his turn, not hers
    bobs = [rank.start for rank in three.ranks[("bob", Priority.NORMAL)]]
    assert bobs == sorted(bobs) and bobs[1] == pytest.approx(start + 1_300.0)
    assert sum(1 for s in spare if s < bobs[2]) == 2  # one of hers between each of his
    # A chunk of hers holding its slot since long ago (a slow call, a retry): its old rank does not lift
    # bob to where service stood then, only to where her oldest chunk in hand would have started.
    stale = replace(view, started={"alice": 10.0})
    assert plan(stale, 1, {}).floors["bob"] == pytest.approx(counter - 64 * 1_300.0)


def test_urgent_work_is_ranked_before_normal_work_whatever_the_counters() -> None:
    view = ShareView(
        {"alice": 8},
        [_waiting("alice", 50), _waiting("alice", 1, priority=Priority.URGENT), _waiting("bob", 5)],
        {"alice": 90_000.0, "bob": 80_000.0},
        {"alice": 60_000.0},
        {"alice": 8 * 1_300.0},
    )
    decided = plan(view, 3, {}, Policy(urgent_credit=50_000))
    assert decided.ranks[("alice", Priority.URGENT)] == [(0, 90_000.0)]  # tier 0: before bob's tier 1
    assert [r.tier for r in decided.ranks[("bob", Priority.NORMAL)]] == [1, 1]
    assert decided.ranks[("bob", Priority.NORMAL)][0] == (1, 80_000.0)  # not lifted: ahead of the level


async def test_a_burst_of_chunks_finishing_wakes_the_admission_once_and_stored_chunks_always() -> None:
    wake = Wake(gap_s=3_600.0)
    for _ in range(1_000):
        wake.finished()
    assert wake.event.is_set()  # the first at once
    wake.event.clear()
    for _ in range(1_000):
        wake.finished()
    assert not wake.event.is_set()  # within the gap: one more admission due at its end, not a thousand
    wake.stored()  # a chunker's notification is not held back
    assert wake.event.is_set()


def test_owner_weights_are_read_as_owner_equals_weight() -> None:
    assert parse_weights("alice=3, bob=1.5,") == {"alice": 3.0, "bob": 1.5}
    assert SummarizerSettings(_env_file=None, owner_weights="alice=3").owner_weights == {"alice": 3.0}  # type: ignore[arg-type]
    for wrong in ("alice", "alice=0", "alice=-1", "=2", "alice=nan", "alice=x"):
        with pytest.raises(ValidationError, match="owner=weight"):
            SummarizerSettings(_env_file=None, owner_weights=wrong)  # type: ignore[arg-type]


def test_the_admission_order_is_fair_unless_set_to_fifo() -> None:
    assert SummarizerSettings(_env_file=None).admission_order == "fair"  # type: ignore[call-arg]
    assert SummarizerSettings(_env_file=None, admission_order="fifo").admission_order == "fifo"  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="admission_order"):
        SummarizerSettings(_env_file=None, admission_order="lifo")  # type: ignore[call-arg]


# --- a task's priority, as each way in gives it --------------------------------------------------------


def test_the_priority_is_taken_from_the_form_the_cli_and_kafka_and_nothing_else_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _form({"priority": ["urgent"]}).priority == "urgent"
    assert _form({}).priority is None  # normal
    with pytest.raises(RequestValidationError):
        _form({"priority": ["asap"]})
    sent = recording_gateway(monkeypatch)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert cli.main(["summarize", "--no-wait", "--priority", "background", str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", str(doc)]) == 0
    assert sent[0]["priority"] == "background" and "priority" not in sent[1]
    with pytest.raises(SystemExit):
        cli.main(["summarize", "--priority", "asap", str(doc)])
    message = {"task_id": "crm:1", "document_id": "crm:1:1", "owner": "crm", "filename": "a.txt", "task_documents": 1}
    urgent = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"priority": "urgent"}}).encode())
    assert isinstance(urgent, DocumentSubmitted) and urgent.options is not None and urgent.options.priority == "urgent"
    with pytest.raises(ValidationError):  # the parser dead-letters it, like any bad option
        decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"priority": "asap"}}).encode())
    assert {p.value for p in Priority} == set(PRIORITIES) == set(cli.PRIORITIES)


def test_the_window_is_each_live_summarizers_calls_in_flight_and_three_times_as_many_spare() -> None:
    """Unset, each summarizer's spare is three times its calls in flight: one summarizer of 16 keeps 64
    admitted (48 announced behind its calls, enough for a lone owner's calls never to run dry); a spare
    set is the same for every summarizer; a window set is the window, whoever is alive."""
    settings = SummarizerSettings(_env_file=None, llm_max_inflight=16)  # type: ignore[call-arg]
    assert settings.window() == 64
    assert settings.window([16, 4]) == 64 + 16
    spare = SummarizerSettings(_env_file=None, llm_max_inflight=16, admission_spare=2)  # type: ignore[call-arg]
    assert spare.window([2, 5]) == 11
    fixed = SummarizerSettings(_env_file=None, admission_window=10)  # type: ignore[call-arg]
    assert fixed.window([16, 16]) == 10
