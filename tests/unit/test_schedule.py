"""Fair shares between owners and a priority per task (schedule.py): each rule alone, then the policy
serving simulated owners through a fixed number of slots, as the summarizers would."""

from __future__ import annotations

import collections
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from docsum_llm.shares import served_tokens
from docsum_summarizer.schedule import (
    Account,
    Grant,
    Policy,
    Priority,
    State,
    Waiting,
    Work,
    charge,
    correct,
    finish,
    jain_index,
    lift_on_return,
    next_grants,
    ready_by_owner,
    refund,
    take,
    weighted,
)

URGENT, NORMAL, BACKGROUND = Priority.URGENT, Priority.NORMAL, Priority.BACKGROUND


def _state(counters: dict[str, float], ready: dict[tuple[str, Priority], Work], **policy: float) -> State:
    return State({o: Account(c) for o, c in counters.items()}, ready, Policy(**policy))  # type: ignore[arg-type]


# --- counters ----------------------------------------------------------------------------------------


def test_a_charge_advances_the_counter_by_tokens_over_weight() -> None:
    state = State({"a": Account(100.0, weight=4.0)})
    assert charge(state, "a", 400).accounts["a"].counter == 200.0


def test_a_refund_and_a_correction_undo_what_was_not_used() -> None:
    state = charge(State(), "a", 1_000)
    assert refund(state, "a", 1_000).accounts["a"].counter == 0.0
    assert correct(state, "a", estimated=1_000, used=700).accounts["a"].counter == 700.0
    assert refund(state, "a", 5_000).accounts["a"].counter == 0.0  # never below zero


def test_completion_tokens_cost_twice_input_tokens() -> None:
    assert served_tokens(prompt_tokens=1_000, completion_tokens=200) == 1_400


def test_weights_come_from_the_setting_and_an_owner_not_listed_weighs_one() -> None:
    accounts = weighted({"a": Account(5.0), "b": Account(7.0)}, {"a": 3.0, "c": 2.0})
    assert accounts == {"a": Account(5.0, 3.0), "b": Account(7.0, 1.0), "c": Account(0.0, 2.0)}
    with pytest.raises(ValueError, match="positive"):
        weighted({}, {"a": 0.0})


def test_an_owner_returning_from_idle_starts_at_the_lowest_active_counter_not_at_zero() -> None:
    state = _state({"a": 50_000.0, "b": 80_000.0, "idle": 10.0}, {("a", NORMAL): Work(5), ("b", NORMAL): Work(5)})
    assert lift_on_return(state, "idle").accounts["idle"].counter == 50_000.0


def test_running_work_makes_an_owner_active_for_the_lift() -> None:
    state = State({"a": Account(9_000.0, running=3), "idle": Account(0.0)})
    assert lift_on_return(state, "idle").accounts["idle"].counter == 9_000.0


@pytest.mark.parametrize(
    "counters", [{"back": 90_000.0, "a": 50_000.0}, {"back": 0.0}], ids=["ahead already", "no one else active"]
)
def test_the_lift_never_lowers_a_counter_nor_moves_a_lone_owner(counters: dict[str, float]) -> None:
    ready = {("a", NORMAL): Work(1)} if "a" in counters else {}
    state = _state(counters, ready)
    assert lift_on_return(state, "back") == state


# --- the fair order ----------------------------------------------------------------------------------


def test_the_next_slot_goes_to_the_lowest_counter_with_ready_work() -> None:
    state = _state({"a": 300.0, "b": 100.0, "idle": 0.0}, {("a", NORMAL): Work(9), ("b", NORMAL): Work(9)})
    assert next_grants(state, 1) == [Grant("b", NORMAL, 1_000)]


def test_each_grant_is_charged_before_the_next_is_decided() -> None:
    state = _state({"a": 0.0, "b": 0.0}, {("a", NORMAL): Work(9, tokens=9_000), ("b", NORMAL): Work(9, 900)})
    owners = [g.owner for g in next_grants(state, 12)]
    # A tie goes to a (by name); b's items are ten times smaller: all nine of them before a's second.
    assert owners == ["a"] + ["b"] * 9 + ["a", "a"]


def test_a_lone_owner_gets_every_slot() -> None:
    for priority in Priority:
        state = _state({"a": 1e9}, {("a", priority): Work(40)})
        assert next_grants(state, 16) == [Grant("a", priority, 1_000)] * 16


def test_no_more_grants_than_ready_items() -> None:
    state = _state({"a": 0.0, "b": 0.0}, {("a", NORMAL): Work(2), ("b", BACKGROUND): Work(1)})
    grants = next_grants(state, 16)
    assert sorted(g.owner for g in grants) == ["a", "a", "b"]
    assert next_grants(State(), 16) == []


def test_a_grant_taken_is_one_item_fewer_and_one_running_more() -> None:
    state = _state({"a": 0.0}, {("a", NORMAL): Work(2, tokens=600)})
    after = take(state, Grant("a", NORMAL, 300))
    assert after.ready[("a", NORMAL)] == Work(1, tokens=300)
    assert after.accounts["a"] == Account(300.0, running=1)
    assert finish(after, "a").accounts["a"].running == 0
    assert ("a", NORMAL) not in take(after, Grant("a", NORMAL, 300)).ready


def test_tasks_are_gathered_per_owner() -> None:
    waiting = [Waiting(f"t{i}", "a", NORMAL, items=2, tokens=200, oldest_s=i) for i in range(100)]
    waiting.append(Waiting("u", "b", NORMAL, items=0))
    assert ready_by_owner(waiting) == {("a", NORMAL): Work(200, tokens=20_000, oldest_s=99)}


# --- priorities --------------------------------------------------------------------------------------


def test_priority_orders_an_owners_own_work() -> None:
    ready = {("a", BACKGROUND): Work(1, oldest_s=9), ("a", NORMAL): Work(1, oldest_s=5), ("a", URGENT): Work(1)}
    assert [g.priority for g in next_grants(_state({"a": 0.0}, ready), 3)] == [URGENT, NORMAL, BACKGROUND]


def test_urgent_work_goes_before_other_owners_normal_work_within_its_credit() -> None:
    ready = {("a", NORMAL): Work(500), ("b", URGENT): Work(1)}
    state = _state({"a": 10_000.0, "b": 10_000.0 + 15_000}, ready, urgent_credit=16_000)
    assert next_grants(state, 1) == [Grant("b", URGENT, 1_000)]


def test_urgent_work_beyond_its_credit_waits_for_the_fair_order() -> None:
    ready = {("a", NORMAL): Work(500), ("b", URGENT): Work(1)}
    state = _state({"a": 10_000.0, "b": 10_000.0 + 17_500}, ready, urgent_credit=16_000)
    # b leads the lowest counter by 17,500: a's next two items first, then b is within its credit again.
    assert [g.owner for g in next_grants(state, 3)] == ["a", "a", "b"]


def test_background_waits_behind_every_owners_normal_work_until_it_has_aged() -> None:
    ready = {("a", NORMAL): Work(500, oldest_s=900), ("c", BACKGROUND): Work(1, oldest_s=299)}
    state = _state({"a": 1e6, "c": 0.0}, ready, background_after_s=300)
    assert {g.owner for g in next_grants(state, 16)} == {"a"}
    aged = _state({"a": 1e6, "c": 0.0}, {**ready, ("c", BACKGROUND): Work(1, oldest_s=300)}, background_after_s=300)
    assert next_grants(aged, 1) == [Grant("c", BACKGROUND, 1_000)]


def test_aged_background_goes_before_its_owners_normal_work_and_twice_aged_before_its_urgent_work() -> None:
    def first(background_age: float) -> Priority:
        ready = {
            ("a", URGENT): Work(1, oldest_s=1_000),
            ("a", NORMAL): Work(9, oldest_s=1_000),
            ("a", BACKGROUND): Work(1, oldest_s=background_age),
        }
        return next_grants(_state({"a": 0.0}, ready, background_after_s=300), 2)[1].priority

    assert first(299) is NORMAL  # after the urgent one
    assert first(300) is BACKGROUND
    assert next_grants(
        _state({"a": 0.0}, {("a", URGENT): Work(9, oldest_s=1_000), ("a", BACKGROUND): Work(1, oldest_s=600)},
               background_after_s=300), 1
    ) == [Grant("a", BACKGROUND, 1_000)]  # fmt: skip


# --- simulation: the policy serving owners through the slots ------------------------------------------


@dataclass(frozen=True)
class Item:
    task_id: str
    owner: str
    priority: Priority
    tokens: int
    ready_at: float


@dataclass
class Simulation:
    """Owners' items served through `slots` calls in flight, each taking `call_s(tokens)`; a free slot
    is granted by next_grants over the ready work gathered per task, as the repository would read it."""

    slots: int = 16
    policy: Policy = Policy()
    weights: dict[str, float] = field(default_factory=dict)
    call_s: Callable[[int], float] = lambda tokens: 0.3 + tokens / 10_000
    now: float = 0.0
    served: list[tuple[float, Item]] = field(default_factory=list)  # (granted at, item)
    _tasks: dict[str, collections.deque[Item]] = field(default_factory=dict)
    _task_tokens: collections.Counter[str] = field(default_factory=collections.Counter)
    _accounts: dict[str, Account] = field(default_factory=dict)
    _running: list[tuple[float, int, Item]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def submit(self, task_id: str, owner: str, sizes: list[int], priority: Priority = NORMAL) -> None:
        state = self._state()
        if not any(o == owner for o, _ in state.ready) and not state.accounts.get(owner, Account()).running:
            self._accounts = dict(lift_on_return(state, owner).accounts)
        queue = self._tasks.setdefault(task_id, collections.deque())
        queue.extend(Item(task_id, owner, priority, size, self.now) for size in sizes)
        self._task_tokens[task_id] += sum(sizes)

    def run_until(self, end: float) -> None:
        while True:
            self._fill()
            if not self._running or self._running[0][0] > end:
                self.now = end
                return
            self.now, _, item = heapq.heappop(self._running)
            self._accounts = dict(finish(self._state(), item.owner).accounts)

    def tokens(self, owner: str, start: float = 0.0, end: float = float("inf")) -> int:
        return sum(i.tokens for t, i in self.served if i.owner == owner and start <= t < end)

    def ready(self, owner: str) -> int:
        return sum(len(q) for q in self._tasks.values() if q and q[0].owner == owner)

    def granted_at(self, task_id: str) -> float:
        return next(t for t, i in self.served if i.task_id == task_id)

    def _state(self) -> State:
        waiting = [
            Waiting(t, q[0].owner, q[0].priority, len(q), self._task_tokens[t], self.now - q[0].ready_at)
            for t, q in self._tasks.items()
            if q
        ]
        return State(weighted(self._accounts, self.weights), ready_by_owner(waiting), self.policy)

    def _fill(self) -> None:
        state = self._state()
        for grant in next_grants(state, self.slots - len(self._running)):
            # The repository takes the oldest ready item of that owner and priority, whatever its task.
            queue = min(
                (q for q in self._tasks.values() if q and (q[0].owner, q[0].priority) == (grant.owner, grant.priority)),
                key=lambda q: q[0].ready_at,
            )
            item = queue.popleft()
            self._task_tokens[item.task_id] -= item.tokens
            state = take(state, Grant(item.owner, item.priority, item.tokens))  # charged its own estimate
            heapq.heappush(self._running, (self.now + self.call_s(item.tokens), next(self._seq), item))
            self.served.append((self.now, item))
        self._accounts = dict(state.accounts)


def _backlog(sim: Simulation, owner: str, size: int, tasks: int = 1, total: int = 1_500_000) -> None:
    per_task = total // size // tasks
    for t in range(tasks):
        sim.submit(f"{owner}-{t}", owner, [size] * per_task)


def test_backlogged_owners_with_request_sizes_10x_apart_are_served_equal_tokens() -> None:
    sim = Simulation()
    for owner, size in (("small", 100), ("medium", 300), ("large", 1_000)):
        _backlog(sim, owner, size)
    sim.run_until(60.0)
    owners = ("small", "medium", "large")
    for start in range(0, 60, 10):
        window = [sim.tokens(o, start, start + 10) for o in owners]
        assert max(window) - min(window) <= 2 * 1_000, (start, window)  # VTC: twice the largest request
    totals = [sim.tokens(o) for o in owners]
    assert jain_index(totals) >= 0.99
    assert all(sim.ready(o) for o in owners)  # backlogged to the end


def test_weights_three_to_one_give_75_25() -> None:
    sim = Simulation(weights={"heavy": 3.0})
    _backlog(sim, "heavy", 500)
    _backlog(sim, "light", 500)
    sim.run_until(60.0)
    share = sim.tokens("heavy") / (sim.tokens("heavy") + sim.tokens("light"))
    assert sim.ready("heavy") and sim.ready("light")
    assert share == pytest.approx(0.75, abs=0.05)


def test_an_owner_splitting_its_work_over_100_tasks_gains_less_than_5_percent() -> None:
    def share(tasks: int) -> float:
        sim = Simulation()
        _backlog(sim, "splitter", 300, tasks=tasks)
        _backlog(sim, "b", 300)
        _backlog(sim, "c", 1_000)
        sim.run_until(60.0)
        assert all(sim.ready(o) for o in ("splitter", "b", "c"))
        return sim.tokens("splitter") / sum(sim.tokens(o) for o in ("splitter", "b", "c"))

    assert share(100) < 1.05 * share(1)


def test_a_short_note_behind_a_long_backlog_waits_one_call_not_the_backlog() -> None:
    # 15 long documents in three tasks (7,200 chunks), 16 calls in flight of 300 ms; 10 s later another
    # owner's one-chunk task.
    sim = Simulation(call_s=lambda tokens: 0.3)
    for t in range(3):
        sim.submit(f"a-{t}", "a", [800] * 2_400)
    sim.run_until(10.0)
    sim.submit("note", "b", [200])
    sim.run_until(20.0)
    assert sim.granted_at("note") - 10.0 <= 0.3  # the next free slot, or the one after


def test_an_urgent_task_behind_a_normal_backlog_is_granted_at_the_next_free_slot() -> None:
    sim = Simulation()
    _backlog(sim, "a", 500)
    sim.run_until(10.0)
    sim.submit("b-normal", "b", [500] * 300)
    sim.run_until(20.0)  # b has been served too: its counter is a's, or just above it
    sim.submit("b-urgent", "b", [500], URGENT)
    next_free = min(t for t, _, _ in sim._running)
    sim.run_until(30.0)
    assert sim.granted_at("b-urgent") == next_free


def test_an_owner_marking_everything_urgent_gets_no_more_than_its_credit_beyond_its_share() -> None:
    policy = Policy(urgent_credit=16_000)
    sim = Simulation(policy=policy)
    _backlog(sim, "a", 500)
    _backlog(sim, "b", 500)
    for t in range(60):
        sim.submit(f"b-urgent-{t}", "b", [500] * 200, URGENT)
    sim.run_until(60.0)
    assert sim.ready("a") and sim.ready("b")
    assert sim.tokens("b") - sim.tokens("a") <= policy.urgent_credit + 2 * 500


def test_background_work_is_served_within_a_bounded_wait_under_a_continuous_normal_backlog() -> None:
    policy = Policy(background_after_s=20.0)
    for owner in ("c", "a"):  # another owner's background, and the backlogged owner's own
        sim = Simulation(policy=policy)
        _backlog(sim, "a", 500)
        _backlog(sim, "b", 300)
        sim.run_until(5.0)
        sim.submit("background", owner, [300], BACKGROUND)
        sim.run_until(60.0)
        waited = sim.granted_at("background") - 5.0
        assert 20.0 <= waited <= 20.0 + sim.call_s(500), owner  # aged, then the next free slot
        assert sim.tokens("a", 30.0) > 0 and sim.tokens("b", 30.0) > 0  # the backlog really went on


def test_the_slots_are_never_idle_while_work_is_ready() -> None:
    sim = Simulation()
    sim.submit("lone", "a", [400] * 5_000, BACKGROUND)
    for end in range(1, 31):
        sim.run_until(float(end))
        assert len(sim._running) == sim.slots
    assert {i.owner for _, i in sim.served} == {"a"}


def test_an_owner_back_from_idle_gets_its_share_not_the_time_it_was_away() -> None:
    sim = Simulation()
    _backlog(sim, "a", 500)
    sim.submit("b-first", "b", [500] * 200)
    sim.run_until(30.0)  # b's first task is done after a few seconds: b idles while a is served
    assert not sim.ready("b")
    _backlog(sim, "b", 500)
    sim.run_until(40.0)
    assert abs(sim.tokens("b", 30.0, 40.0) - sim.tokens("a", 30.0, 40.0)) <= 2 * 500
