"""Slides, web pages and e-books through the real services: each completes with a summary whose sentences
cite the slide, section or chapter they come from; a file that is not what its name says and a zip bomb
fail alone, with a message saying why. The same formats published on Kafka by another system (inline,
and by a file:// URI) are taken in and summarized the same way.

The uploads run the pipeline in-process (what is tested is how each format is read and cited, not
processes or the broker); what another system publishes needs Kafka's intake topics, so that test runs
the services as processes on Kafka."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from docsum_cli.footnotes import place
from docsum_shared.positions import Positions, position_of
from tests.documents import Slide, english_prose, make_epub, make_html_page, make_pdf, make_pptx
from tests.hostile import with_padding_member
from tests.integration.conftest import StackFactory
from tests.integration.helpers import submit, wait_for_task
from tests.integration.test_foreign_producers import producers, publish

pytestmark = pytest.mark.integration

MiB = 2**20
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def _prose(seed: int, n: int = 700) -> str:
    return english_prose(n, seed=seed).replace("\n", " ")


async def test_slides_pages_and_books_are_summarized_with_their_units(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    stack = make_stack.in_process(DOCSUM_LLM_BACKEND="extractive", DOCSUM_MAX_DOCX_UNZIPPED_BYTES=str(8 * MiB))
    deck = make_pptx(
        [
            Slide(title="Harbour works", texts=[_prose(140)], notes=_prose(141)),
            Slide(title="Costs", table=[["Year", "Cost"], ["1921", "40,000"]], grouped=[_prose(142, 300)]),
            Slide(title="Outlook", texts=[_prose(143)], notes=_prose(144)),
        ]
    )
    page = make_html_page("The harbour dredging", [(f"Part {n}", [_prose(150 + n), _prose(160 + n)]) for n in range(3)])
    book = make_epub([(f"Chapter {n}", [_prose(170 + n), _prose(180 + n)]) for n in range(1, 4)])
    files = [
        ("files", ("deck.pptx", deck, PPTX)),
        ("files", ("harbour.html", page, "text/html")),
        ("files", ("voyage.epub", book, "application/epub+zip")),
        ("files", ("misnamed.pptx", make_pdf([_prose(190)]), PPTX)),
        ("files", ("bomb.epub", with_padding_member(book, "OEBPS/padding.bin", 32 * MiB), "application/epub+zip")),
    ]

    async with stack.client() as client:
        task = await wait_for_task(client, await submit(client, files), stack, timeout=180)

    by_name = {d["filename"]: d for d in task["documents"]}
    assert task["status"] == "COMPLETED_WITH_ERRORS", task
    assert by_name["misnamed.pptx"]["status"] == "FAILED"
    assert by_name["misnamed.pptx"]["error"].startswith(
        "the file is named as a PowerPoint presentation (PPTX) ('.pptx') but it is a PDF"
    )
    assert by_name["bomb.epub"]["status"] == "FAILED"
    assert (
        "the EPUB unpacks to more than the limit of 8 MiB (DOCSUM_MAX_DOCX_UNZIPPED_BYTES)"
        in (by_name["bomb.epub"]["error"])
    )

    rows = await db.fetch(
        "SELECT document_id, position_unit, position_starts FROM document_texts WHERE document_id = ANY($1::text[])",
        [d["document_id"] for d in task["documents"]],
    )
    positions = {r["document_id"]: Positions(r["position_unit"], tuple(r["position_starts"])) for r in rows}
    expected = {"deck.pptx": ("slide", 3), "harbour.html": ("section", 4), "voyage.epub": ("chapter", 3)}
    for name, (unit, count) in expected.items():
        document = by_name[name]
        assert document["status"] == "COMPLETED" and document["summary"], document
        assert positions[document["document_id"]].unit == unit
        assert len(positions[document["document_id"]].starts) == count
        sources = [s for sentence in document["sentences"] for s in sentence["sources"]]
        assert sources, document
        for source in sources:
            assert source["unit"] == unit
            assert source["page"] == position_of(positions[source["document_id"]], source["start"])
            assert place(source).startswith(f"{name}, {unit}")  # "deck.pptx, slide 2"
        print(f"\n{name}: cites {sorted({place(s) for s in sources})}")


async def test_slides_pages_and_books_published_on_kafka(make_stack: StackFactory, tmp_path: Path) -> None:
    root = tmp_path / "crm-docs"
    root.mkdir()
    book = make_epub([(f"Chapter {n}", [_prose(200 + n), _prose(210 + n)]) for n in range(1, 4)])
    (root / "voyage.epub").write_bytes(book)
    stack = make_stack(
        DOCSUM_LLM_BACKEND="extractive",
        DOCSUM_INTAKE_PRODUCERS=producers(crm=["alice"]),
        DOCSUM_INTAKE_OWNERS=json.dumps({"alice": {"file_roots": [str(root)]}}),
    )
    deck = make_pptx([Slide(title=f"Slide {n}", texts=[_prose(220 + n)], notes=_prose(230 + n)) for n in range(3)])
    page = make_html_page("The harbour dredging", [(f"Part {n}", [_prose(240 + n), _prose(250 + n)]) for n in range(3)])
    task = str(uuid.uuid4())
    common: dict[str, Any] = {"task_id": task, "owner": "alice", "task_documents": 3}
    messages = [
        {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "deck.pptx", "content_type": PPTX,
         "content_base64": base64.b64encode(deck).decode()},
        {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "harbour.html", "content_type": "text/html",
         "content_base64": base64.b64encode(page).decode()},
        {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "voyage.epub",
         "source_uri": (root / "voyage.epub").as_uri()},
    ]  # fmt: skip
    await asyncio.to_thread(publish, stack, messages)

    async with stack.client("alice") as client:
        view = await wait_for_task(client, task, stack, timeout=120, published=True)

    assert view["status"] == "COMPLETED", view
    units = {"deck.pptx": "slide", "harbour.html": "section", "voyage.epub": "chapter"}
    for document in view["documents"]:
        sources = [s for sentence in document["sentences"] for s in sentence["sources"]]
        assert sources and {s["unit"] for s in sources} == {units[document["filename"]]}, document
