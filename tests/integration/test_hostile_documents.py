"""Hostile documents through the real stack: each fails alone with a message naming its cap and setting, the
rest of the task completes, the parser's log stays short and its memory goes back to where it was.

The files are small on disk and built here (tests/hostile.py); the caps are lowered through the stack's
environment to what the files need. The hostile task runs the services as processes (what is measured
is the parser process's memory, its log and that it lives on); the two texts PostgreSQL cannot hold run
the pipeline in-process (what is tested is what the parser stores and reports, not processes or the
broker).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import asyncpg
import pytest

from docsum_parser.logfilter import KEEP
from docsum_parser.policy import TextRefused
from docsum_parser.repository import DocumentRepository
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions
from tests.documents import english_prose, make_docx, make_pdf
from tests.hostile import (
    docx_bomb,
    one_line_text,
    pdf_sharing_one_content_stream,
    pdf_with_lone_surrogate,
    pdf_with_wrong_offsets,
)
from tests.inprocess import InProcessStack
from tests.integration.conftest import SERVICES, Stack, StackFactory
from tests.integration.helpers import wait_for_task

pytestmark = pytest.mark.integration

MiB = 2**20
CAPS = {
    "DOCSUM_MAX_PDF_PAGES": "50",
    "DOCSUM_MAX_DOCUMENT_CHARS": "1000000",
    "DOCSUM_MAX_DOCX_UNZIPPED_BYTES": str(16 * MiB),
    "DOCSUM_MAX_CHUNKS_PER_DOCUMENT": "20",
}
# How far above its idle footprint the parser (with its worker) may stay once the hostile files are done.
MARGIN = 150 * MiB


def resident(pid: int) -> int:
    """VmRSS of a process, in bytes (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(match.group(1)) * 1024 if match else 0


def children(pid: int) -> list[int]:
    """Child processes, whichever of the process's threads started them."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def footprint(pid: int) -> tuple[int, int]:
    """The parser's own resident memory, and its child processes' (the worker)."""
    return resident(pid), sum(resident(c) for c in children(pid))


async def sample_peaks(pid: int, peaks: dict[str, int]) -> None:
    while True:
        own, workers = footprint(pid)
        peaks["parser"] = max(peaks.get("parser", 0), own)
        peaks["worker"] = max(peaks.get("worker", 0), workers)
        await asyncio.sleep(0.05)


async def settled_footprint(pid: int, tries: int = 20) -> tuple[int, int]:
    """The footprint once it holds still (a worker replaced after a file it gave up on is starting)."""
    last = footprint(pid)
    for _ in range(tries):
        await asyncio.sleep(0.5)
        now = footprint(pid)
        if abs(sum(now) - sum(last)) < 2 * MiB:
            return now
        last = now
    return last


def mb(n: int) -> str:
    return f"{n / MiB:.0f} MB"


async def test_hostile_documents_fail_alone_and_the_parser_lets_go(make_stack: StackFactory) -> None:
    stack: Stack = make_stack(SERVICES, **CAPS)
    parser = stack.processes["parser"].pid
    hostile = {
        "bomb.docx": docx_bomb(128 * MiB),  # its zip headers say 4 KiB
        "pages.pdf": pdf_sharing_one_content_stream(500),
        "line.txt": one_line_text(4 * MiB),
        "many-chunks.txt": english_prose(60_000, seed=31).encode(),
    }
    good = {
        "notes.txt": english_prose(3_000, seed=32).encode(),
        "report.pdf": make_pdf([english_prose(1_500, seed=s) for s in (33, 34)]),
        "letter.docx": make_docx([("heading", 1, "A letter"), ("paragraph", english_prose(2_000, seed=35))]),
        "repaired.pdf": pdf_with_wrong_offsets(40),  # pypdf repairs it, with two warnings per object
    }
    assert max(len(data) for data in hostile.values()) < 5 * MiB
    assert len(hostile["bomb.docx"]) < 500_000 and len(hostile["pages.pdf"]) < 100_000

    async with stack.client() as client:
        warm_up = await client.post("/v1/tasks", files=[("files", ("warm-up.txt", good["notes.txt"], "text/plain"))])
        assert (await wait_for_task(client, warm_up.json()["task_id"], stack))["status"] == "COMPLETED"
        idle = await settled_footprint(parser)

        peaks: dict[str, int] = {}
        sampler = asyncio.create_task(sample_peaks(parser, peaks))
        files = [("files", (name, data, "application/octet-stream")) for name, data in {**hostile, **good}.items()]
        created = (await client.post("/v1/tasks", files=files)).json()
        task = await wait_for_task(client, created["task_id"], stack)
        sampler.cancel()
        after = await settled_footprint(parser)

    print(
        f"\nparser idle {mb(idle[0])} (worker {mb(idle[1])}); peak {mb(peaks['parser'])} "
        f"(worker {mb(peaks['worker'])}); after {mb(after[0])} (worker {mb(after[1])})"
    )
    assert task["status"] == "COMPLETED_WITH_ERRORS", task
    by_name = {d["filename"]: d for d in task["documents"]}
    for name in good:
        assert by_name[name]["status"] == "COMPLETED" and by_name[name]["summary"], by_name[name]
    errors = {name: by_name[name]["error"] or "" for name in hostile}
    assert all(by_name[name]["status"] == "FAILED" for name in hostile), errors
    assert "the DOCX unpacks to more than the limit of 16 MiB (DOCSUM_MAX_DOCX_UNZIPPED_BYTES)" in errors["bomb.docx"]
    assert "the PDF has 500 pages, over the limit of 50 (DOCSUM_MAX_PDF_PAGES)" in errors["pages.pdf"]
    assert "longer than the limit of 1,000,000 characters (DOCSUM_MAX_DOCUMENT_CHARS)" in errors["line.txt"]
    assert "over the limit of 20 (DOCSUM_MAX_CHUNKS_PER_DOCUMENT)" in errors["many-chunks.txt"]
    assert by_name["many-chunks.txt"]["chunks"]["total"] in (None, 0)  # not a chunk row was stored

    # The parser, with its worker, is back near idle.
    assert stack.processes["parser"].poll() is None
    assert after[0] < idle[0] + MARGIN, (idle, after)
    assert sum(after) < sum(idle) + MARGIN, (idle, after)

    # Two warnings per object of repaired.pdf: a handful reach the log, then one line counts the rest.
    log = (stack.logs / "parser.log").read_text(errors="replace")
    repaired = by_name["repaired.pdf"]["document_id"]
    assert len(re.findall(r"WARNING pypdf\.", log)) <= KEEP
    assert re.search(rf"pypdf: [\d,]+ more warnings suppressed for document {repaired}", log), log[-3000:]


async def test_a_pdf_whose_text_holds_a_lone_surrogate_is_never_stuck(
    pipeline: InProcessStack, db: asyncpg.Pool
) -> None:
    """The PDF's ToUnicode map yields U+D800, which PostgreSQL cannot store: the document ends (with
    U+FFFD in its text) instead of being retried, dead-lettered and left PENDING."""
    async with pipeline.client() as client:
        started = time.monotonic()
        response = await client.post(
            "/v1/tasks", files=[("files", ("lone.pdf", pdf_with_lone_surrogate(), "application/pdf"))]
        )
        assert response.status_code == 201, response.text
        task = await wait_for_task(client, response.json()["task_id"], pipeline, timeout=60)
        print(f"\nthe lone-surrogate PDF's task ended {task['status']} in {time.monotonic() - started:.1f} s")
    [document] = task["documents"]
    assert document["status"] in ("COMPLETED", "FAILED"), document
    text = await db.fetchval("SELECT text FROM document_texts WHERE document_id = $1", document["document_id"])
    assert "\ufffd" in text and "the words go on" in text


async def test_a_text_the_database_refuses_is_reported_as_refused(pipeline: InProcessStack, db: asyncpg.Pool) -> None:
    """Should a character PostgreSQL cannot hold get past normalization, the parser's repository says
    the text was refused (the handler fails the document) rather than raising a connection-like error
    the consumer would retry. (`pipeline`: it has migrated the database.)"""
    task, document = f"refused-{uuid.uuid4()}", f"refused-{uuid.uuid4()}:1"
    # A cancelled task: no service re-drives it while the test holds its PENDING document.
    await db.execute("INSERT INTO tasks (id, owner, status) VALUES ($1, 'alice', 'CANCELLED')", task)
    try:
        await db.execute("INSERT INTO documents (id, task_id, filename) VALUES ($1, $2, 'odd.pdf')", document, task)
        with pytest.raises(TextRefused):
            await DocumentRepository(db).store_text(
                document, "a lone \ud800 surrogate", SizeLevel.SMALL, Positions("page", (0,))
            )
        assert await db.fetchval("SELECT status FROM documents WHERE id = $1", document) == "PENDING"
    finally:
        await db.execute("DELETE FROM tasks WHERE id = $1", task)
