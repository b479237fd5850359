"""Who goes next: fair shares between owners and a priority per task, as pure decisions.

Token-weighted fairness between owners (the Virtual Token Counter of Sheng et al., "Fairness in Serving
Large Language Models", OSDI 2024). Each owner has a counter of the tokens it has been served, divided
by its weight (virtual tokens). A free slot goes to the owner with ready work and the lowest counter, and
that owner's counter advances by the slot's estimated tokens at once (corrected later from the provider's
usage), so every replica deciding next sees it. Between two owners that both have ready work the counters
stay within one request of each other, so over any interval the tokens they are served differ by at most
twice the largest request (times the weights). Fairness is per owner: a task is only a way to order an
owner's own work, so an owner with a hundred tasks gets the share of an owner with one.

An owner that was idle does not bank its idleness: on return its counter is lifted to the lowest counter
of the owners with work (`lift_on_return`), else it would take every slot until it caught up.

A priority per task orders an owner's own work: urgent, then normal, then background. Urgent work also
goes before other owners' normal work, but it spends its owner's own share, early: it is charged to the
same counter, and it may jump the fair order only while its owner's counter leads the lowest active
counter by at most `Policy.urgent_credit` virtual tokens. So marking everything urgent buys an owner at
most `urgent_credit` plus one request ahead of its fair share, never more than that over any interval.
Background work goes after every owner's urgent and normal work (it fills idle capacity), but once it
has waited `Policy.background_after_s` it competes between owners as normal work and goes before its own
owner's normal work, and after twice that before its owner's urgent work too: it is never starved. Its
wait is bounded by `background_after_s` plus its owner's next fair turn (about one call's duration, as
its owner's counter was lifted when it came back).

The modes keep their tiers: this decides the order in which chunks are taken; realtime, flex and batch
still decide how each taken chunk is sent. A batch line is charged when submitted and refunded if it
never runs; a cached answer is corrected to nothing (its call cost nothing); a merge is charged as a chunk
is.

No IO here: the state is what the repository reads (the counters, and the ready work per owner and
priority), the decisions are what it writes. Nothing is mutated; every function returns a new state.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple


class Priority(enum.StrEnum):
    URGENT = "urgent"
    NORMAL = "normal"
    BACKGROUND = "background"


# The order in which an owner's own work goes: lower first (background ages: `_own_first`).
_RANK = {Priority.URGENT: 0, Priority.NORMAL: 1, Priority.BACKGROUND: 2}


@dataclass(frozen=True)
class Policy:
    # How far (virtual tokens) an owner's urgent work may run ahead of the lowest active counter, ahead
    # of other owners' normal work. The bound on what urgent can take beyond the owner's fair share.
    urgent_credit: float = 16_000.0
    # How long background work waits before it competes as normal work.
    background_after_s: float = 300.0
    # The estimate of one item when its ready work does not say its tokens.
    default_tokens: int = 1_000


@dataclass(frozen=True)
class Account:
    """An owner's counter, as stored (shared by every replica, surviving restarts)."""

    counter: float = 0.0  # virtual tokens served: tokens / weight
    weight: float = 1.0
    running: int = 0  # its items taken and not yet finished


@dataclass(frozen=True)
class Work:
    """An owner's ready work at one priority."""

    items: int
    tokens: int = 0  # their estimated tokens in all (0: unknown, Policy.default_tokens each)
    oldest_s: float = 0.0  # how long its oldest item has been ready


@dataclass(frozen=True)
class Waiting:
    """One task's ready work, as the repository reads it: gathered per owner by `ready_by_owner`."""

    task_id: str
    owner: str
    priority: Priority
    items: int
    tokens: int = 0
    oldest_s: float = 0.0


@dataclass(frozen=True)
class State:
    accounts: Mapping[str, Account] = field(default_factory=dict)
    ready: Mapping[tuple[str, Priority], Work] = field(default_factory=dict)
    policy: Policy = Policy()


@dataclass(frozen=True)
class Grant:
    """A free slot given to one of `owner`'s ready items at `priority` (its oldest), charged `tokens`."""

    owner: str
    priority: Priority
    tokens: int


class Rank(NamedTuple):
    """Where a granted item stands in the fair order, lower first: the tier it was granted in (urgent
    within its credit, then normal and aged background, then background), then its owner's counter when
    it was granted (the start tag of weighted fair queueing). Compared as a tuple; kept on the chunk so
    that a summarizer serves the chunks it holds in this order too, not in the order they reached it."""

    tier: int
    start: float


def ready_by_owner(waiting: Iterable[Waiting]) -> dict[tuple[str, Priority], Work]:
    """The tasks' ready work gathered per owner and priority: how many tasks it is spread over does not
    matter to anything that follows."""
    out: dict[tuple[str, Priority], Work] = {}
    for w in waiting:
        if w.items <= 0:
            continue
        key = (w.owner, w.priority)
        had = out.get(key, Work(0))
        out[key] = Work(had.items + w.items, had.tokens + w.tokens, max(had.oldest_s, w.oldest_s))
    return out


def weighted(accounts: Mapping[str, Account], weights: Mapping[str, float]) -> dict[str, Account]:
    """The accounts with the configured weights (DOCSUM_OWNER_WEIGHTS; an owner not listed weighs 1)."""
    owners = set(accounts) | set(weights)
    return {o: replace(accounts.get(o, Account()), weight=_weight(weights.get(o, 1.0))) for o in owners}


def _weight(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"an owner's weight is a positive number, not {value}")
    return value


def account(state: State, owner: str) -> Account:
    return state.accounts.get(owner, Account())


def charge(state: State, owner: str, tokens: float) -> State:
    """`owner` served `tokens` more (negative: a correction down); its counter advances by tokens / weight."""
    had = account(state, owner)
    return _with_account(state, owner, replace(had, counter=max(0.0, had.counter + tokens / had.weight)))


def refund(state: State, owner: str, tokens: float) -> State:
    """`tokens` charged for work that never ran (a batch line the provider never answered)."""
    return charge(state, owner, -tokens)


def correct(state: State, owner: str, estimated: float, used: float) -> State:
    """The estimate charged when the item was taken, replaced by what the provider said it used."""
    return charge(state, owner, used - estimated)


def lift_on_return(state: State, owner: str) -> State:
    """An owner with no work (ready or running) coming back starts at the lowest counter of the owners
    that have work, not where it stopped: idleness is not saved up. Unchanged when no one else has work,
    or when it is ahead already."""
    others = [account(state, o).counter for o in _active(state) if o != owner]
    had = account(state, owner)
    if not others or had.counter >= min(others):
        return state
    return _with_account(state, owner, replace(had, counter=min(others)))


def next_grants(state: State, free_slots: int) -> list[Grant]:
    """Who gets the next `free_slots` slots, in order; each grant charged its estimate before the next is
    decided (as the claim that takes it does). Fewer when there is less ready work: never a slot left
    idle while work is ready (work-conserving)."""
    return [grant for grant, _ in ranked_grants(state, free_slots)]


def ranked_grants(state: State, free_slots: int) -> list[tuple[Grant, Rank]]:
    """`next_grants`, each with its rank: its tier and its owner's counter before it was charged."""
    grants: list[tuple[Grant, Rank]] = []
    for _ in range(free_slots):
        picked = _pick(state)
        if picked is None:
            break
        grant, tier = picked
        grants.append((grant, Rank(tier, account(state, grant.owner).counter)))
        state = take(state, grant)
    return grants


def take(state: State, grant: Grant) -> State:
    """The granted item taken: charged, one fewer ready, one more running."""
    key = (grant.owner, grant.priority)
    work = state.ready[key]
    ready = dict(state.ready)
    if work.items <= 1:
        del ready[key]
    else:
        ready[key] = replace(work, items=work.items - 1, tokens=max(0, work.tokens - grant.tokens))
    charged = charge(replace(state, ready=ready), grant.owner, grant.tokens)
    had = account(charged, grant.owner)
    return _with_account(charged, grant.owner, replace(had, running=had.running + 1))


def finish(state: State, owner: str) -> State:
    """One of `owner`'s running items finished (summarized, failed, or handed back)."""
    had = account(state, owner)
    return _with_account(state, owner, replace(had, running=max(0, had.running - 1)))


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when every value is equal, 1/n when one takes everything."""
    xs = list(values)
    square = sum(x * x for x in xs)
    return 1.0 if square == 0 else sum(xs) ** 2 / (len(xs) * square)


def _pick(state: State) -> tuple[Grant, int] | None:
    """The next slot's grant, and the tier it was granted in: an owner's urgent work within its credit,
    else the fair order over urgent, normal and aged background work, else the fair order over
    background work; then that owner's own next item."""
    owners = {o for o, _ in state.ready}
    if not owners:
        return None
    policy = state.policy
    floor = min(account(state, o).counter for o in owners)
    urgent = [
        o
        for o in owners
        if (o, Priority.URGENT) in state.ready and account(state, o).counter <= floor + policy.urgent_credit
    ]
    if urgent:
        owner = _lowest(state, urgent, Priority.URGENT)
        return _grant(state, owner, _own_first(state, owner, _BACKGROUND)), _URGENT
    for tier in (_NORMAL, _BACKGROUND):
        candidates = [o for o in owners if _tier(state, o) <= tier]
        if candidates:
            owner = _lowest(state, candidates, None)
            return _grant(state, owner, _own_first(state, owner, tier)), tier
    return None


# The tiers between owners: urgent within its credit, then normal (with aged background), then background.
_URGENT, _NORMAL, _BACKGROUND = 0, 1, 2


def _tier(state: State, owner: str) -> int:
    """The best tier of `owner`'s ready work between owners."""
    return min(_between(work, p, state.policy) for (o, p), work in state.ready.items() if o == owner)


def _between(work: Work, priority: Priority, policy: Policy) -> int:
    if priority is Priority.URGENT:
        return _URGENT
    if priority is Priority.NORMAL or work.oldest_s >= policy.background_after_s:
        return _NORMAL
    return _BACKGROUND


def _own_first(state: State, owner: str, up_to_tier: int) -> Priority:
    """`owner`'s own next work among its work up to `up_to_tier`: urgent, then normal, then background;
    background that has waited `background_after_s` goes before normal, and twice that before urgent
    (so not even its owner's own urgent backlog starves it)."""
    policy = state.policy

    def within(priority: Priority, work: Work) -> float:
        if priority is not Priority.BACKGROUND or work.oldest_s < policy.background_after_s:
            return _RANK[priority]
        return 0.5 if work.oldest_s < 2 * policy.background_after_s else -0.5

    ranked = [
        (within(p, work), -work.oldest_s, _RANK[p], p)
        for (o, p), work in state.ready.items()
        if o == owner and _between(work, p, policy) <= up_to_tier
    ]
    return min(ranked)[3]


def _competes(work: Work, priority: Priority, policy: Policy) -> bool:
    return _between(work, priority, policy) <= _NORMAL


def _lowest(state: State, owners: list[str], priority: Priority | None) -> str:
    """The owner with the lowest counter; a tie to the one whose work has waited longest, then by name
    (every replica decides the same)."""

    def oldest(owner: str) -> float:
        ages = [w.oldest_s for (o, p), w in state.ready.items() if o == owner and (priority is None or p is priority)]
        return max(ages, default=0.0)

    return min(owners, key=lambda o: (account(state, o).counter, -oldest(o), o))


def _grant(state: State, owner: str, priority: Priority) -> Grant:
    return Grant(owner, priority, _estimate(state.ready[(owner, priority)], state.policy))


def _estimate(work: Work, policy: Policy) -> int:
    """One item's estimated tokens: the average of its ready work's, when it says."""
    return max(1, work.tokens // work.items) if work.tokens > 0 else policy.default_tokens


def _active(state: State) -> set[str]:
    """Owners with ready work or items running."""
    return {o for o, _ in state.ready} | {o for o, a in state.accounts.items() if a.running > 0}


def _with_account(state: State, owner: str, new: Account) -> State:
    return replace(state, accounts={**state.accounts, owner: new})
