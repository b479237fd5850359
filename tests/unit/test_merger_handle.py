"""The merger's handle(event, deps) against in-memory fakes of its repository and of the LLM."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.cache import CallContext
from docsum_llm.citations import check_sources, chunk_sentences
from docsum_llm.extractive import ExtractiveBackend
from docsum_merger.handlers import Deps, handle
from docsum_merger.policy import DEFAULT_OPTIONS, ChunkState, Cited
from docsum_merger.settings import MergerSettings
from docsum_shared.errors import AnsweredWithInput, Poison, ProviderUnavailable, RequestRefused
from docsum_shared.events import ChunkSummarized, DocumentMerged, DocumentOutcome, TaskEvent, TaskFinished
from docsum_shared.options import TaskOptions
from docsum_shared.retry import Backoff
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
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


def _cut(text: str, size: int) -> list[tuple[int, str]]:
    """`text` in consecutive pieces of about `size` characters, cut after a sentence: (start, piece)."""
    pieces, start = [], 0
    while start < len(text):
        end = text.find(". ", start + size)
        end = len(text) if end < 0 else end + 1
        pieces.append((start, text[start:end]))
        start = end
    return pieces


def _cited_documents(
    texts: dict[str, str], answer: Callable[[SummaryRequest], SummaryResult], options: TaskOptions = DEFAULT_OPTIONS
) -> FakeMergeRepository:
    """Task "t" with a document of each of `texts` (its id -> its text), cut into chunks of ~700 characters,
    each summarized by `answer` and its sentences given their sources in the document."""
    repo = FakeMergeRepository()
    repo.add_task("t", options=options)
    for position, (document_id, text) in enumerate(texts.items()):
        chunks = []
        for index, (start, piece) in enumerate(_cut(text, 700)):
            result = answer(SummaryRequest(SummaryKind.CHUNK, (piece,)))
            sentences = chunk_sentences(result, document_id, start, None)
            chunks.append(ChunkState(index, ChunkStatus.COMPLETED, result.text, None, sentences))
        repo.add_document(document_id, "t", filename=f"{document_id}.txt", position=position, chunks=chunks)
    return repo


async def test_sources_are_carried_from_the_chunks_through_every_merge_to_the_task() -> None:
    backend = ExtractiveBackend()
    texts = {"d": english_prose(9_000, seed=21), "e": english_prose(9_000, seed=22)}
    repo = _cited_documents(texts, backend.summarize_sync)
    llm = FakeLLM(answer=backend.summarize_sync, window=600)
    for document_id in texts:
        event = ChunkSummarized(task_id="t", document_id=document_id, chunk_id=f"{document_id}-c", chunk_index=0)
        await handle(event, _deps(repo, llm))
    assert repo.nodes and {scope for scope, level, _ in repo.nodes if level > 0} == set(texts)  # trees of 2+ levels
    [out] = await handle(
        DocumentMerged(task_id="t", document_id="e", outcome=DocumentOutcome.COMPLETED), _deps(repo, llm)
    )
    assert isinstance(out, TaskEvent) and repo.tasks["t"].status is TaskStatus.COMPLETED
    summaries: list[tuple[str | None, Cited]] = [
        *((d.summary, d.summary_sentences) for d in repo.documents.values()),
        *((n.summary, n.sentences) for n in repo.nodes.values()),
        (repo.tasks["t"].summary, repo.tasks["t"].summary_sentences),
    ]
    for summary, cited in summaries:
        assert summary and cited, summary
        for sentence in cited:
            assert sentence.support == "cited" and check_sources(sentence, texts), sentence
            assert summary[sentence.at[0] : sentence.at[1]] == sentence.text
    cited_documents = {s.document_id for sentence in repo.tasks["t"].summary_sentences or () for s in sentence.sources}
    assert cited_documents == set(texts)  # the task's summary quotes both documents


async def test_a_merge_over_chunks_whose_sentences_are_unknown_labels_its_sentences_synthesis_without_sources() -> None:
    backend = ExtractiveBackend()
    repo, llm = _repo(chunks=3, summary_chars=600), FakeLLM(answer=backend.summarize_sync)  # no chunk sentences
    await handle(SUMMARIZED, _deps(repo, llm))
    sentences = repo.documents["d"].summary_sentences
    assert sentences and all(s.support == "synthesis" and not s.sources for s in sentences)


async def test_a_backend_that_says_nothing_of_its_sentences_stores_none() -> None:
    repo, llm = _repo(), FakeLLM()  # its answers have no sentences
    await handle(SUMMARIZED, _deps(repo, llm))
    assert repo.documents["d"].status is DocumentStatus.COMPLETED and repo.documents["d"].summary_sentences is None


INVENTED = "Penguins juggle violet umbrellas at midnight."


async def test_a_strict_tasks_merges_build_on_no_unsupported_sentence_at_any_level_and_keep_them_stored() -> None:
    """Each answer, the chunks' and every merge's, starts with a sentence nothing shown says. With support
    strict, no merge request (a level of a hierarchical merge, the document's, the task's) holds it; the
    stored summaries and merge nodes keep it, labelled unsupported."""
    backend = ExtractiveBackend()

    def answer(request: SummaryRequest) -> SummaryResult:
        quoted = backend.summarize_sync(request)
        sentence = SummarySentence(INVENTED, (), "unsupported")
        # First: a text cut to fit a merge's budget loses its end.
        return replace(quoted, text=f"{INVENTED} {quoted.text}", sentences=(sentence, *quoted.sentences))

    texts = {"d": english_prose(9_000, seed=31), "e": english_prose(9_000, seed=32)}
    repo = _cited_documents(texts, answer, TaskOptions(support="strict"))
    llm = FakeLLM(answer=answer, window=600)
    for document_id in texts:
        event = ChunkSummarized(task_id="t", document_id=document_id, chunk_id=f"{document_id}-c", chunk_index=0)
        await handle(event, _deps(repo, llm))
    await handle(DocumentMerged(task_id="t", document_id="e", outcome=DocumentOutcome.COMPLETED), _deps(repo, llm))
    assert repo.tasks["t"].status is TaskStatus.COMPLETED
    assert {scope for scope, level, _ in repo.nodes if level > 0} >= set(texts)  # trees of 2+ levels
    assert llm.calls and not [r for r in llm.calls if any(INVENTED in t for t in r.texts)]
    stored = [*repo.documents.values()]
    for summary, cited in [
        *((d.summary, d.summary_sentences) for d in stored),
        *((n.summary, n.sentences) for n in repo.nodes.values()),
        (repo.tasks["t"].summary, repo.tasks["t"].summary_sentences),
    ]:
        assert summary and INVENTED in summary and cited is not None
        assert [s.support for s in cited if s.text == INVENTED] == ["unsupported"]


def _stand_in_merge(request: SummaryRequest) -> SummaryResult:
    """A merge that depends on every text it merged: ~250 characters led by its first text's."""
    digest = hashlib.sha256("\x00".join(request.texts).encode()).hexdigest()
    return SummaryResult(f"[{digest[:8]}] {request.texts[0][:240]}", "fake-1")


async def test_a_new_version_is_merged_in_the_previous_versions_groups_so_a_page_at_the_top_redoes_only_its_path() -> (
    None
):
    """A chunk summary more at the top: the new version's merges that the first did not make are its own
    group's at each level and the top; the levels above keep pairing the texts they paired before."""
    summaries = [english_prose(300, seed=700 + i).replace("\n\n", " ") for i in range(60)]
    top = english_prose(300, seed=799).replace("\n\n", " ")
    repo = FakeMergeRepository()
    repo.add_task("v1")
    repo.add_document("d1", "v1", filename="report.txt", chunks=_states(summaries))
    for task, previous in (("v2", "v1"), ("v2-alone", None)):
        repo.add_task(task, options=TaskOptions(previous_task=previous))
        repo.add_document(f"{task}-d", task, filename="report.txt", chunks=_states([top, *summaries]))
    made: dict[str, set[tuple[str, ...]]] = {}
    for task, document in (("v1", "d1"), ("v2", "v2-d"), ("v2-alone", "v2-alone-d")):
        llm = FakeLLM(answer=_stand_in_merge, learned=1_200)
        event = ChunkSummarized(task_id=task, document_id=document, chunk_id=f"{document}-c", chunk_index=0)
        [out] = await handle(event, _deps(repo, llm))
        assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
        made[task] = {r.texts for r in llm.calls}
    levels = max(level for scope, level, _ in repo.nodes if scope == "v2-d")
    assert levels >= 2
    assert len(made["v2"] - made["v1"]) <= levels + 1
    # the same document submitted as no version of the first: its groups are the draws' alone
    assert len(made["v2-alone"] - made["v1"]) > len(made["v2"] - made["v1"])


def _states(summaries: list[str]) -> list[ChunkState]:
    return [ChunkState(i, ChunkStatus.COMPLETED, text, None) for i, text in enumerate(summaries)]


COPIED = AnsweredWithInput("LLM provider answered with the input itself instead of a summary")


async def test_a_merge_answered_with_its_input_copied_quotes_its_texts_at_once_and_says_so() -> None:
    """One group of a hierarchical merge is answered with a copy of its input (a model too small to
    merge): it is made by quoting its texts, without asking again; its sentences keep their sources in
    the document, the other groups are the model's, and the summary says it is partly quoted."""
    backend = ExtractiveBackend()
    text = english_prose(9_000, seed=41)
    repo = _cited_documents({"d": text}, backend.summarize_sync)
    calls = 0

    def answer(request: SummaryRequest) -> SummaryResult:
        nonlocal calls
        calls += 1
        if calls == 2:  # the second group of the first level
            raise COPIED
        return replace(backend.summarize_sync(request), model="fake-1")

    llm = FakeLLM(answer=answer, learned=600)  # a budget known: merged in groups from the first call
    [out] = await handle(ChunkSummarized(task_id="t", document_id="d", chunk_id="d-c", chunk_index=0), _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
    document = repo.documents["d"]
    assert document.merge_failures == 0 and len(llm.calls) == calls  # no attempt failed, none was repeated
    quoted = repo.nodes["d", 0, 1]
    assert [n.summary for k, n in sorted(repo.nodes.items()) if k != ("d", 0, 1)]  # the model's own nodes
    assert quoted.sentences and all(s.support == "cited" and check_sources(s, {"d": text}) for s in quoted.sentences)
    assert document.summary and document.summary.endswith(
        "[Partly quoted: the model answered a merge of this summary with its input copied, so that merge quotes"
        " the best sentences of the summaries it merges instead.]"
    )
    assert document.summary_model == "fake-1"  # the top was the model's
    for sentence in document.summary_sentences or ():
        assert document.summary[sentence.at[0] : sentence.at[1]] == sentence.text  # the note is no sentence


async def test_a_task_merge_answered_with_its_input_copied_is_quoted_and_the_task_completes() -> None:
    repo = _repo()
    repo.documents["d"].status, repo.documents["d"].summary = DocumentStatus.COMPLETED, english_prose(600, seed=5)
    repo.add_document(
        "e", "t", filename="b.txt", position=1, status=DocumentStatus.COMPLETED, summary=english_prose(600, seed=6)
    )
    llm = FakeLLM(script=[COPIED])
    merged = DocumentMerged(task_id="t", document_id="e", outcome=DocumentOutcome.COMPLETED)
    [out] = await handle(merged, _deps(repo, llm))
    task = repo.tasks["t"]
    assert isinstance(out, TaskEvent) and task.status is TaskStatus.COMPLETED and len(llm.calls) == 1
    assert task.summary and "Partly quoted: the model answered a merge" in task.summary
    assert task.summary_model == ExtractiveBackend.model  # made by quoting, and named so


async def test_a_provider_error_before_the_copy_is_still_a_failed_attempt_asked_again() -> None:
    """Only a copy is final: a provider error before it is an attempt, as before."""
    down = ProviderUnavailable("LLM provider error 502")
    repo, llm = _repo(), FakeLLM(script=[down, COPIED])
    [out] = await handle(SUMMARIZED, _deps(repo, llm))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.COMPLETED
    assert repo.documents["d"].merge_failures == 1 and len(llm.calls) == 2
    assert "Partly quoted" in (repo.documents["d"].summary or "")
