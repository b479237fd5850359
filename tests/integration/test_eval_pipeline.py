"""The evaluation's summaries come from the pipeline itself (eval/inprocess.py): run in the test's process on
the session's PostgreSQL server, read back as a client reads them, and checked as `make eval` checks them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from docsum_llm.citations import check_sources
from docsum_parser.extract import extract_text
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.positions import position_of
from docsum_shared.settings import LLMSettings
from tests.documents import english_prose, make_pdf
from tests.fake_llm import FakeLLMServer
from tests.generators import ROOT
from tests.unit.test_eval_citations import _eval_module


async def test_the_pipelines_sentences_cite_their_documents_with_pages(infra: dict[str, str]) -> None:
    inprocess = _eval_module("inprocess")
    files = {
        "prose.pdf": make_pdf([english_prose(3000, seed=page) for page in range(6)]),
        "chinese-essay.txt": (ROOT / "examples" / "chinese-essay.txt").read_bytes(),
    }
    async with inprocess.running(LLMSettings(llm_backend="extractive"), infra["DATABASE_URL"]) as pipeline:
        task = await pipeline.summarize({name: (name, data) for name, data in files.items()}, title="examples")
    assert task.status == "COMPLETED"
    texts = {d.name: d.extracted for d in task.documents}
    for document in task.documents:
        extracted = extract_text(files[document.name], document.name)  # what the parser makes of the file
        assert document.extracted == extracted.text  # the text route gives the whole text
        assert len(document.chunks) > 1 or document.name.endswith(".txt")  # a DOCUMENT merge of the chunks'
        for s in [*document.sentences, *(c for chunk in document.chunks for c in chunk.sentences)]:
            assert check_sources(s, texts) and s.support == "cited"
            assert [x.page for x in s.sources] == [position_of(extracted.positions, x.start) for x in s.sources]
    assert {x.document_id for s in task.sentences for x in s.sources} == set(texts)
    assert all(check_sources(s, texts) for s in task.sentences)


async def test_a_task_that_stops_moving_is_given_up_on_with_where_it_stood(
    infra: dict[str, str], llm: FakeLLMServer
) -> None:
    inprocess = _eval_module("inprocess")
    settings = LLMSettings(llm_backend="openai", openai_base_url=llm.base_url, openai_api_key="k", llm_model="m")
    llm.llm.hang_next(1)  # the one chunk's call never answers
    async with inprocess.running(settings, infra["DATABASE_URL"]) as pipeline:
        pipeline.stall_s = 1.0
        with pytest.raises(TimeoutError, match="has not moved for 1 s"):
            await pipeline.summarize({"note.txt": ("note.txt", b"Kafka stores events. Brokers keep them.")})


async def test_a_cached_pdf_is_summarized_checked_and_reported_and_too_few_fail(
    tmp_path: Path, infra: dict[str, str]
) -> None:
    r = _eval_module("real_pdfs")
    package = r.Package("prose-doc", "usr/share/doc/prose-doc/prose.pdf.gz", "fpdf2")
    (tmp_path / "prose.pdf").write_bytes(make_pdf([english_prose(3000, seed=page) for page in range(6)]))
    # Found in the cache: no download.
    outcome = await r.run([package], tmp_path, verbose=False, database_url=infra["DATABASE_URL"])
    [row] = outcome.rows
    assert row.pages == 6 and row.chunks > 1 and row.chunk.sentences > 0 and row.document.sentences > 0
    assert row.chunk.misses == row.document.misses == () and outcome.task is not None
    report = r.render(outcome)
    assert "| prose.pdf | prose-doc | fpdf2 | 6 |" in report
    assert f"**failed**: 1 PDFs found, fewer than {r.MIN_FOUND}." in report
    assert "- misses: none." in report
    said = CitedSentence("Said.", (Source("prose.pdf", 2, 0, 5),), "cited", (0, 5))
    miss = r.Miss(said, Source("prose.pdf", 2, 0, 5), "page 2, but …", "Said")
    wrong = r.Checked(1, (miss,))
    shown = r.render(r.Outcome((replace(row, document=wrong),) * 4, outcome.task, 0.0, ("gone-doc: not offered",), ()))
    assert "**failed**" not in shown and "misses: none" not in shown and "- skipped: gone-doc: not offered" in shown
    assert "| 1 | 0.0 |" in shown and "“Said.” ← prose.pdf page 2 [0:5]: page 2, but … (it quotes “Said”)" in shown
