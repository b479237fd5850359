"""The merger's handle(event, deps) against in-memory fakes of its repository and of the LLM."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from docsum_merger.handlers import Deps, handle
from docsum_merger.policy import ChunkState
from docsum_merger.settings import MergerSettings
from docsum_shared.errors import Poison, ProviderUnavailable, RequestRefused
from docsum_shared.events import ChunkSummarized, DocumentMerged, DocumentOutcome, TaskEvent, TaskFinished
from docsum_shared.options import TaskOptions
from docsum_shared.retry import Backoff
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_shared.summarizers.base import SummaryRequest, SummaryResult
from docsum_shared.summarizers.cache import CallContext
from tests.documents import english_prose
from tests.fakes.llm import FakeLLM
from tests.fakes.merger import FakeMergeRepository

SETTINGS = MergerSettings(_env_file=None, llm_max_attempts=3)


def _repo(
    chunks: int = 3, status: ChunkStatus = ChunkStatus.COMPLETED, summary_chars: int = 200
) -> FakeMergeRepository:
    """Task "t" with its document "d", cut into `chunks` chunks."""
    repo = FakeMergeRepository()
    repo.add_task("t")
    summaries = [ChunkState(i, status, english_prose(summary_chars, seed=i), None) for i in range(chunks)]
    repo.add_document("d", "t", chunks=summaries)
    return repo


def _deps(repo: FakeMergeRepository, llm: FakeLLM) -> Deps:
    return Deps(repo, llm, SETTINGS, backoff=Backoff(base_s=0.0, cap_s=0.0))


SUMMARIZED = ChunkSummarized(task_id="t", document_id="d", chunk_id="d-c00002", chunk_index=2)


async def test_the_last_chunk_merges_the_document_and_announces_it() -> None:
    repo, llm = _repo(), FakeLLM()
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
    assert out.trace_id == SUMMARIZED.trace_id and out.causation_id == SUMMARIZED.event_id
    assert repo.documents["d"].status is DocumentStatus.COMPLETED and len(llm.calls) == 1


async def test_nothing_happens_while_a_chunk_is_unfinished() -> None:
    repo, llm = _repo(), FakeLLM()
    repo.put_chunk("d", ChunkState(1, ChunkStatus.PENDING, None, None))
    assert await handle(SUMMARIZED, _deps(repo, llm)) == [] and llm.calls == []
    assert repo.chunk_rows_read == 0  # decided from the document's counts alone


async def test_a_document_of_n_chunks_has_its_chunk_rows_read_once() -> None:
    n = 400
    repo, llm = _repo(chunks=n, status=ChunkStatus.PENDING), FakeLLM()
    deps = _deps(repo, llm)
    for i in range(n):  # each chunk finishes, and its event reaches the merger (twice: at-least-once)
        repo.put_chunk("d", ChunkState(i, ChunkStatus.COMPLETED, english_prose(100, seed=i), None))
        event = ChunkSummarized(task_id="t", document_id="d", chunk_id=f"d-c{i:05d}", chunk_index=i)
        await handle(event, deps)
        await handle(event, deps)
    assert repo.documents["d"].status is DocumentStatus.COMPLETED
    assert repo.chunk_rows_read == n  # linear: the rows are read once, when the document is complete


async def test_replay_of_a_merged_document_announces_it_again_without_a_call() -> None:
    repo, llm = _repo(), FakeLLM()
    repo.documents["d"].status, repo.documents["d"].summary = DocumentStatus.COMPLETED, "done"
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and llm.calls == []


@pytest.mark.parametrize("task", [TaskStatus.PAUSED, TaskStatus.CANCELLED])
async def test_a_held_task_is_not_merged(task: TaskStatus) -> None:
    repo, llm = _repo(), FakeLLM()
    repo.tasks["t"].status = task
    assert await handle(SUMMARIZED, _deps(repo, llm)) == [] and llm.calls == []


async def test_a_refused_merge_fails_the_document_with_the_providers_message_and_announces_it() -> None:
    refusal = RequestRefused("LLM provider rejected the request (400): The provider rejected this prompt.")
    repo, llm = _repo(), FakeLLM(script=[refusal])
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert "rejected this prompt" in (repo.documents["d"].error or "") and len(llm.calls) == 1


async def test_a_merge_over_the_window_is_learned_and_goes_hierarchical() -> None:
    repo, llm = _repo(chunks=12, summary_chars=900), FakeLLM(window=1_500)
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
    assert llm.learned == 1_500 and repo.nodes  # merged in groups, each group stored
    assert {scope for scope, _, _ in repo.nodes} == {"d"}


async def test_a_provider_that_keeps_failing_fails_the_document_after_the_attempts() -> None:
    down = ProviderUnavailable("LLM provider error 502")
    repo, llm = _repo(), FakeLLM(script=[down] * 10)
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    assert "gave up after 3 attempts" in (repo.documents["d"].error or "") and len(llm.calls) == 3


async def test_the_task_finishes_when_every_document_is_final_even_if_its_summary_is_refused() -> None:
    repo = _repo()
    repo.documents["d"].status, repo.documents["d"].summary = DocumentStatus.COMPLETED, "one"
    repo.add_document("e", "t", filename="b.txt", position=1, status=DocumentStatus.COMPLETED, summary="two")
    llm = FakeLLM(script=[RequestRefused("LLM provider rejected the request (400): no")])
    merged = DocumentMerged(task_id="t", document_id="e", outcome=DocumentOutcome.COMPLETED)
    [out] = await handle(merged, _deps(repo, llm))
    assert isinstance(out, TaskEvent) and out.status is TaskStatus.COMPLETED_WITH_ERRORS
    assert "the batch summary could not be made" in (repo.tasks["t"].error or "")


async def test_the_document_and_task_merges_are_made_in_the_tasks_mode() -> None:
    repo = FakeMergeRepository()
    repo.add_task("t", options=TaskOptions(mode="flex"))
    repo.add_document(
        "d", "t", chunks=[ChunkState(i, ChunkStatus.COMPLETED, english_prose(200, i), None) for i in (0, 1)]
    )
    repo.add_document("e", "t", filename="b.txt", position=1, status=DocumentStatus.COMPLETED, summary="two")
    llm = FakeLLM()
    [merged] = await handle(SUMMARIZED.model_copy(update={"chunk_index": 1}), _deps(repo, llm))
    await handle(merged, _deps(repo, llm))
    assert len(llm.contexts) == 2 and all(c is not None and c.mode == "flex" for c in llm.contexts)


async def test_an_unknown_document_is_poison() -> None:
    with pytest.raises(Poison):
        await handle(SUMMARIZED.model_copy(update={"document_id": "x"}), _deps(_repo(), FakeLLM()))


@dataclass
class SlowLLM(FakeLLM):
    """A merge that answers only once its task has been marked active twice (or fails after 5 s)."""

    repo: FakeMergeRepository = field(default_factory=FakeMergeRepository)

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        async with asyncio.timeout(5):
            while len(self.repo.touched) < 2:
                await asyncio.sleep(0.01)
        return await super().summarize(request, context)


async def test_a_running_merge_keeps_its_task_active_so_reconcile_leaves_it_alone() -> None:
    repo = _repo()
    settings = MergerSettings(_env_file=None, reconcile_idle_s=0.15)  # touched every 0.05 s while merging
    running = asyncio.all_tasks()
    [out] = await handle(SUMMARIZED, Deps(repo, SlowLLM(repo=repo), settings, backoff=Backoff(base_s=0.0, cap_s=0.0)))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
    assert len(repo.touched) >= 2 and set(repo.touched) == {"t"}
    assert asyncio.all_tasks() <= running  # what marked it is gone with the merge: no more marks come


async def test_a_final_task_event_publishes_the_tasks_result_the_same_each_time() -> None:
    repo = _repo()
    repo.documents["d"].status, repo.documents["d"].summary = DocumentStatus.COMPLETED, "one"
    merged = DocumentMerged(task_id="t", document_id="d", outcome=DocumentOutcome.COMPLETED)
    [ended] = await handle(merged, _deps(repo, FakeLLM()))
    assert isinstance(ended, TaskEvent) and ended.status is TaskStatus.COMPLETED
    [first] = await handle(ended, _deps(repo, FakeLLM()))
    [again] = await handle(TaskEvent(task_id="t", status=TaskStatus.COMPLETED), _deps(repo, FakeLLM()))
    assert isinstance(first, TaskFinished) and first.key() == "t"
    assert first.status == "COMPLETED" and first.summary == "one" and first.documents[0].summary == "one"
    assert first.to_bytes() == again.to_bytes()  # a replay or a re-drive publishes it identical


async def test_only_a_final_status_that_still_holds_publishes_a_result() -> None:
    repo = _repo()
    assert await handle(TaskEvent(task_id="t", status=TaskStatus.PAUSED), _deps(repo, FakeLLM())) == []
    # Retried since it failed: the task is running again, so the old event publishes nothing.
    assert await handle(TaskEvent(task_id="t", status=TaskStatus.FAILED), _deps(repo, FakeLLM())) == []
    with pytest.raises(Poison):
        await handle(TaskEvent(task_id="x", status=TaskStatus.CANCELLED), _deps(repo, FakeLLM()))
