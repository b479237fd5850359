"""Summaries you can check, through the real services.

- The built-in extractive backend: every sentence of every summary, a document's and the task's, carries
  sources whose ranges exist in the documents' extracted texts, quote the sentence, and name the page
  (paragraph, line) they start on.
- An LLM (the stand-in) answering in the citation format, held to a JSON schema or, where the server
  refuses one, in the plain-text format: every source resolves.
- A weak model that omits its ids, invents some, or answers in free text: the task completes, every
  sentence is labelled, and no source appears that is not a range of the task's documents.

They run the pipeline in-process: what is tested is what the backends' answers become, not processes or
the broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from docsum_llm.citations import check_sources
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.positions import Positions, position_of
from tests.documents import chinese_prose, english_prose, make_pdf
from tests.fake_llm import FakeLLM, FakeLLMServer
from tests.inprocess import InProcessStack
from tests.integration.conftest import ROOT, AnyStack, StackFactory
from tests.integration.helpers import calls, new_marker, resolved_sentences, submit, tagged, txt, wait_for_task

pytestmark = pytest.mark.integration

MIME = {
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".txt": "text/plain",
}


def _example(path: Path) -> tuple[str, tuple[str, bytes, str]]:
    return ("files", (path.name, path.read_bytes(), MIME[path.suffix]))


def _cited(sentence: dict[str, Any]) -> CitedSentence:
    sources = tuple(Source(s["document_id"], s["page"], s["start"], s["end"]) for s in sentence["sources"])
    return CitedSentence(sentence["text"], sources, sentence["support"], tuple(sentence["at"]))  # type: ignore[arg-type]


async def test_every_sentence_of_the_extractive_summaries_quotes_its_documents_on_its_pages(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    stack = make_stack.in_process(DOCSUM_LLM_BACKEND="extractive")
    report = [english_prose(1_800, seed=70 + page) for page in range(6)]  # a PDF of several pages
    files = [_example(p) for p in sorted((ROOT / "examples").iterdir())]
    files.append(("files", ("report.pdf", make_pdf(report), "application/pdf")))
    async with stack.client() as client:
        task = await wait_for_task(client, await submit(client, files), stack, timeout=180)
    assert task["status"] == "COMPLETED", task

    rows = await db.fetch(
        "SELECT document_id, text, position_unit, position_starts FROM document_texts"
        " WHERE document_id = ANY($1::text[])",
        [d["document_id"] for d in task["documents"]],
    )
    texts = {r["document_id"]: r["text"] for r in rows}
    positions = {r["document_id"]: Positions(r["position_unit"], tuple(r["position_starts"])) for r in rows}
    assert {p.unit for p in positions.values()} == {"page", "paragraph", "line"}

    summaries = [(task["summary"], task["sentences"])] + [(d["summary"], d["sentences"]) for d in task["documents"]]
    checked = 0
    for summary, sentences in summaries:
        assert summary and sentences, summary
        for sentence in sentences:
            cited = _cited(sentence)
            assert cited.support == "cited" and cited.sources, sentence
            assert check_sources(cited, texts), sentence  # the range exists and quotes the sentence
            assert summary[cited.at[0] : cited.at[1]] == cited.text
            for source in cited.sources:
                assert source.page == position_of(positions[source.document_id], source.start), sentence
            checked += 1
    pages = {
        s["page"]
        for d in task["documents"]
        if d["filename"] == "report.pdf"
        for x in d["sentences"]
        for s in x["sources"]
    }
    assert len(pages) > 1, pages  # the report's summary quotes more than its first page
    by_task = {s["document_id"] for x in task["sentences"] for s in x["sources"]}
    assert len(by_task) > 1, by_task  # the task's summary quotes several documents
    print(f"\n{checked} sentences, every one quoting its source on its page")


# --- an LLM that cites ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _provider() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture(scope="module")
def _stack(make_stack: StackFactory, _provider: FakeLLMServer) -> Iterator[InProcessStack]:
    """One pipeline for the LLM cases: each submits new text (its marker), so nothing is cached across them."""
    stack = make_stack.in_process(OPENAI_BASE_URL=_provider.base_url)
    yield stack
    stack.stop_all()


@pytest.fixture
def provider(_provider: FakeLLMServer) -> FakeLLMServer:
    _provider.llm.reset(config=True)
    return _provider


async def _summarized(stack: AnyStack, seed: int, **form: str) -> tuple[dict[str, Any], str]:
    """Three documents, one of several chunks (a document merge) and a task merge over them; `form`: the
    task's other form fields."""
    marker = new_marker()
    files = [
        txt(f"{marker}-report.txt", tagged(english_prose(9_000, seed=seed), marker)),
        txt(f"{marker}-memo.txt", tagged(english_prose(1_500, seed=seed + 1), marker)),
        txt(f"{marker}-笔记.txt", tagged(chinese_prose(1_200, seed=seed + 2), marker)),
    ]
    async with stack.client() as client:
        task = await wait_for_task(client, await submit(client, files, title=marker, **form), stack, timeout=120)
    assert task["status"] == "COMPLETED", task
    return task, marker


@pytest.mark.parametrize("server", ["enforces the schema", "refuses response_format"])
async def test_an_llm_answering_in_the_citation_format_has_every_source_resolve(
    server: str, provider: FakeLLMServer, _stack: InProcessStack, db: asyncpg.Pool
) -> None:
    if server == "refuses response_format":
        provider.llm.configure(structured_output="refuse")  # then the plain-text format, read leniently
    task, marker = await _summarized(_stack, seed=80 if server == "enforces the schema" else 90)
    sentences = await resolved_sentences(db, task)
    assert sentences and all(s["support"] == "cited" and s["sources"] for s in sentences), sentences
    answered = [e.prompt for e in calls(provider, marker, 200)]
    in_json = ["Answer in JSON" in prompt for prompt in answered]
    if server == "enforces the schema":
        assert answered and all(in_json)
    else:
        assert calls(provider, marker, 400) and answered and not any(in_json)  # the text format, after the refusal


@pytest.mark.parametrize("fault", ["omit", "invent", "free"])
async def test_a_model_that_omits_invents_or_ignores_its_ids_still_completes_with_every_sentence_labelled(
    fault: str, provider: FakeLLMServer, _stack: InProcessStack, db: asyncpg.Pool
) -> None:
    provider.llm.configure(structured_output="ignore", citation_fault=fault)  # a server without a schema
    task, _ = await _summarized(_stack, seed={"omit": 100, "invent": 110, "free": 120}[fault])
    sentences = await resolved_sentences(db, task)  # each labelled; each source a range of the task's documents
    supports = {s["support"] for s in sentences}
    assert supports <= {"aligned", "synthesis"}, supports  # nothing said where it came from: none is cited
    assert any(s["sources"] for s in sentences)  # most are found in the documents all the same


INVENTED = "Penguins juggle violet umbrellas at midnight."


@pytest.mark.parametrize("support", ["all", "strict"])
async def test_a_sentence_no_source_says_is_unsupported_at_every_level_and_left_out_when_strict(
    support: str, provider: FakeLLMServer, _stack: InProcessStack, db: asyncpg.Pool
) -> None:
    provider.llm.configure(invented_sentence=INVENTED)  # each answer ends with it, citing the first id
    form = {"support": support} if support == "strict" else {}  # "all" is the default
    task, marker = await _summarized(_stack, seed={"all": 130, "strict": 140}[support], **form)
    summaries = [(task["summary"], task["sentences"])] + [(d["summary"], d["sentences"]) for d in task["documents"]]
    assert len(summaries) == 4 and all(sentences for _, sentences in summaries)
    for summary, sentences in summaries:  # the task's, and each document's (one a merge of its chunks)
        invented = [s for s in sentences if s["text"] == INVENTED]
        assert invented and all(s["support"] == "unsupported" and not s["sources"] for s in invented), sentences
        assert all(s["support"] != "unsupported" for s in sentences if s["text"] != INVENTED), sentences
        for s in sentences:  # every sentence is where it says in the text shown; a left-out one at an empty range
            start, end = s["at"]
            assert summary[start:end] == ("" if support == "strict" and s["text"] == INVENTED else s["text"]), s
        assert (INVENTED in summary) is (support == "all"), summary
    # The merges: with support=strict, made from the summaries without it (it is in no merge's texts).
    merges = [e.user for e in calls(provider, marker, 200) if "<part" in e.user or "<document" in e.user]
    assert merges and all((INVENTED in user) is (support == "all") for user in merges)
    chunks = await db.fetch(
        "SELECT c.summary FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1", task["task_id"]
    )
    assert chunks and all(INVENTED in c["summary"] for c in chunks)  # the stored summaries keep everything


async def test_a_model_that_copies_what_it_should_merge_completes_with_quoted_merges_whose_sources_resolve(
    provider: FakeLLMServer, _stack: InProcessStack, db: asyncpg.Pool
) -> None:
    """A model too small to merge answers every merge with its first text copied: each merge is made by
    quoting its texts instead, at once (no merge prompt is sent twice), every sentence still resolves to
    the documents, and the summaries made so say it."""
    provider.llm.configure(copies_merges=True)
    marker = new_marker()

    def long_sentences(n_chars: int, seed: int) -> str:  # a sentence a paragraph: chunk summaries of ~300 chars
        return tagged(english_prose(n_chars, seed=seed).replace(". ", ", and "), marker)

    files = [
        txt(f"{marker}-report.txt", long_sentences(9_000, 150)),
        txt(f"{marker}-memo.txt", long_sentences(900, 151)),
    ]
    async with _stack.client() as client:
        task = await wait_for_task(client, await submit(client, files, title=marker), _stack, timeout=120)
    assert task["status"] == "COMPLETED", task
    assert await resolved_sentences(db, task)
    report, memo = task["documents"]
    note = "[Partly quoted: the model answered a merge of this summary with its input copied"
    assert note in report["summary"] and note in task["summary"], (report["summary"], task["summary"])
    assert "Partly quoted" not in memo["summary"]  # one chunk: nothing merged
    merges = [e.prompt for e in calls(provider, marker, 200) if "<part" in e.user or "<document" in e.user]
    assert len(merges) == 2 and len(set(merges)) == 2, merges  # the report's and the task's, each asked once
