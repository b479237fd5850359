"""Summaries you can check, through the real services: every sentence of every summary the built-in
extractive backend makes, a document's and the task's, carries sources whose ranges exist in the
documents' extracted texts, quote the sentence, and name the page (paragraph, line) they start on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from docsum_shared.positions import Positions, position_of
from docsum_shared.summarizers.citations import CitedSentence, Source, check_sources
from tests.documents import english_prose, make_pdf
from tests.integration.conftest import ROOT, StackFactory
from tests.integration.helpers import submit, wait_for_task

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
    stack = make_stack(DOCSUM_LLM_BACKEND="extractive")
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
