"""The summarizer's repository contract: the lease on a chunk, its rounds, its guarded completions and
the gates of its task and document, and its batch line (batch mode), as ChunkRepository keeps them on
PostgreSQL and its fake in memory.

A subclass gives `repo` and the world it stands in: rows seeded, a lease run out, and the columns no
load returns (the stored outcome, the counts on the document) read back.
"""

from __future__ import annotations

import abc
import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.options import TaskOptions
from docsum_shared.positions import Positions, position_of
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.policy import ChunkLine, LineStatus, request_from, request_json
from docsum_summarizer.handlers import Repository
from docsum_summarizer.policy import Answer, StoredChunk
from docsum_summarizer.repository import Claim, DueRound

TTL = 60.0
LONG = 3600.0  # a round far from due
DEFAULT_OPTIONS = TaskOptions()
LINE_REQUEST = SummaryRequest(kind=SummaryKind.CHUNK, texts=("The text of the chunk.",), context_before="Before.")
ENDPOINT = "http://stand-in/v1|m"  # the batch lines' endpoint key


class ChunkStore(Repository, Protocol):
    """The handler's port, and the round scheduler's reads of the same rows."""

    async def due_rounds(self, limit: int) -> Sequence[DueRound]: ...
    async def announced(self, due: list[DueRound]) -> None: ...


@dataclass(frozen=True)
class ChunkFacts:
    """What a chunk's row holds beyond what `load` returns."""

    summary: str | None
    summary_model: str | None
    summary_truncated: bool
    error: str | None
    attempts: int
    interruptions: int
    lease: str | None
    sentences: tuple[CitedSentence, ...] | None = None


@dataclass(frozen=True)
class DocumentCounts:
    chunks_completed: int
    chunks_failed: int
    truncated_parts: int


def _id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}"


class SummarizerRepositoryContract(abc.ABC):
    repo: ChunkStore

    # --- the world a case starts from, and what it reads back -------------------------------------

    @abc.abstractmethod
    async def given_task(self, task_id: str, status: TaskStatus, owner: str, options: TaskOptions) -> None: ...

    @abc.abstractmethod
    async def given_document(self, document_id: str, task_id: str, status: DocumentStatus) -> None: ...

    @abc.abstractmethod
    async def given_chunk(
        self, chunk_id: str, document_id: str, index: int, status: ChunkStatus, text: str, failures: int, start: int = 0
    ) -> None: ...

    @abc.abstractmethod
    async def given_text(self, document_id: str, text: str, positions: Positions | None) -> None:
        """The document's extracted text, and where its units start (as the parser stores them)."""

    @abc.abstractmethod
    async def task_now(self, task_id: str, status: TaskStatus) -> None:
        """The task moved by someone else (paused, cancelled)."""

    @abc.abstractmethod
    async def lease_runs_out(self, chunk_id: str) -> None:
        """The chunk's lease expiry, whoever holds it, put in the past."""

    @abc.abstractmethod
    async def admitted(self, chunk_id: str, admitted: bool) -> None:
        """The chunk given its slot in the fair order, or not yet (as the admission leaves it)."""

    @abc.abstractmethod
    async def given_line(self, chunk_id: str, status: LineStatus, custom_id: str) -> None:
        """The chunk's batch line, as the batch driver left it."""

    @abc.abstractmethod
    async def line_request(self, chunk_id: str) -> dict[str, Any] | None:
        """The request stored with the chunk's batch line, if it has one."""

    @abc.abstractmethod
    async def facts(self, chunk_id: str) -> ChunkFacts: ...

    @abc.abstractmethod
    async def counts(self, document_id: str) -> DocumentCounts: ...

    @abc.abstractmethod
    async def recovering(self, task_id: str) -> bool:
        """Whether the task is marked as recovering from an interruption."""

    async def chunk(
        self,
        *,
        task: TaskStatus = TaskStatus.PROCESSING,
        document: DocumentStatus = DocumentStatus.SUMMARIZING,
        status: ChunkStatus = ChunkStatus.PENDING,
        failures: int = 0,
        owner: str = "alice",
        options: TaskOptions = DEFAULT_OPTIONS,
    ) -> tuple[str, str, str]:
        """A chunk in a document of a task of its own: (task_id, document_id, chunk_id)."""
        task_id, document_id, chunk_id = _id("task"), _id("document"), _id("chunk")
        await self.given_task(task_id, task, owner, options)
        await self.given_document(document_id, task_id, document)
        await self.given_chunk(chunk_id, document_id, 3, status, "The text of the chunk.", failures)
        return task_id, document_id, chunk_id

    async def stored(self, chunk_id: str) -> StoredChunk:
        stored = await self.repo.load(chunk_id)
        assert stored is not None, f"{chunk_id} is gone"
        return stored

    async def status(self, chunk_id: str) -> ChunkStatus:
        return (await self.stored(chunk_id)).status

    async def due(self, chunk_id: str) -> list[Any]:
        """The scheduler's rows for this chunk (the database is shared: others' rows are left out)."""
        return [r for r in await self.repo.due_rounds(10_000) if r.chunk_id == chunk_id]

    # --- loads ---------------------------------------------------------------------------------------

    async def test_load_gives_the_chunk_with_its_task_and_document(self) -> None:
        options = TaskOptions(language="French", style="bullets")
        _, _, chunk_id = await self.chunk(failures=2, owner="bob", options=options)
        assert await self.repo.load(chunk_id) == StoredChunk(
            status=ChunkStatus.PENDING,
            text="The text of the chunk.",
            context_before="",
            context_after="",
            document_status=DocumentStatus.SUMMARIZING,
            task_status=TaskStatus.PROCESSING,
            options=options,
            failures=2,
            owner="bob",
        )

    async def test_an_unknown_chunk_loads_nothing_and_nothing_moves_it(self) -> None:
        chunk_id = _id("chunk")
        assert await self.repo.load(chunk_id) is None
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.UNAVAILABLE
        assert await self.repo.complete(chunk_id, "t", _answer("summary", "m")) is False
        assert await self.repo.fail(chunk_id, "error") is False

    # --- the lease -----------------------------------------------------------------------------------

    @pytest.mark.parametrize("task", [TaskStatus.PROCESSING, TaskStatus.PENDING])
    async def test_a_pending_chunk_is_taken_and_given_as_leased(self, task: TaskStatus) -> None:
        _, _, chunk_id = await self.chunk(task=task)
        claimed = await self.repo.claim(chunk_id, "a", TTL)
        assert claimed.outcome is Claim.TAKEN
        assert claimed.chunk is not None and claimed.chunk.status is ChunkStatus.SUMMARIZING
        assert claimed.chunk == await self.repo.load(chunk_id)
        facts = await self.facts(chunk_id)
        assert (facts.lease, facts.attempts, facts.interruptions) == ("a", 1, 0)

    async def test_a_live_lease_is_refused_to_another_holder_and_taken_again_by_its_own(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.TAKEN
        held = await self.repo.claim(chunk_id, "b", TTL)
        assert held.outcome is Claim.HELD and held.chunk is None
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.TAKEN  # its own: no takeover
        facts = await self.facts(chunk_id)
        assert (facts.lease, facts.attempts, facts.interruptions) == ("a", 2, 0)
        assert not await self.recovering(task_id)

    async def test_a_lease_that_ran_out_is_taken_over_as_an_interruption(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        await self.lease_runs_out(chunk_id)
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.TAKEN
        facts = await self.facts(chunk_id)
        assert (facts.lease, facts.attempts, facts.interruptions) == ("b", 2, 1)
        assert await self.recovering(task_id)
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.HELD  # the old holder is out

    async def test_renew_keeps_the_lease_of_its_holder_only(self) -> None:
        _, _, renewed = await self.chunk()
        await self.repo.claim(renewed, "a", TTL)
        await self.lease_runs_out(renewed)
        await self.repo.renew(renewed, "a", TTL)
        assert (await self.repo.claim(renewed, "b", TTL)).outcome is Claim.HELD

        _, _, not_theirs = await self.chunk()
        await self.repo.claim(not_theirs, "a", TTL)
        await self.lease_runs_out(not_theirs)
        await self.repo.renew(not_theirs, "b", TTL)  # not b's lease: it stays run out
        assert (await self.repo.claim(not_theirs, "c", TTL)).outcome is Claim.TAKEN

    async def test_release_hands_the_chunk_back_at_once_by_its_holder_only(self) -> None:
        _, _, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.release(chunk_id, "b")
        assert await self.status(chunk_id) is ChunkStatus.SUMMARIZING
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.HELD
        await self.repo.release(chunk_id, "a")
        assert await self.status(chunk_id) is ChunkStatus.PENDING and (await self.facts(chunk_id)).lease is None
        assert await self.due(chunk_id) == []
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.TAKEN
        assert (await self.facts(chunk_id)).interruptions == 0  # handed back, not taken over

    # --- admission -----------------------------------------------------------------------------------

    async def test_a_chunk_not_admitted_yet_is_deferred_and_taken_once_admitted(self) -> None:
        _, _, chunk_id = await self.chunk()
        await self.admitted(chunk_id, False)
        deferred = await self.repo.claim(chunk_id, "a", TTL)
        assert deferred.outcome is Claim.DEFERRED and deferred.chunk is None
        assert await self.status(chunk_id) is ChunkStatus.PENDING and (await self.facts(chunk_id)).lease is None
        await self.admitted(chunk_id, True)
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.TAKEN

    # --- rounds --------------------------------------------------------------------------------------

    async def test_a_chunk_released_for_a_later_round_is_deferred_until_due(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.release(chunk_id, "a", retry_in_s=LONG)
        assert await self.status(chunk_id) is ChunkStatus.PENDING
        deferred = await self.repo.claim(chunk_id, "b", TTL)
        assert deferred.outcome is Claim.DEFERRED and deferred.chunk is None
        assert await self.due(chunk_id) == []
        await self.task_now(task_id, TaskStatus.PAUSED)
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.DEFERRED  # still, paused or not

    async def test_a_due_round_is_listed_and_taken(self) -> None:
        task_id, document_id, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.release(chunk_id, "a", retry_in_s=0.0)
        [due] = await self.due(chunk_id)
        assert (due.task_id, due.document_id, due.chunk_index) == (task_id, document_id, 3)
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.TAKEN

    async def test_announced_takes_a_round_off_the_list_unless_deferred_again_meanwhile(self) -> None:
        _, _, announced = await self.chunk()
        await self.repo.claim(announced, "a", TTL)
        await self.repo.release(announced, "a", retry_in_s=0.0)
        await self.repo.announced(await self.due(announced))
        assert await self.due(announced) == []

        _, _, again = await self.chunk()
        await self.repo.claim(again, "a", TTL)
        await self.repo.release(again, "a", retry_in_s=0.0)
        due = await self.due(again)
        await self.repo.claim(again, "b", TTL)
        await self.repo.release(again, "b", retry_in_s=LONG)  # its next round, set before the announcement
        await self.repo.announced(due)
        assert (await self.repo.claim(again, "c", TTL)).outcome is Claim.DEFERRED

    # --- the gates of the task and the document ------------------------------------------------------

    @pytest.mark.parametrize(
        "task", [TaskStatus.PAUSED, TaskStatus.AWAITING_APPROVAL, TaskStatus.CANCELLED, TaskStatus.COMPLETED]
    )
    async def test_a_task_that_takes_no_work_gets_no_claim(self, task: TaskStatus) -> None:
        _, _, chunk_id = await self.chunk(task=task)
        refused = await self.repo.claim(chunk_id, "a", TTL)
        assert refused.outcome is Claim.UNAVAILABLE and refused.chunk is None
        assert await self.status(chunk_id) is ChunkStatus.PENDING and (await self.facts(chunk_id)).attempts == 0

    @pytest.mark.parametrize("document", [DocumentStatus.COMPLETED, DocumentStatus.FAILED, DocumentStatus.CANCELLED])
    async def test_a_final_document_gets_no_claim(self, document: DocumentStatus) -> None:
        _, _, chunk_id = await self.chunk(document=document)
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.UNAVAILABLE
        assert await self.status(chunk_id) is ChunkStatus.PENDING

    async def test_a_lease_in_a_task_paused_meanwhile_is_held_and_not_taken_again(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        await self.task_now(task_id, TaskStatus.PAUSED)
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.HELD
        assert (await self.facts(chunk_id)).attempts == 1

    # --- the outcome, stored once ----------------------------------------------------------------------

    async def test_complete_stores_the_summary_once_and_counts_it_once(self) -> None:
        task_id, document_id, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        assert await self.repo.complete(chunk_id, task_id, _answer("the summary", "model-1", truncated=True)) is True
        assert await self.status(chunk_id) is ChunkStatus.COMPLETED
        facts = await self.facts(chunk_id)
        assert (facts.summary, facts.summary_model, facts.summary_truncated, facts.lease) == (
            "the summary",
            "model-1",
            True,
            None,
        )
        assert await self.counts(document_id) == DocumentCounts(1, 0, 1)

        assert await self.repo.complete(chunk_id, task_id, _answer("another", "model-2")) is False  # repeat: harmless
        assert await self.repo.fail(chunk_id, "too late") is False
        assert await self.status(chunk_id) is ChunkStatus.COMPLETED
        assert (await self.facts(chunk_id)).summary == "the summary" and (await self.facts(chunk_id)).error is None
        assert await self.counts(document_id) == DocumentCounts(1, 0, 1)
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.UNAVAILABLE

    async def test_claims_and_completions_made_at_once_each_get_their_own_outcome(self) -> None:
        """Calls made together (one statement for all of them on PostgreSQL) answer as calls made alone:
        a chunk claimed twice at once is taken by one holder and held for the other, a chunk no longer
        wanted is unavailable, a chunk completed twice at once is counted once."""
        task_id, document_id, first = await self.chunk()
        others = [_id("chunk") for _ in range(3)]
        for index, chunk_id in enumerate(others):
            await self.given_chunk(chunk_id, document_id, 4 + index, ChunkStatus.PENDING, f"Text {index}.", 0)
        _, _, done = await self.chunk(status=ChunkStatus.COMPLETED)
        claims = await asyncio.gather(
            self.repo.claim(first, "a", TTL),
            self.repo.claim(first, "b", TTL),
            *(self.repo.claim(chunk_id, f"h{i}", TTL) for i, chunk_id in enumerate(others)),
            self.repo.claim(done, "a", TTL),
        )
        outcomes = [claimed.outcome for claimed in claims]
        assert sorted(o.value for o in outcomes[:2]) == [Claim.HELD.value, Claim.TAKEN.value]
        assert outcomes[2:] == [Claim.TAKEN, Claim.TAKEN, Claim.TAKEN, Claim.UNAVAILABLE]
        assert [c.chunk.text for c in claims[2:5] if c.chunk] == ["Text 0.", "Text 1.", "Text 2."]
        holder = "a" if outcomes[0] is Claim.TAKEN else "b"
        assert (await self.facts(first)).lease == holder
        assert [(await self.facts(c)).lease for c in others] == ["h0", "h1", "h2"]

        completed = await asyncio.gather(
            self.repo.complete(first, task_id, _answer("first", "m")),
            self.repo.complete(first, task_id, _answer("again", "m")),
            *(self.repo.complete(c, task_id, _answer(f"summary {i}", "m", truncated=i == 0)) for i, c in
              enumerate(others)),
        )  # fmt: skip
        assert completed == [True, False, True, True, True]
        assert (await self.facts(first)).summary == "first"
        assert [(await self.facts(c)).summary for c in others] == ["summary 0", "summary 1", "summary 2"]
        assert await self.counts(document_id) == DocumentCounts(4, 0, 1)

    async def test_complete_stores_the_sentences_with_their_sources_or_none(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        sentences = (
            CitedSentence("Kafka keeps logs.", (Source("d", 2, 40, 57),), "cited", (0, 17)),
            CitedSentence("Both.", (Source("d", 2, 40, 57), Source("e", None, 0, 9)), "synthesis", (18, 23)),
        )
        await self.repo.complete(chunk_id, task_id, Answer("Kafka keeps logs. Both.", "m", False, sentences))
        assert (await self.facts(chunk_id)).sentences == sentences
        task_id, _, chunk_id = await self.chunk()
        await self.repo.complete(chunk_id, task_id, Answer("No sentences said.", "m", False, None))
        assert (await self.facts(chunk_id)).sentences is None

    async def test_load_and_claim_give_where_the_chunk_starts_and_the_pages_around_it(self) -> None:
        text = "".join(chr(ord("a") + i % 26) for i in range(60))
        whole = Positions("page", (0, 12, 12, 30, 45, 60))  # the third page is empty, the last too
        task_id, document_id = _id("task"), _id("document")
        await self.given_task(task_id, TaskStatus.PROCESSING, "alice", DEFAULT_OPTIONS)
        await self.given_document(document_id, task_id, DocumentStatus.SUMMARIZING)
        await self.given_text(document_id, text, whole)
        for start, end in ((0, 12), (20, 50), (30, 60), (13, 14)):
            chunk_id = _id("chunk")
            await self.given_chunk(chunk_id, document_id, start, ChunkStatus.PENDING, text[start:end], 0, start)
            loaded = await self.stored(chunk_id)
            claimed = (await self.repo.claim(chunk_id, "a", TTL)).chunk
            assert claimed is not None
            for chunk in (loaded, claimed):
                assert chunk.start_char == start and chunk.positions is not None
                assert chunk.positions.unit == "page"
                pages = [position_of(chunk.positions, x) for x in range(start, end)]
                assert pages == [position_of(whole, x) for x in range(start, end)]

    async def test_a_chunk_of_a_text_without_positions_has_none(self) -> None:
        task_id, document_id, chunk_id = await self.chunk()
        await self.given_text(document_id, "The text of the chunk.", None)
        assert (await self.stored(chunk_id)).positions is None

    async def test_complete_takes_an_unleased_pending_chunk_too(self) -> None:
        task_id, document_id, chunk_id = await self.chunk()
        assert await self.repo.complete(chunk_id, task_id, _answer("the summary", "model-1")) is True
        assert await self.counts(document_id) == DocumentCounts(1, 0, 0)

    async def test_fail_stores_the_error_once_and_counts_it_once(self) -> None:
        task_id, document_id, chunk_id = await self.chunk()
        await self.repo.claim(chunk_id, "a", TTL)
        assert await self.repo.fail(chunk_id, "the reason") is True
        assert await self.status(chunk_id) is ChunkStatus.FAILED
        assert (await self.facts(chunk_id)).error == "the reason" and (await self.facts(chunk_id)).lease is None
        assert await self.counts(document_id) == DocumentCounts(0, 1, 0)

        assert await self.repo.fail(chunk_id, "again") is False
        assert await self.repo.complete(chunk_id, task_id, _answer("too late", "model-1")) is False
        assert await self.status(chunk_id) is ChunkStatus.FAILED
        assert (await self.facts(chunk_id)).error == "the reason" and (await self.facts(chunk_id)).summary is None
        assert await self.counts(document_id) == DocumentCounts(0, 1, 0)

    # --- failures --------------------------------------------------------------------------------------

    async def test_a_failed_attempt_counts_on_a_leased_chunk_only(self) -> None:
        _, _, chunk_id = await self.chunk(failures=1)
        await self.repo.record_failure(chunk_id, "not leased", retry_now=True)  # pending: nothing to count
        assert (await self.stored(chunk_id)).failures == 1

        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.record_failure(chunk_id, "503", retry_now=True)  # tried again at once: one more attempt
        facts = await self.facts(chunk_id)
        assert (facts.error, facts.attempts) == ("503", 2)
        await self.repo.record_failure(chunk_id, "timed out", retry_now=False)  # its next round counts its own
        facts = await self.facts(chunk_id)
        assert (facts.error, facts.attempts) == ("timed out", 2)
        stored = await self.stored(chunk_id)
        assert stored.failures == 3 and stored.status is ChunkStatus.SUMMARIZING

        await self.repo.fail(chunk_id, "gave up")
        await self.repo.record_failure(chunk_id, "after the end", retry_now=True)
        facts = await self.facts(chunk_id)
        assert (facts.error, facts.attempts) == ("gave up", 2)
        assert (await self.stored(chunk_id)).failures == 3

    # --- batch lines ---------------------------------------------------------------------------------

    async def test_queue_line_queues_the_request_and_hands_the_chunk_back_to_wait_for_its_batch(self) -> None:
        task_id, _, chunk_id = await self.chunk(owner="bob")
        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.release(chunk_id, "a", retry_in_s=0.0)  # a round that fell due: it is taken again
        await self.repo.claim(chunk_id, "a", TTL)
        queued = await self.repo.queue_line(
            chunk_id, "a", task_id, "bob", "key-1", request_json(LINE_REQUEST), endpoint=ENDPOINT
        )
        assert queued is True
        stored = await self.stored(chunk_id)
        assert stored.status is ChunkStatus.PENDING and stored.line == ChunkLine(LineStatus.QUEUED, "key-1")
        assert (await self.facts(chunk_id)).lease is None
        assert await self.due(chunk_id) == []  # the batch driver announces it, not the round scheduler
        request = await self.line_request(chunk_id)
        assert request is not None and request_from(request) == LINE_REQUEST

        waiting = await self.repo.claim(chunk_id, "b", TTL)
        assert waiting.outcome is Claim.BATCHED and waiting.chunk is None
        assert await self.status(chunk_id) is ChunkStatus.PENDING and (await self.facts(chunk_id)).attempts == 2

    async def test_queue_line_by_a_holder_without_the_lease_queues_nothing(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        request = request_json(LINE_REQUEST)
        assert (
            await self.repo.queue_line(chunk_id, "a", task_id, "alice", "key-1", request, endpoint=ENDPOINT) is False
        )  # not leased
        await self.repo.claim(chunk_id, "a", TTL)
        assert await self.repo.queue_line(chunk_id, "b", task_id, "alice", "key-1", request, endpoint=ENDPOINT) is False
        stored = await self.stored(chunk_id)
        assert stored.status is ChunkStatus.SUMMARIZING and stored.line is None
        assert (await self.facts(chunk_id)).lease == "a" and await self.line_request(chunk_id) is None
        assert (await self.repo.claim(chunk_id, "a", TTL)).outcome is Claim.TAKEN

    async def test_a_dropped_line_is_queued_again(self) -> None:
        task_id, _, chunk_id = await self.chunk()
        await self.given_line(chunk_id, LineStatus.DROPPED, "old-key")
        claimed = await self.repo.claim(chunk_id, "a", TTL)
        assert claimed.outcome is Claim.TAKEN
        assert claimed.chunk is not None and claimed.chunk.line == ChunkLine(LineStatus.DROPPED, "old-key")
        queued = await self.repo.queue_line(
            chunk_id, "a", task_id, "alice", "new-key", request_json(LINE_REQUEST), endpoint=ENDPOINT
        )
        assert queued is True
        assert (await self.stored(chunk_id)).line == ChunkLine(LineStatus.QUEUED, "new-key")
        request = await self.line_request(chunk_id)
        assert request is not None and request_from(request) == LINE_REQUEST
        assert (await self.repo.claim(chunk_id, "b", TTL)).outcome is Claim.BATCHED

    @pytest.mark.parametrize("status", [LineStatus.ANSWERED, LineStatus.REALTIME])
    async def test_queue_line_leaves_a_line_done_with_its_batch_as_it_is(self, status: LineStatus) -> None:
        task_id, _, chunk_id = await self.chunk()
        await self.given_line(chunk_id, status, "old-key")
        await self.repo.claim(chunk_id, "a", TTL)
        await self.repo.queue_line(
            chunk_id, "a", task_id, "alice", "new-key", request_json(LINE_REQUEST), endpoint=ENDPOINT
        )
        assert (await self.stored(chunk_id)).line == ChunkLine(status, "old-key")

    @pytest.mark.parametrize("status", [LineStatus.QUEUED, LineStatus.SUBMITTED])
    async def test_a_chunk_whose_line_waits_for_its_batch_gets_no_claim(self, status: LineStatus) -> None:
        _, _, chunk_id = await self.chunk()
        await self.given_line(chunk_id, status, "key-1")
        refused = await self.repo.claim(chunk_id, "a", TTL)
        assert refused.outcome is Claim.BATCHED and refused.chunk is None
        assert await self.status(chunk_id) is ChunkStatus.PENDING and (await self.facts(chunk_id)).attempts == 0

    @pytest.mark.parametrize("status", [LineStatus.ANSWERED, LineStatus.REALTIME])
    async def test_a_chunk_whose_line_is_done_with_its_batch_is_taken_with_its_line(self, status: LineStatus) -> None:
        _, _, chunk_id = await self.chunk()
        await self.given_line(chunk_id, status, "key-1")
        claimed = await self.repo.claim(chunk_id, "a", TTL)
        assert claimed.outcome is Claim.TAKEN
        assert claimed.chunk is not None and claimed.chunk.line == ChunkLine(status, "key-1")
        assert claimed.chunk == await self.repo.load(chunk_id)


def _answer(text: str, model: str, *, truncated: bool = False) -> Answer:
    return Answer(text, model, truncated, None)
