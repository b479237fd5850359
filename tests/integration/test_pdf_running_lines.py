"""A PDF's running header and footer are layout, not text, through the real pipeline: its chunks and its
summaries hold neither, every sentence's source is quoted (GET .../text) on the page the text is on, and
the same report printed again on another day - only the footer's date changed - costs its owner no
LLM call, while another owner pays for it in full (the result cache is per owner).

The pipeline runs in-process (what is tested is what the parser makes of the pages and what the cache
answers, not processes or the broker); the LLM is the stand-in, whose ledger counts the calls paid.
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest

from tests.documents import printed_report
from tests.fake_llm import FakeLLMServer
from tests.inprocess import InProcessStack
from tests.integration.helpers import calls, chunks_of, marked_text, new_marker, submit, wait_for_task

pytestmark = pytest.mark.integration

TITLE = "Northwind Quarterly Operations Review"
FOOTER = re.compile(r"Page \d+ of \d+|printed")


def report(bodies: list[str], printed: str) -> bytes:
    return printed_report(bodies, printed, TITLE)


def _words(text: str) -> str:
    return " ".join(text.split())


async def _summarized(pipeline: InProcessStack, owner: str, data: bytes) -> dict[str, Any]:
    async with pipeline.client(owner) as client:
        files = [("files", ("operations-review.pdf", data, "application/pdf"))]
        task = await wait_for_task(client, await submit(client, files), pipeline)
    assert task["status"] == "COMPLETED", task
    return task


@pytest.mark.parametrize("pages", [3, 6])
async def test_running_header_and_footer_stay_out_of_chunks_and_summaries_and_a_reprint_costs_nothing(
    pages: int, pipeline: InProcessStack, llm: FakeLLMServer, db: asyncpg.Pool
) -> None:
    marker = new_marker()  # in every sentence: the ledger's calls for this report are the ones carrying it
    bodies = [marked_text(7_200 // pages, seed=300 + 10 * pages + n, marker=marker) for n in range(pages)]

    first = await _summarized(pipeline, "alice", report(bodies, printed="2026-12-05 09:41"))

    document = first["documents"][0]
    chunks = await chunks_of(db, document["document_id"])
    assert len(chunks) >= 3, len(chunks)  # several chunks and their merge
    for chunk in chunks:
        for text in (chunk["text"], chunk["context_before"], chunk["context_after"]):
            assert TITLE not in text and not FOOTER.search(text), text
    for summary in (first["summary"], document["summary"]):
        assert TITLE not in summary and not FOOTER.search(summary), summary

    # Every source, quoted through the gateway, is text of the pages the quote route names.
    cited_pages = set()
    async with pipeline.client("alice") as client:
        route = f"/v1/tasks/{first['task_id']}/documents/{document['document_id']}/text"
        sentences = [*first["sentences"], *document["sentences"]]
        sources = [source for sentence in sentences for source in sentence["sources"]]
        assert sources, sentences
        for source in sources:
            quoted = await client.get(route, params={"start": source["start"], "end": source["end"]})
            assert quoted.status_code == 200, quoted.text
            quote = quoted.json()
            assert (quote["page"], quote["last_page"]) == (source["page"], source["last_page"]), (quote, source)
            on_pages = _words(" ".join(bodies[quote["page"] - 1 : quote["last_page"]]))
            assert _words(quote["text"]) in on_pages, quote
            cited_pages.add(quote["page"])
    assert len(cited_pages) > 1, cited_pages  # the summary quotes more than one page

    # Printed again two days later: only the footer changed, and alice's cache answers every call.
    paid = len(calls(llm, marker, 200))
    again = await _summarized(pipeline, "alice", report(bodies, printed="2026-12-07 16:02"))
    assert again["usage"]["llm_calls"] == 0, again["usage"]
    assert again["usage"]["cached_calls"] == first["usage"]["llm_calls"] > 0, (again["usage"], first["usage"])
    assert len(calls(llm, marker, 200)) == paid
    assert again["summary"] == first["summary"]

    # Another owner's reprint is answered by the provider: nothing of alice's cache is bob's.
    bobs = await _summarized(pipeline, "bob", report(bodies, printed="2026-12-07 16:02"))
    assert bobs["usage"]["cached_calls"] == 0 and bobs["usage"]["llm_calls"] == first["usage"]["llm_calls"]
    assert len(calls(llm, marker, 200)) == paid + bobs["usage"]["llm_calls"]
    print(
        f"\n{pages} pages, {len(chunks)} chunks, {len(sources)} sources on pages {sorted(cited_pages)};"
        f" calls: {first['usage']['llm_calls']} first, 0 reprinted, {bobs['usage']['llm_calls']} another owner's"
    )
