"""The summarizer's handle(event, deps) against in-memory fakes of its repository and of the LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from docsum_llm.base import SummaryResult
from docsum_llm.cache import cache_key
from docsum_llm.citations import check_sources
from docsum_llm.extractive import ExtractiveBackend
from docsum_shared.errors import Poison, ProviderUnavailable, RateLimited, RequestRefused
from docsum_shared.events import ChunkCreated, ChunkSummarized, Event
from docsum_shared.handlers import Sender
from docsum_shared.options import Mode, TaskOptions
from docsum_shared.positions import Positions, position_of
from docsum_shared.positions import window as positions_window
from docsum_shared.retry import Backoff
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.batches.policy import ChunkLine, LineStatus, request_from
from docsum_summarizer.handlers import Deps, handle
from docsum_summarizer.policy import Answer, StoredChunk, request_for
from docsum_summarizer.repository import Claim, Claimed
from docsum_summarizer.rounds import announce_due
from docsum_summarizer.settings import SummarizerSettings
from tests.documents import chinese_prose, english_prose
from tests.fakes.llm import FakeLLM
from tests.fakes.summarizer import FakeChunkRepository

SETTINGS = SummarizerSettings(_env_file=None, llm_max_attempts=3, llm_inplace_attempts=2, llm_retry_delay_s=0.0)


def _chunk(
    status: ChunkStatus = ChunkStatus.PENDING,
    *,
    text: str = "",
    task: TaskStatus = TaskStatus.PROCESSING,
    document: DocumentStatus = DocumentStatus.SUMMARIZING,
    failures: int = 0,
) -> StoredChunk:
    return StoredChunk(
        status, text or english_prose(1_500, seed=1), "before.", "after.", document, task, failures=failures
    )


def _deps(repo: FakeChunkRepository, llm: FakeLLM, settings: SummarizerSettings = SETTINGS) -> Deps:
    return Deps(repo, llm, settings, holder="test", backoff=Backoff(base_s=0.0, cap_s=0.0))


EVENT = ChunkCreated(task_id="t", document_id="d", chunk_id="c", chunk_index=0)


async def test_a_pending_chunk_is_summarized_stored_and_reported() -> None:
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM()
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and out.chunk_id == "c" and out.causation_id == EVENT.event_id
    assert out.trace_id == EVENT.trace_id
    assert repo.rows["c"].status is ChunkStatus.COMPLETED and repo.rows["c"].summary
    assert len(llm.calls) == 1 and repo.rows["c"].lease is None


@pytest.mark.parametrize("mode", ["flex", None])
async def test_the_call_is_made_in_the_tasks_mode(mode: Mode | None) -> None:
    chunk = replace(_chunk(), options=TaskOptions(mode=mode))
    repo, llm = FakeChunkRepository(c=chunk), FakeLLM()
    await handle(EVENT, _deps(repo, llm))
    assert [c.mode if c else "no context" for c in llm.contexts] == [mode]  # None: the deployment's default


async def test_replay_of_a_finished_chunk_reports_again_and_calls_nothing() -> None:
    repo, llm = FakeChunkRepository(c=_chunk(ChunkStatus.COMPLETED)), FakeLLM()
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and llm.calls == []


@pytest.mark.parametrize("task", [TaskStatus.PAUSED, TaskStatus.CANCELLED, TaskStatus.EXPIRED])
async def test_a_held_task_gets_no_call(task: TaskStatus) -> None:
    repo, llm = FakeChunkRepository(c=_chunk(task=task)), FakeLLM()
    assert await handle(EVENT, _deps(repo, llm)) == []
    assert llm.calls == [] and repo.rows["c"].status is ChunkStatus.PENDING


class ToldToWait(FakeChunkRepository):
    """Sets `held` once a claim is refused for a lease another holder has."""

    def __init__(self, **chunks: StoredChunk) -> None:
        super().__init__(**chunks)
        self.held = asyncio.Event()

    async def claim(self, chunk_id: str, holder: str, ttl_s: float) -> Claimed:
        claimed = await super().claim(chunk_id, holder, ttl_s)
        if claimed.outcome is Claim.HELD:
            self.held.set()
        return claimed


async def test_a_chunk_leased_elsewhere_is_waited_for_not_paid_again() -> None:
    repo, llm = ToldToWait(c=_chunk()), FakeLLM()
    assert (await repo.claim("c", "another-process", 60.0)).outcome is Claim.TAKEN

    async def the_other_finishes() -> None:
        await asyncio.wait_for(repo.held.wait(), timeout=10.0)  # once the handling was told to wait
        await repo.complete("c", "t", Answer("their summary", "fake-1", False, None))

    deps = _deps(repo, llm, SETTINGS.model_copy(update={"lease_ttl_s": 1.0}))
    outcome, _ = await asyncio.gather(handle(EVENT, deps), the_other_finishes())
    assert [type(e) for e in outcome] == [ChunkSummarized] and llm.calls == []
    assert repo.rows["c"].summary == "their summary"


async def test_a_refused_request_fails_the_chunk_at_once_and_still_reports() -> None:
    refused = RequestRefused("LLM provider rejected the request (400)")
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM(script=[refused])
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized)
    assert repo.rows["c"].status is ChunkStatus.FAILED and "400" in (repo.rows["c"].error or "")
    assert len(llm.calls) == 1


async def test_a_context_refusal_lowers_the_budget_and_the_chunk_goes_in_parts() -> None:
    text = chinese_prose(2_000, seed=3)
    repo, llm = FakeChunkRepository(c=_chunk(text=text)), FakeLLM(window=1_200)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED
    assert llm.learned == 1_200
    refused, *parts = llm.calls
    assert len(parts) > 1 and all(not p.context_before for p in parts)
    assert "".join("".join(p.texts[0].split()) for p in parts) == "".join(text.split())  # no text dropped


@pytest.mark.parametrize("window", [None, 1_200], ids=["one request", "in parts"])
async def test_the_stored_sentences_cite_their_documents_text_on_its_pages(window: int | None) -> None:
    prefix, text = english_prose(900, seed=4) + "\n\n", chinese_prose(2_000, seed=5)
    document = prefix + text
    pages = Positions("page", (0, len(prefix) // 2, len(prefix), len(prefix) + 700, len(prefix) + 1_400))
    start = len(prefix)
    chunk = replace(_chunk(text=text), start_char=start, positions=window_of(pages, start, len(document)))
    backend = ExtractiveBackend()
    repo, llm = FakeChunkRepository(c=chunk), FakeLLM(answer=backend.summarize_sync, window=window)
    await handle(EVENT, _deps(repo, llm))
    row = repo.rows["c"]
    assert row.status is ChunkStatus.COMPLETED and row.summary and row.summary_sentences
    assert (window is None) == (len(llm.calls) == 1)
    for sentence in row.summary_sentences:
        [source] = sentence.sources
        assert source.document_id == "d" and source.start >= start
        assert check_sources(sentence, {"d": document}), sentence
        assert source.page == position_of(pages, source.start)
        assert row.summary[sentence.at[0] : sentence.at[1]] == sentence.text


def window_of(whole: Positions, start: int, end: int) -> Positions:
    before = sum(1 for s in whole.starts if s <= start)
    return positions_window(whole.unit, before, tuple(s for s in whole.starts if start < s < end))


async def test_a_window_too_small_for_any_part_fails_the_chunk_naming_the_setting() -> None:
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM(window=100)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.FAILED
    error = repo.rows["c"].error or ""
    assert "DOCSUM_LLM_CONTEXT_TOKENS" in error and "context window" in error, error


async def test_passing_failures_are_retried_in_place_then_later_then_fail_when_attempts_run_out() -> None:
    down = ProviderUnavailable("LLM provider error 503")
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM(script=[down, down, down, down])
    round_wait_s = 30.0
    deps = _deps(repo, llm, SETTINGS.model_copy(update={"llm_retry_delay_s": round_wait_s}))
    # Two tries in place, then the chunk waits for its next round in its row, holding no slot.
    assert await handle(EVENT, deps) == []
    row = repo.rows["c"]
    assert row.failures == 2 and row.retry_at == repo.now + round_wait_s and row.lease is None
    assert row.status is ChunkStatus.PENDING and repo.released == ["c"] and len(llm.calls) == 2
    assert await handle(EVENT, deps) == [] and len(llm.calls) == 2  # a redelivery before it is due: no call
    repo.advance(round_wait_s)  # due: the round scheduler announces it again
    [out] = await handle(EVENT, deps)  # the stored count goes on: one more failure is the third
    assert isinstance(out, ChunkSummarized) and row.status is ChunkStatus.FAILED
    assert "gave up after 3 attempts" in (row.error or "") and len(llm.calls) == 3


class Published(list[tuple[Event, str]]):
    """The Publish port as a list: what was published, and by whom (no producer, no broker)."""

    async def __call__(self, events: Sequence[Event], *, sender: Sender) -> None:
        sender.check(events)
        self.extend((event, sender.who) for event in events)


async def test_a_chunk_waiting_for_its_round_is_announced_through_the_port_when_due() -> None:
    down = ProviderUnavailable("LLM provider error 503")
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM(script=[down, down])
    settings = SETTINGS.model_copy(update={"llm_retry_delay_s": 30.0})
    deps, published = _deps(repo, llm, settings), Published()
    assert await handle(EVENT, deps) == []  # two tries in place: it waits for its next round
    await announce_due(repo, published, settings)
    assert published == []  # not due yet
    repo.advance(30.0)
    await announce_due(repo, published, settings)
    [(announced, who)] = published
    assert isinstance(announced, ChunkCreated) and announced.chunk_id == "c" and announced.chunk_index == 0
    assert who == "the summarizer's round scheduler" and repo.rows["c"].retry_at is None
    await announce_due(repo, published, settings)
    assert len(published) == 1  # announced once
    [out] = await handle(announced, deps)  # the announcement, handled: the third try answers
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED


async def test_a_redriven_chunk_continues_its_stored_attempt_count() -> None:
    repo = FakeChunkRepository(c=_chunk(failures=2))
    llm = FakeLLM(script=[ProviderUnavailable("LLM provider unavailable: timed out")])
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.FAILED
    assert len(llm.calls) == 1


async def test_rate_limits_are_waited_out_and_never_count() -> None:
    busy = RateLimited("429", retry_after=0.0)
    repo, llm = FakeChunkRepository(c=_chunk()), FakeLLM(script=[busy] * 5)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED
    assert repo.rows["c"].failures == 0 and repo.rows["c"].attempts == 1 and len(llm.calls) == 6


async def test_an_unknown_chunk_is_poison() -> None:
    with pytest.raises(Poison):
        await handle(EVENT, _deps(FakeChunkRepository(), FakeLLM()))


# --- batch mode ------------------------------------------------------------------------------------


def _batch_chunk(line: ChunkLine | None = None, *, text: str = "") -> StoredChunk:
    return replace(_chunk(text=text), options=TaskOptions(mode="batch"), owner="alice", line=line)


def _key(chunk: StoredChunk) -> str:
    """The result cache's key of the chunk's one request: its batch line's custom_id."""
    return cache_key("fake-1", request_for(chunk), chunk.owner)


async def test_a_batch_chunk_is_queued_as_a_line_not_called() -> None:
    chunk = _batch_chunk()
    repo, llm = FakeChunkRepository(c=chunk), FakeLLM(can_batch=True)
    assert await handle(EVENT, _deps(repo, llm)) == []  # announced again once its batch answered it
    row = repo.rows["c"]
    assert llm.calls == [] and row.line == ChunkLine(LineStatus.QUEUED, _key(chunk))
    assert row.status is ChunkStatus.PENDING and row.lease is None and row.summary is None
    assert row.line_request is not None and request_from(row.line_request) == request_for(chunk)
    assert await handle(EVENT, _deps(repo, llm)) == [] and llm.calls == []  # a redelivery waits too


async def test_a_batch_chunk_with_a_cached_answer_completes_without_a_line() -> None:
    chunk = _batch_chunk()
    repo, llm = FakeChunkRepository(c=chunk), FakeLLM(can_batch=True)
    llm.results[_key(chunk)] = SummaryResult("the cached summary", "fake-1")
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and llm.calls == []
    row = repo.rows["c"]
    assert row.status is ChunkStatus.COMPLETED and row.summary == "the cached summary" and row.line is None


@pytest.mark.parametrize("can_batch", [True, False])
async def test_a_chunk_its_batch_answered_completes_from_the_stored_answer(can_batch: bool) -> None:
    repo = FakeChunkRepository(c=_batch_chunk(ChunkLine(LineStatus.ANSWERED, "key-1")))
    llm = FakeLLM(can_batch=can_batch)
    llm.results["key-1"] = SummaryResult("the batch's summary", "fake-1", truncated=True, tier="batch")
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and llm.calls == []
    row = repo.rows["c"]
    assert (row.status, row.summary, row.summary_truncated) == (ChunkStatus.COMPLETED, "the batch's summary", True)
    assert repo.documents[row.document_id].truncated_parts == 1


async def test_a_chunk_whose_stored_batch_answer_is_gone_is_called() -> None:
    repo, llm = FakeChunkRepository(c=_batch_chunk(ChunkLine(LineStatus.ANSWERED, "key-1"))), FakeLLM(can_batch=True)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and len(llm.calls) == 1
    assert repo.rows["c"].status is ChunkStatus.COMPLETED


async def test_a_chunk_its_batch_sent_back_is_called_in_realtime() -> None:
    line = ChunkLine(LineStatus.REALTIME, "key-1")
    repo, llm = FakeChunkRepository(c=_batch_chunk(line)), FakeLLM(can_batch=True)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED
    assert [c.mode if c else "no context" for c in llm.contexts] == ["realtime"]
    assert repo.rows["c"].line == line  # not queued again


async def test_batch_mode_without_a_batch_api_calls_as_before() -> None:
    repo, llm = FakeChunkRepository(c=_batch_chunk()), FakeLLM(can_batch=False)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED
    assert len(llm.calls) == 1 and repo.rows["c"].line is None


async def test_a_batch_chunk_that_needs_several_parts_is_called_not_queued() -> None:
    repo = FakeChunkRepository(c=_batch_chunk(text=chinese_prose(2_000, seed=3)))
    llm = FakeLLM(can_batch=True, learned=1_200)
    [out] = await handle(EVENT, _deps(repo, llm))
    assert isinstance(out, ChunkSummarized) and repo.rows["c"].status is ChunkStatus.COMPLETED
    assert len(llm.calls) > 1 and repo.rows["c"].line is None


@pytest.mark.parametrize("status", [LineStatus.QUEUED, LineStatus.SUBMITTED])
async def test_a_chunk_whose_line_waits_for_its_batch_gets_no_call(status: LineStatus) -> None:
    repo, llm = FakeChunkRepository(c=_batch_chunk(ChunkLine(status, "key-1"))), FakeLLM(can_batch=True)
    assert await handle(EVENT, _deps(repo, llm)) == []
    row = repo.rows["c"]
    assert llm.calls == [] and row.status is ChunkStatus.PENDING and row.attempts == 0
    assert row.line == ChunkLine(status, "key-1")
