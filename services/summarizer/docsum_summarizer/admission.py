"""The admission: which waiting chunks are announced next, in the fair order between owners (schedule.py).

Kafka is not the schedule: a broker has no fairness, and what a consumer pauses is forgotten at every
rebalance. So a stored chunk waits in PostgreSQL (`admitted_at` NULL) until this loop gives it one of
the deployment's slots, and only then is it announced on chunk-created; a summarizer's claim takes only
an admitted chunk (an announcement of one not admitted, from a re-drive, comes back DEFERRED). At most
`SummarizerSettings.window()` chunks are admitted and unfinished at once (the live summarizers' calls in
flight and a few spare slots each), so an owner arriving behind another's backlog waits for a few calls
to finish, not for the backlog. Each admitted chunk is given its rank in the fair order (schedule.Rank),
and a summarizer holds every chunk admitted to it and calls them lowest rank first (docsum_llm.slots):
the newcomer's chunk is not called after the spare announced before it either.

Each deployment (its topic prefix) admits only its own tasks' chunks, onto its own topics, and keeps its
owners' counters apart: deployments may share one database, never their summarizers or their slots.
One process of a deployment admits at a time, whichever replica (a transaction-scoped advisory lock per
deployment): it reads the owners' counters and waiting work, decides (`plan`, no IO), and admits and
charges in the same transaction, then announces. A crash before the commit admits and charges nothing;
one after it, before the announcement, leaves the chunks admitted unannounced: after `admission_hold_s`
unleased, the admission announces them again (charged once all the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import asyncpg

from docsum_llm.shares import OUTPUT_WEIGHT
from docsum_shared import db, metrics, telemetry
from docsum_shared.approval import EXPECTED_COMPLETION_TOKENS
from docsum_shared.db import CHUNKS_STORED
from docsum_shared.events import ChunkCreated
from docsum_shared.handlers import Publish, Sender
from docsum_shared.retry import keep_running

from .repository import ACTIVITY_EVERY_S, Admissions, AdmissionTurn, Admitted, ShareView
from .schedule import (
    Account,
    Grant,
    Policy,
    Priority,
    Rank,
    State,
    account,
    ranked_grants,
    ready_by_owner,
    weighted,
)
from .settings import SummarizerSettings

log = logging.getLogger(__name__)
ADMISSION = Sender("the summarizer's admission", emits=(ChunkCreated,))
# What a chunk is charged at admission beyond its prompt's estimate: its answer's expected tokens, at
# the weight of a completion token. Corrected from the provider's usage once answered.
ANSWER_TOKENS = OUTPUT_WEIGHT * EXPECTED_COMPLETION_TOKENS
DEFAULT_POLICY = Policy()


def admissions(pool: asyncpg.Pool, settings: SummarizerSettings) -> Admissions:
    return Admissions(
        pool,
        deployment=settings.deployment,
        hold_s=settings.admission_hold_s,
        default_tokens=DEFAULT_POLICY.default_tokens,
        answer_tokens=ANSWER_TOKENS,
    )


@dataclass(frozen=True)
class Plan:
    """Who is admitted how many of which work, the counter each granted owner comes back from idle at
    (0: not lifted), and the ranks of each one's grants (its oldest chunks first)."""

    grants: Counter[tuple[str, Priority]]
    floors: dict[str, float]
    ranks: dict[tuple[str, Priority], list[Rank]] = field(default_factory=dict)


def plan(view: ShareView, free: int, weights: Mapping[str, float], policy: Policy = DEFAULT_POLICY) -> Plan:
    """The next `free` slots in the fair order, each with its rank. An owner with work waiting and none
    running comes back at the level service has reached (idleness is not saved up, else it would take
    every slot until it caught up), and so gets the next slot: see `_level`. When no one is served, the
    owners coming back are lifted to the highest of their counters: none keeps a lead saved up from
    when it was away."""
    ready = ready_by_owner(view.waiting)
    owners = {o for o, _ in ready} | set(view.running)
    accounts = {o: Account(counter=view.counters.get(o, 0.0), running=view.running.get(o, 0)) for o in owners}
    state = State(weighted(accounts, weights), ready, policy)
    returning = {o for o, _ in ready if view.running.get(o, 0) == 0}
    if any(view.running.get(o, 0) > 0 for o in owners):  # someone is served
        # Just below the lowest: level with it, a tie would go to the owner that has waited longest (the
        # backlog's), and the returning owner would wait one slot more.
        floor = math.nextafter(_level(state, view), -math.inf)
    else:
        # VTC lifts a client coming back to an empty queue to the counter of the last client to leave
        # it: the level service had reached. The highest of the returning owners' counters is that
        # level (counters only grow while served, and each was lifted to the others' when it came
        # back), and the others, arriving with it, are lifted to it as to any active counter. Level,
        # the tie goes to the owner that has waited longest.
        floor = max((account(state, o).counter for o in returning), default=0.0)
    lifted = {o: max(account(state, o).counter, floor) for o in returning}
    for owner, counter in lifted.items():
        state = State({**state.accounts, owner: Account(counter, account(state, owner).weight, 0)}, ready, policy)
    grants: list[tuple[Grant, Rank]] = ranked_grants(state, free) if free > 0 else []
    chosen = Counter((g.owner, g.priority) for g, _ in grants)
    ranks: dict[tuple[str, Priority], list[Rank]] = {}
    for g, rank in grants:
        ranks.setdefault((g.owner, g.priority), []).append(rank)
    # Only a lift is passed on (0 otherwise): a floor at the counter as read would undo a correction
    # down that another replica stored since.
    raised = {o: c for o, c in lifted.items() if c > view.counters.get(o, 0.0)}
    return Plan(chosen, {o: raised.get(o, 0.0) for o, _ in chosen}, ranks)


def _level(state: State, view: ShareView) -> float:
    """Where service stands: the lowest, over the owners being served, of where the chunks each holds
    started (its lowest rank: the summarizers call what they hold lowest rank first), not of their
    counters, which were charged at admission for the spare announced behind their calls: a newcomer
    lifted to those would be called after all of that spare. Never below where an owner's oldest chunk
    in hand would have started had no correction been made since (its counter less what those chunks
    were charged): a chunk holding its slot long (a slow call, a retry) keeps the rank it was given long
    ago, and a newcomer lifted to that would save up the service since. An owner with no ranked chunk
    in hand (admitted first in, first out, or before ranks) stands at its counter, as before ranks."""
    levels: list[float] = []
    for owner, running in view.running.items():
        if running <= 0:
            continue
        had = account(state, owner)
        started = view.started.get(owner)
        if started is None:
            levels.append(had.counter)
        else:
            oldest = had.counter - view.in_hand.get(owner, 0.0) / had.weight
            levels.append(min(had.counter, max(started, oldest)))
    return min(levels)


@dataclass
class Every:
    """Whether `period_s` has passed since it last said so."""

    period_s: float
    last: float = -math.inf

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.period_s:
            return False
        self.last = now
        return True


# A summarizer records itself alive this often; its row counts in the window while seen within three of
# these (a process that died leaves it within seconds), and is deleted after a minute unseen.
ALIVE_EVERY_S = 2.0
LIVE_S = 3 * ALIVE_EVERY_S
FORGET_S = 60.0
# A burst of chunks finishing at once (0 ms calls, a batch's answers) is one more admission every this
# long, not one transaction per chunk: about the time an admission itself takes.
FINISHED_GAP_S = 0.01


class Wake:
    """Wakes this process's admission: at once when a chunker has stored chunks (`stored`), and when a
    chunk finished here (`finished`: its slot is free) at most once every `gap_s`, later ones within the
    gap coalesced into one at its end."""

    def __init__(self, gap_s: float = FINISHED_GAP_S) -> None:
        self.event = asyncio.Event()
        self.gap_s = gap_s
        self._last = -math.inf
        self._pending: asyncio.TimerHandle | None = None

    def stored(self) -> None:
        self.event.set()

    def finished(self) -> None:
        if self._pending is not None:
            return  # already due: this one goes with it
        wait = self._last + self.gap_s - time.monotonic()
        if wait <= 0:
            self._fire()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._pending = None
        self._last = time.monotonic()
        self.event.set()


async def admit_fairly(
    repo: Admissions, publish: Publish, settings: SummarizerSettings, wake: Wake | None = None, *, holder: str
) -> None:
    """Admit as soon as a chunker has stored chunks (its notification) or a chunk finished in this
    process (`wake`: the handlers say so), and every `admission_interval_s` all the same (a notification
    sent while the database restarts is lost; slots freed by other replicas' calls); until cancelled.
    Meanwhile this process, as `holder`, is recorded alive with its calls in flight (the window follows
    the live summarizers), and no longer once stopped. The database or broker away: next time."""
    touching = Every(ACTIVITY_EVERY_S)
    wake = wake or Wake()
    try:
        async with asyncio.TaskGroup() as together:
            together.create_task(
                keep_running(
                    "summarizer heartbeat",
                    lambda: repo.alive(holder, settings.llm_max_inflight, forget_s=FORGET_S),
                    every_s=ALIVE_EVERY_S,
                )
            )
            together.create_task(db.listen(settings.database_url, CHUNKS_STORED, lambda _: wake.stored(), "admission"))
            together.create_task(
                keep_running(
                    "admission",
                    lambda: admit_once(repo, publish, settings, touch=touching.due()),
                    every_s=settings.admission_interval_s,
                    wake=wake.event,
                )
            )
    finally:
        # A clean stop: its calls leave the window now, not a few heartbeats from now.
        with contextlib.suppress(Exception):
            await asyncio.shield(repo.gone(holder))


async def admit_once(repo: Admissions, publish: Publish, settings: SummarizerSettings, *, touch: bool = False) -> int:
    """One admission: the free slots given in the fair order, charged, then announced (with `touch`, the
    tasks waiting marked active first). How many."""
    if touch:  # every replica: the gauge is read as max by priority, whichever admits
        ready = await repo.ready_by_priority()
        for priority in Priority:
            metrics.READY_CHUNKS.labels(priority).set(ready.get(priority, 0))
    async with repo.turn() as turn:
        if turn is None:
            return 0  # another replica admits
        again: list[Admitted] = []
        if touch:
            await turn.touch_waiting(ACTIVITY_EVERY_S)
            again = await turn.unclaimed()
            if again:
                log.info("announcing again %d admitted chunks no summarizer took up", len(again))
        admitted = again + await _admit(turn, settings)
    # Announced in the trace each chunk was cut in (one per document, mostly): a submission stays one trace.
    by_trace: dict[str | None, list[Admitted]] = {}
    for a in admitted:
        by_trace.setdefault(a.traceparent, []).append(a)
    for traceparent, chunks in by_trace.items():
        events = [
            ChunkCreated(
                task_id=a.task_id,
                document_id=a.document_id,
                chunk_id=a.chunk_id,
                chunk_index=a.chunk_index,
                **({"trace_id": a.trace_id} if a.trace_id else {}),
            )
            for a in chunks
        ]
        with telemetry.resumed(traceparent, "admit chunks", {"task_id": chunks[0].task_id}):
            await publish(events, sender=ADMISSION)
    if admitted:
        log.debug("admitted %d chunks", len(admitted))
    return len(admitted)


async def _admit(turn: AdmissionTurn, settings: SummarizerSettings) -> list[Admitted]:
    holding = await turn.holding()
    running = holding.running
    live = await turn.live_inflight(LIVE_S) if settings.admission_window is None else []
    free = settings.window(live) - sum(running.values())
    if free <= 0:
        return []
    if settings.admission_order == "fifo":
        return await _admit_oldest(turn, settings, free)
    waiting = await turn.waiting()
    if not waiting:
        return []
    owners = sorted({w.owner for w in waiting} | set(running))
    view = ShareView(running, waiting, await turn.counters(owners), holding.started, holding.in_hand)
    decided = plan(view, free, settings.owner_weights, settings.policy())
    if settings.admission_window is None and sum(decided.grants.values()) == free and not _arriving(decided, running):
        # The window's last slot is kept for whoever arrives next: a newcomer's chunk (or an owner's
        # urgent one) is then admitted as soon as it is stored, not one finished call later. The window
        # holds spare chunks beyond the calls that can run (admission_spare), so no call waits for it.
        decided = plan(view, free - 1, settings.owner_weights, settings.policy())
    admitted: list[Admitted] = []
    for (owner, priority), n in sorted(decided.grants.items()):
        taken = await turn.admit(owner, priority, n, decided.ranks[(owner, priority)])
        weight = settings.owner_weights.get(owner, 1.0)
        await turn.charge(owner, at_least=decided.floors[owner], virtual_tokens=sum(a.charged for a in taken) / weight)
        admitted.extend(taken)
    return admitted


def _arriving(decided: Plan, running: Mapping[str, int]) -> bool:
    """Whether `decided` grants a slot to an owner with nothing running, or to urgent work."""
    return any(running.get(owner, 0) == 0 or priority is Priority.URGENT for owner, priority in decided.grants)


async def _admit_oldest(turn: AdmissionTurn, settings: SummarizerSettings, free: int) -> list[Admitted]:
    """DOCSUM_ADMISSION_ORDER=fifo: the `free` oldest ready chunks, whoever's; each owner charged for its
    own as the fair order would (the counters stay true for a return to it). They are given no rank:
    a summarizer serves unranked chunks in the order they reach it, which is this one."""
    taken = await turn.admit_oldest(free)
    by_owner: dict[str, list[Admitted]] = {}
    for owner, admitted in taken:
        by_owner.setdefault(owner, []).append(admitted)
    for owner, chunks in sorted(by_owner.items()):
        weight = settings.owner_weights.get(owner, 1.0)
        await turn.charge(owner, at_least=0.0, virtual_tokens=sum(a.charged for a in chunks) / weight)
    return [admitted for _, admitted in taken]
