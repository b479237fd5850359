"""The admission's transactions on the real PostgreSQL: what it admits, charges and announces again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import asyncpg
import pytest

from docsum_shared.events import ChunkCreated, Event
from docsum_shared.handlers import Sender
from docsum_shared.readmodel import views
from docsum_shared.scope import Scope
from docsum_shared.settings import LLMSettings
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.admission import admissions, admit_once
from docsum_summarizer.repository import ChunkRepository, work_to_do_sql
from docsum_summarizer.settings import SummarizerSettings

pytestmark = pytest.mark.integration


class Published:
    """The Publish port into a list."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, events: Sequence[Event], *, sender: Sender | None) -> None:
        self.events.extend(events)

    def chunk_ids(self) -> set[str]:
        return {e.chunk_id for e in self.events if isinstance(e, ChunkCreated)}


async def _chunk(
    db: asyncpg.Pool, owner: str, *, admitted_ago_s: float | None, charged: float = 0.0, deployment: str = ""
) -> str:
    task_id, document_id = f"task-{uuid.uuid4().hex[:12]}", f"document-{uuid.uuid4().hex[:12]}"
    chunk_id = f"{document_id}-c00000"
    await db.execute(
        "INSERT INTO tasks (id, owner, status, deployment) VALUES ($1, $2, $3, $4)",
        task_id, owner, TaskStatus.PROCESSING, deployment,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status) VALUES ($1, $2, 'd.txt', $3)",
        document_id, task_id, DocumentStatus.SUMMARIZING,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, token_estimate,"
        " admitted_at, charged)"
        " VALUES ($1, $2, 0, 0, 4, 'text', $3, 100,"
        "   CASE WHEN $4::float8 IS NULL THEN NULL ELSE now() - make_interval(secs => $4::float8) END, $5)",
        chunk_id, document_id, ChunkStatus.PENDING, admitted_ago_s, charged,
    )  # fmt: skip
    return chunk_id


async def _counter(db: asyncpg.Pool, owner: str, deployment: str = "") -> float | None:
    return await db.fetchval("SELECT counter FROM owner_shares WHERE owner = $1 AND deployment = $2", owner, deployment)


async def test_a_waiting_chunk_is_admitted_charged_and_announced_once(repository_db: asyncpg.Pool) -> None:
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    chunk_id = await _chunk(repository_db, owner, admitted_ago_s=None)
    settings = SummarizerSettings(_env_file=None, admission_window=1_000)  # type: ignore[call-arg]
    published = Published()
    await admit_once(admissions(repository_db, settings), published, settings)
    assert chunk_id in published.chunk_ids()
    charged = await repository_db.fetchval("SELECT charged FROM chunks WHERE id = $1", chunk_id)
    assert charged == 100 + 300 and await _counter(repository_db, owner) == charged  # its estimate, once
    again = Published()
    await admit_once(admissions(repository_db, settings), again, settings)
    assert chunk_id not in again.chunk_ids() and await _counter(repository_db, owner) == charged


async def test_the_default_windows_last_slot_waits_for_a_newcomer_not_the_backlog(repository_db: asyncpg.Pool) -> None:
    """The default window (calls in flight and spare behind them): an owner already served is admitted up
    to one slot short of it, and that slot goes to the next owner to arrive, at its first admission
    (before, the backlog took it and the newcomer waited for a call to finish)."""
    deployment = f"spare-{uuid.uuid4().hex[:6]}."
    backlog, newcomer = f"owner-{uuid.uuid4().hex[:8]}", f"owner-{uuid.uuid4().hex[:8]}"
    settings = SummarizerSettings(_env_file=None, topic_prefix=deployment, llm_max_inflight=1, admission_spare=2)  # type: ignore[call-arg]
    assert settings.admission_window is None and settings.window() == 3
    await _chunk(repository_db, backlog, admitted_ago_s=1.0, deployment=deployment)  # its call: 2 slots left
    waiting = {await _chunk(repository_db, backlog, admitted_ago_s=None, deployment=deployment) for _ in range(5)}
    published = Published()
    for _ in range(2):
        await admit_once(admissions(repository_db, settings), published, settings)
    assert len(published.chunk_ids()) == 1 and published.chunk_ids() <= waiting  # one slot kept free
    arriving = await _chunk(repository_db, newcomer, admitted_ago_s=None, deployment=deployment)
    await admit_once(admissions(repository_db, settings), published, settings)
    assert arriving in published.chunk_ids() and len(published.chunk_ids()) == 2


async def test_fifo_admits_the_oldest_ready_chunk_whoever_is_served_most(repository_db: asyncpg.Pool) -> None:
    """DOCSUM_ADMISSION_ORDER=fifo: one free slot goes to the chunk ready first, though its owner is being
    served and the fair order would give it to the other, coming back; its owner is charged."""
    deployment = f"fifo-{uuid.uuid4().hex[:6]}."
    first, second = f"owner-{uuid.uuid4().hex[:8]}", f"owner-{uuid.uuid4().hex[:8]}"
    await repository_db.execute(
        "INSERT INTO owner_shares (deployment, owner, counter) VALUES ($1, $2, 50000)", deployment, first
    )
    await _chunk(repository_db, first, admitted_ago_s=1.0, deployment=deployment)  # its slot: one left
    older = await _chunk(repository_db, first, admitted_ago_s=None, deployment=deployment)
    newer = await _chunk(repository_db, second, admitted_ago_s=None, deployment=deployment)
    await repository_db.execute(
        "UPDATE chunks SET ready_at = now() - interval '1 second' WHERE id = $1", older
    )  # stored a second before
    chosen = {}
    for order in ("fair", "fifo"):
        settings = SummarizerSettings(
            _env_file=None, topic_prefix=deployment, admission_window=2, admission_order=order
        )  # type: ignore[call-arg]
        published = Published()
        await admit_once(admissions(repository_db, settings), published, settings)
        chosen[order] = published.chunk_ids()
        await repository_db.execute(  # both waiting again, the slot free again
            "UPDATE chunks SET admitted_at = NULL WHERE id = ANY($1::text[])", [older, newer]
        )
    assert chosen == {"fair": {newer}, "fifo": {older}}
    assert await _counter(repository_db, first, deployment) == 50_000 + 100 + 300


async def test_a_newcomer_is_ranked_below_the_chunks_holding_slots_and_its_claim_carries_the_rank(
    repository_db: asyncpg.Pool,
) -> None:
    """Alice's counter (1,300) was charged for the two chunks she holds (ranked 500 and 900, charged 400
    each): bob, coming back, is ranked just below them, not at her counter, and so is his counter; the
    claim gives the rank with the chunk. A chunk admitted first in, first out has none."""
    deployment = f"rank-{uuid.uuid4().hex[:6]}."
    alice, bob = f"owner-{uuid.uuid4().hex[:8]}", f"owner-{uuid.uuid4().hex[:8]}"
    await repository_db.execute(
        "INSERT INTO owner_shares (deployment, owner, counter) VALUES ($1, $2, 1300)", deployment, alice
    )
    for start in (500.0, 900.0):
        held = await _chunk(repository_db, alice, admitted_ago_s=1.0, charged=400.0, deployment=deployment)
        await repository_db.execute("UPDATE chunks SET fair_tier = 1, fair_start = $2 WHERE id = $1", held, start)
    newcomer = await _chunk(repository_db, bob, admitted_ago_s=None, deployment=deployment)
    settings = SummarizerSettings(_env_file=None, topic_prefix=deployment, admission_window=3)  # type: ignore[call-arg]
    published = Published()
    await admit_once(admissions(repository_db, settings), published, settings)
    assert published.chunk_ids() == {newcomer}
    claimed = await ChunkRepository(repository_db).claim(newcomer, "here", 30.0)
    assert claimed.chunk is not None and claimed.chunk.rank is not None
    tier, start = claimed.chunk.rank
    assert tier == 1 and start < 500.0 and start == pytest.approx(500.0)
    assert await _counter(repository_db, bob, deployment) == pytest.approx(500.0 + 400.0)  # from there, charged
    fifo = SummarizerSettings(_env_file=None, topic_prefix=deployment, admission_window=4, admission_order="fifo")  # type: ignore[call-arg]
    later = await _chunk(repository_db, bob, admitted_ago_s=None, deployment=deployment)
    await admit_once(admissions(repository_db, fifo), Published(), fifo)
    unranked = await ChunkRepository(repository_db).claim(later, "here", 30.0)
    assert unranked.chunk is not None and unranked.chunk.rank is None


async def test_an_admitted_chunk_nobody_took_up_is_announced_again_and_not_charged_again(
    repository_db: asyncpg.Pool,
) -> None:
    """The admission committed, then its process died before publishing: the chunk is admitted, charged,
    and on no topic. Once unleased for the hold time it is announced again, its charge unchanged."""
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    lost = await _chunk(repository_db, owner, admitted_ago_s=120.0, charged=400.0)
    recent = await _chunk(repository_db, owner, admitted_ago_s=1.0, charged=400.0)  # its message on its way
    settings = SummarizerSettings(_env_file=None, admission_window=1_000, admission_hold_s=60)  # type: ignore[call-arg]
    published = Published()
    await admit_once(admissions(repository_db, settings), published, settings, touch=True)
    assert lost in published.chunk_ids() and recent not in published.chunk_ids()
    assert await _counter(repository_db, owner) is None  # nothing charged: both were charged before
    charged = await repository_db.fetch("SELECT charged FROM chunks WHERE id = ANY($1::text[])", [lost, recent])
    assert [r["charged"] for r in charged] == [400.0, 400.0]
    again = Published()
    await admit_once(admissions(repository_db, settings), again, settings, touch=True)
    assert lost not in again.chunk_ids()  # its hold starts over


async def test_a_deployment_admits_and_announces_again_only_its_own_tasks_chunks(repository_db: asyncpg.Pool) -> None:
    """Two deployments (topic prefixes) share the database: each one's admission admits, charges and
    announces again only its own tasks' chunks (its topics are not the other's), and the owner's counter
    is kept per deployment; both admit at the same time (a lock each)."""
    owner, east, west = (
        f"owner-{uuid.uuid4().hex[:8]}",
        f"east-{uuid.uuid4().hex[:6]}.",
        f"west-{uuid.uuid4().hex[:6]}.",
    )
    waiting = {d: await _chunk(repository_db, owner, admitted_ago_s=None, deployment=d) for d in (east, west)}
    lost = {
        d: await _chunk(repository_db, owner, admitted_ago_s=120.0, charged=400.0, deployment=d) for d in (east, west)
    }
    settings = {
        d: SummarizerSettings(_env_file=None, topic_prefix=d, admission_window=1_000, admission_hold_s=60)  # type: ignore[call-arg]
        for d in (east, west)
    }
    published = {d: Published() for d in (east, west)}
    async with admissions(repository_db, settings[west]).turn() as held:  # west's admission under way
        assert held is not None
        await admit_once(admissions(repository_db, settings[east]), published[east], settings[east], touch=True)
    await admit_once(admissions(repository_db, settings[west]), published[west], settings[west], touch=True)
    for d in (east, west):
        assert published[d].chunk_ids() == {waiting[d], lost[d]}
        assert await _counter(repository_db, owner, d) == 100 + 300  # its own chunk's estimate only


async def test_a_deployments_round_scheduler_announces_only_its_own_chunks_due(repository_db: asyncpg.Pool) -> None:
    """A chunk of each deployment waits for its next round, both due: each deployment's round scheduler
    reads only its own (the other's announcement on its topics would be summarized by its summarizers)."""
    owner, east, west = (
        f"owner-{uuid.uuid4().hex[:8]}",
        f"east-{uuid.uuid4().hex[:6]}.",
        f"west-{uuid.uuid4().hex[:6]}.",
    )
    due = {d: await _chunk(repository_db, owner, admitted_ago_s=5.0, deployment=d) for d in (east, west)}
    await repository_db.execute(
        "UPDATE chunks SET retry_at = now() - interval '1 second' WHERE id = ANY($1::text[])", list(due.values())
    )
    for d in (east, west):
        rounds = await ChunkRepository(repository_db, deployment=d).due_rounds(10_000)
        assert {r.chunk_id for r in rounds} & set(due.values()) == {due[d]}


async def test_the_window_follows_the_live_summarizers_calls_in_flight_plus_a_spare_each(
    repository_db: asyncpg.Pool,
) -> None:
    """Without DOCSUM_ADMISSION_WINDOW, one admission admits up to the live summarizers' calls in flight
    plus `admission_spare` each: two replicas of 2 and 5 calls, spare 2, admit 11 of 20 waiting chunks; a
    replica not seen for a few heartbeats (its process died) and one that stopped cleanly count nothing."""
    owner, deployment = f"owner-{uuid.uuid4().hex[:8]}", f"live-{uuid.uuid4().hex[:6]}."
    waiting = {await _chunk(repository_db, owner, admitted_ago_s=None, deployment=deployment) for _ in range(20)}
    settings = SummarizerSettings(_env_file=None, topic_prefix=deployment, llm_max_inflight=2, admission_spare=2)  # type: ignore[call-arg]
    repo = admissions(repository_db, settings)
    for holder, inflight in (("a", 2), ("b", 5), ("dead", 7), ("stopped", 11)):
        await repo.alive(holder, inflight, forget_s=60.0)
    await repository_db.execute(
        "UPDATE summarizer_replicas SET seen_at = now() - make_interval(secs => $2) WHERE deployment = $1"
        " AND holder = 'dead'",
        deployment, 30.0,  # ten heartbeats
    )  # fmt: skip
    await repo.gone("stopped")
    published = Published()
    assert await admit_once(repo, published, settings) == (2 + 2) + (5 + 2)  # not 4 × its own 2
    assert published.chunk_ids() < waiting
    # Explicitly set, the window is that, whoever is alive.
    narrow = SummarizerSettings(_env_file=None, topic_prefix=deployment, admission_window=14)  # type: ignore[call-arg]
    assert await admit_once(admissions(repository_db, narrow), Published(), narrow) == 14 - 11
    # A replica gone a minute is forgotten by the next heartbeat.
    await repository_db.execute(
        "UPDATE summarizer_replicas SET seen_at = now() - make_interval(secs => $2) WHERE deployment = $1"
        " AND holder = 'dead'",
        deployment, 120.0,
    )  # fmt: skip
    await repo.alive("a", 2, forget_s=60.0)
    holders = await repository_db.fetch("SELECT holder FROM summarizer_replicas WHERE deployment = $1", deployment)
    assert sorted(r["holder"] for r in holders) == ["a", "b"]


async def test_the_query_keda_scales_the_summarizer_on_counts_the_work_waiting_and_in_hand(
    repository_db: asyncpg.Pool,
) -> None:
    """The query of the summarizer's PostgreSQL trigger (its ScaledObject renders it: test_deploy_manifests),
    on the real schema: it counts the deployment's chunks waiting for their turn (Kafka's lag does not: they
    are announced once admitted) and those admitted and not finished, and nothing else."""
    deployment = f"keda-{uuid.uuid4().hex[:6]}."
    query = work_to_do_sql(deployment)
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    assert await repository_db.fetchval(query) == 0
    waiting = [await _chunk(repository_db, owner, admitted_ago_s=None, deployment=deployment) for _ in range(3)]
    in_hand = await _chunk(repository_db, owner, admitted_ago_s=1.0, deployment=deployment)
    called = await _chunk(repository_db, owner, admitted_ago_s=1.0, deployment=deployment)
    await repository_db.execute("UPDATE chunks SET status = $2 WHERE id = $1", called, ChunkStatus.SUMMARIZING)
    await _chunk(repository_db, owner, admitted_ago_s=None, deployment="another-deployment.")
    assert await repository_db.fetchval(query) == 5
    done = await _chunk(repository_db, owner, admitted_ago_s=1.0, deployment=deployment)
    await repository_db.execute("UPDATE chunks SET status = $2 WHERE id = $1", done, ChunkStatus.COMPLETED)
    paused = await _chunk(repository_db, owner, admitted_ago_s=None, deployment=deployment)
    await repository_db.execute(
        "UPDATE tasks SET status = $2 WHERE id = (SELECT d.task_id FROM documents d JOIN chunks c"
        " ON c.document_id = d.id WHERE c.id = $1)",
        paused, TaskStatus.PAUSED,
    )  # fmt: skip
    cancelled = await _chunk(repository_db, owner, admitted_ago_s=None, deployment=deployment)
    await repository_db.execute(
        "UPDATE documents SET status = $2 WHERE id = (SELECT document_id FROM chunks WHERE id = $1)",
        cancelled, DocumentStatus.CANCELLED,
    )  # fmt: skip
    assert await repository_db.fetchval(query) == 5  # a finished chunk, a paused task, a cancelled document
    await repository_db.execute("UPDATE chunks SET status = $2 WHERE id = ANY($1::text[])", [*waiting, in_hand],
                                ChunkStatus.COMPLETED)  # fmt: skip
    assert await repository_db.fetchval(query) == 1


async def _waiting_task(
    db: asyncpg.Pool, owner: str, chunks: int, deployment: str, *, priority: str = "normal", ready_ago_s: float = 0.0
) -> str:
    """A task of `owner`'s whose `chunks` chunks wait for their turn, ready `ready_ago_s` ago."""
    task_id, document_id = f"task-{uuid.uuid4().hex[:12]}", f"document-{uuid.uuid4().hex[:12]}"
    await db.execute(
        "INSERT INTO tasks (id, owner, status, deployment, options) VALUES ($1, $2, $3, $4, $5::jsonb)",
        task_id, owner, TaskStatus.PROCESSING, deployment, json.dumps({"priority": priority}),
    )  # fmt: skip
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status, chunk_total) VALUES ($1, $2, 'd.txt', $3, $4)",
        document_id, task_id, DocumentStatus.SUMMARIZING, chunks,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO chunks (id, document_id, chunk_index, start_char, end_char, text, status, ready_at)"
        " SELECT $1 || '-c' || i, $1, i, 0, 4, 'text', $2, now() - make_interval(secs => $3::float8)"
        " FROM generate_series(0, $4 - 1) AS i",
        document_id, ChunkStatus.PENDING, ready_ago_s, chunks,
    )  # fmt: skip
    return task_id


async def test_a_waiting_tasks_place_counts_its_owners_own_work_first_and_nobody_elses(
    repository_db: asyncpg.Pool,
) -> None:
    """The task view's `place`: bob's new task waits behind his own older normal task and his urgent one,
    not behind his background one, and not (as a count or in its time) behind alice's backlog; his urgent
    task has nothing of his before it. Its time is his own pace: his calls answered over the last minute."""
    deployment = f"place-{uuid.uuid4().hex[:6]}."
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    backlog = await _waiting_task(repository_db, alice, 500, deployment, ready_ago_s=60.0)
    older = await _waiting_task(repository_db, bob, 7, deployment, ready_ago_s=30.0)
    await _waiting_task(repository_db, bob, 11, deployment, priority="background", ready_ago_s=40.0)
    new = await _waiting_task(repository_db, bob, 3, deployment, ready_ago_s=1.0)
    urgent = await _waiting_task(repository_db, bob, 2, deployment, priority="urgent")
    await _waiting_task(repository_db, bob, 13, "another-deployment.", ready_ago_s=50.0)  # not this one's
    for task_id, calls in ((older, 4), (backlog, 90)):  # answered in the last minute; one from the cache
        await repository_db.execute(
            "INSERT INTO llm_calls (task_id, kind, cache_key, model, cached, created_at)"
            " SELECT $1, 'chunk', 'k', 'm', i = 0, now() - interval '10 seconds' FROM generate_series(0, $2 - 1) AS i",
            task_id, calls,
        )  # fmt: skip
    settings = LLMSettings(_env_file=None, topic_prefix=deployment)  # type: ignore[call-arg]
    view = await views.task_view(repository_db, settings, Scope(deployment, bob), new)
    assert view is not None and view.place is not None
    # His older normal task's 7 and his urgent task's 2 go first: 12 chunks at 3 calls a minute.
    assert view.place.model_dump() == {"waiting_chunks": 3, "ahead_chunks": 9, "calls_per_minute": 3, "eta_s": 240.0}
    first = await views.task_view(repository_db, settings, Scope(deployment, bob), urgent)
    assert first is not None and first.place is not None
    assert (first.place.waiting_chunks, first.place.ahead_chunks) == (2, 0)
    assert await views.task_view(repository_db, settings, Scope(deployment, bob), backlog) is None  # alice's
    await repository_db.execute(
        "UPDATE chunks SET admitted_at = now() WHERE document_id IN (SELECT id FROM documents WHERE task_id = $1)",
        new,
    )  # fmt: skip
    admitted = await views.task_view(repository_db, settings, Scope(deployment, bob), new)
    assert admitted is not None and admitted.place is None  # its chunks had their turn: none waits
