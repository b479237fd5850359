"""A summary's sentences and the text they quote, through the gateway on the real database: the task view
maps stored sentences to their documents' names and units, and the text route quotes a range of a
document's extracted text, inside the text and under its cap (to its owner only: test_tenants.py).

The sentences are written here as the pipeline stores them (citations.to_json), onto a task the real
pipeline summarized: what is checked is how they are read and shown. The pipeline runs in-process
(what is tested is the gateway's answers, not processes or the broker), but for the quotes of a 19 MB
text, whose bound is the gateway process's own memory.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from docsum_gateway.routers.tasks import MAX_QUOTE_CHARS
from docsum_llm.base import Span, SummaryResult, SummarySentence
from docsum_llm.citations import chunk_sentences, merged_sentences
from docsum_parser.repository import DocumentRepository
from docsum_shared.cited import MAX_SOURCES, CitedSentence, Source, to_json
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions, position_of
from docsum_shared.readmodel import queries
from docsum_shared.scope import Scope
from tests.inprocess import InProcessStack
from tests.integration.conftest import AnyStack, StackFactory
from tests.integration.helpers import submit, txt, wait_for_task

pytestmark = pytest.mark.integration

# A text file: its units are lines. Astral and CJK characters first, so that offsets count characters.
LINES = [
    "🌧 雨 Rain fell over the valley for three days in May.",
    "The river rose above its banks near the old mill.",
    "Farmers moved their herds to the higher fields.",
    "By June the water had gone back to its bed.",
]
TEXT = "\n".join(LINES)


async def _summarized(stack: AnyStack, owner: str, name: str) -> dict[str, Any]:
    async with stack.client(owner) as client:
        return await wait_for_task(client, await submit(client, [txt(name, TEXT)]), stack)


async def _stored_text(db: asyncpg.Pool, document_id: str) -> asyncpg.Record:
    return await db.fetchrow(
        "SELECT text, position_unit, position_starts FROM document_texts WHERE document_id = $1", document_id
    )


def _range(text: str, words: str) -> tuple[int, int]:
    start = text.index(words)
    return start, start + len(words)


async def test_sentences_show_their_files_and_units_and_quote_their_text(
    pipeline: InProcessStack, db: asyncpg.Pool
) -> None:
    task = await _summarized(pipeline, "alice", "valley.txt")
    doc_id = task["documents"][0]["document_id"]
    stored = await _stored_text(db, doc_id)
    text = stored["text"]
    assert stored["position_unit"] == "line" and len(stored["position_starts"]) == len(LINES)

    rain = _range(text, "Rain fell over the valley for three days in May.")
    spanning = _range(text, "near the old mill.\nFarmers moved their herds")  # lines 2 to 3
    sentences = [
        CitedSentence("Rain fell over the valley.", (Source(doc_id, 1, *rain),), "cited", (0, 26)),
        CitedSentence("The river rose; farmers moved.", (Source(doc_id, 2, *spanning),), "synthesis", (27, 57)),
    ]
    await db.execute("UPDATE documents SET summary_sentences = $2::jsonb WHERE id = $1", doc_id, to_json(sentences))
    await db.execute(
        "UPDATE tasks SET summary_sentences = $2::jsonb WHERE id = $1", task["task_id"], to_json(sentences[:1])
    )

    async with pipeline.client("alice") as client:
        view = (await client.get(f"/v1/tasks/{task['task_id']}")).json()
        shown = view["documents"][0]["sentences"]
        assert [(s["text"], s["support"], s["at"]) for s in shown] == [
            ("Rain fell over the valley.", "cited", [0, 26]),
            ("The river rose; farmers moved.", "synthesis", [27, 57]),
        ]
        assert shown[1]["sources"] == [
            {"document_id": doc_id, "filename": "valley.txt", "unit": "line", "page": 2, "last_page": 3,
             "start": spanning[0], "end": spanning[1]},
        ]  # fmt: skip
        assert shown[0]["sources"][0]["last_page"] == 1
        assert view["sentences"][0]["sources"][0]["filename"] == "valley.txt"

        for (start, end), first, last in ((rain, 1, 1), (spanning, 2, 3)):
            quoted = await client.get(
                f"/v1/tasks/{task['task_id']}/documents/{doc_id}/text", params={"start": start, "end": end}
            )
            assert quoted.status_code == 200, quoted.text
            assert quoted.json() == {
                "document_id": doc_id, "filename": "valley.txt", "unit": "line", "page": first, "last_page": last,
                "start": start, "end": end, "text": text[start:end], "ocr": False,
            }  # fmt: skip
        # The whole text, to its last character.
        whole = await client.get(
            f"/v1/tasks/{task['task_id']}/documents/{doc_id}/text", params={"start": 0, "end": len(text)}
        )
        assert whole.json()["text"] == text and whole.json()["last_page"] == len(LINES)


async def test_a_range_outside_the_text_empty_or_over_the_cap_is_422_saying_why(pipeline: InProcessStack) -> None:
    task = await _summarized(pipeline, "alice", "ranges.txt")
    route = f"/v1/tasks/{task['task_id']}/documents/{task['documents'][0]['document_id']}/text"
    async with pipeline.client("alice") as client:
        for params, why in [
            ({"start": 5, "end": 5}, "empty or reversed"),
            ({"start": 9, "end": 4}, "empty or reversed"),
            ({"start": 0, "end": len(TEXT) + 1}, f"past the end of the text ({len(TEXT)} characters)"),
            ({"start": 0, "end": MAX_QUOTE_CHARS + 1}, f"over the limit of {MAX_QUOTE_CHARS:,}"),
        ]:
            answer = await client.get(route, params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert why in answer.json()["detail"][0]["msg"], answer.text
        refused: list[dict[str, Any]] = [
            {"start": -1, "end": 4},
            {"start": 0},
            {"start": 0, "end": 2**31},
            {"start": "x"},
        ]
        for invalid in refused:
            assert (await client.get(route, params=invalid)).status_code == 422, invalid


# --------------------------------------------------------------------------------------------------
# A flood of quotes of a large text: each request reads at most its cap from PostgreSQL

MiB = 1024 * 1024
FLOOD = 40
BIG_LINES = 240_000  # 19 MB of text, one line a unit


def _vm_hwm(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM in /proc/<pid>/status), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


async def test_forty_quotes_of_a_19_mb_text_read_no_more_than_their_cap(
    make_stack: StackFactory, db: asyncpg.Pool
) -> None:
    stack = make_stack(services=("gateway",))  # no parser: the text is stored below, as the parser stores it
    async with stack.client() as client:
        task_id = await submit(client, [txt("big.txt", "Stays pending: its text is written by the test.")])
        doc_id = (await client.get(f"/v1/tasks/{task_id}")).json()["documents"][0]["document_id"]
    lines = [
        f"Line {i:06d}: the tide came in at dawn and left by noon, as it did every day.\n" for i in range(BIG_LINES)
    ]
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line))
    text = "".join(lines)
    await DocumentRepository(db).store_text(doc_id, text, SizeLevel.LARGE, Positions("line", tuple(starts)))
    del lines
    route = f"/v1/tasks/{task_id}/documents/{doc_id}/text"
    tail = {"start": len(text) - MAX_QUOTE_CHARS, "end": len(text)}

    # What the repository hands the gateway: no text for a range over the cap, at most the cap otherwise.
    alice = Scope(stack.env["DOCSUM_TOPIC_PREFIX"], "alice")
    everything = await queries.quote(db, alice, task_id, doc_id, 0, 2**31 - 1, MAX_QUOTE_CHARS)
    assert everything is not None and everything["text"] is None and everything["text_chars"] == len(text)
    capped = await queries.quote(db, alice, task_id, doc_id, 5, 5 + MAX_QUOTE_CHARS, MAX_QUOTE_CHARS)
    assert capped is not None and capped["text"] == text[5 : 5 + MAX_QUOTE_CHARS]

    pid = stack.processes["gateway"].pid
    limits = httpx.Limits(max_connections=FLOOD, max_keepalive_connections=FLOOD)
    headers = {"Authorization": f"Bearer {stack.keys['alice']}"}
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=120, limits=limits) as client:
        warm = await client.get(route, params=tail)  # the code paths warm before the baseline
        assert warm.status_code == 200, warm.text
        before = _vm_hwm(pid)
        whole = {"start": 0, "end": 2**31 - 1}
        refused = await asyncio.gather(*(client.get(route, params=whole) for _ in range(FLOOD)))
        quoted = await asyncio.gather(*(client.get(route, params=tail) for _ in range(FLOOD)))
    after = _vm_hwm(pid)
    assert {r.status_code for r in refused} == {422}, refused[0].text
    assert f"over the limit of {MAX_QUOTE_CHARS:,}" in refused[0].json()["detail"][0]["msg"]
    assert {r.status_code for r in quoted} == {200}
    assert quoted[0].json()["text"] == text[-MAX_QUOTE_CHARS:] and quoted[0].json()["last_page"] == BIG_LINES
    growth = (after - before) / MiB
    print(f"\ngateway VmHWM: {before / MiB:.0f} MiB before, {after / MiB:.0f} MiB after {FLOOD} quotes of the"
          f" whole {len(text) / 1e6:.0f} MB text and {FLOOD} of its last {MAX_QUOTE_CHARS:,} characters"
          f" (+{growth:.0f} MiB)")  # fmt: skip
    # Reading the text before the range check, 40 requests grew the gateway by ~200 MB; 80 answers of at
    # most 20,000 characters are a few MB.
    assert growth < 32, f"the gateway's peak RSS grew by {growth:.0f} MiB"
    await db.execute("DELETE FROM tasks WHERE id = $1", task_id)


def _cited(document_id: str, ranges: list[tuple[int, int]], positions: Positions) -> tuple[CitedSentence, ...]:
    """A chunk summary of one sentence per range, each citing its range (as chunk_sentences maps it)."""
    said = [f"S{i}." for i in range(len(ranges))]
    quoting = tuple(SummarySentence.quoting(t, 0, a, b) for t, (a, b) in zip(said, ranges, strict=True))
    result = SummaryResult(" ".join(said), "m", sentences=quoting)
    return chunk_sentences(result, document_id, 0, positions)


async def test_a_sentence_citing_thousands_of_ranges_is_shown_with_a_bounded_few(
    pipeline: InProcessStack, db: asyncpg.Pool
) -> None:
    """A model told to cite every id: the top sentence rests on every sentence of every text it merged.
    The view shows at most MAX_SOURCES of its ranges, touching ones joined; so does a row stored before
    sources were bounded (3,000 ranges of 4 items, their last units looked up)."""
    lines = [f"Line {i:03d} of the long record says a thing of its own here." for i in range(400)]
    async with pipeline.client("alice") as client:
        task = await wait_for_task(client, await submit(client, [txt("record.txt", "\n".join(lines))]), pipeline)
    doc_id = task["documents"][0]["document_id"]
    stored = await _stored_text(db, doc_id)
    positions = Positions("line", tuple(stored["position_starts"]))
    assert len(stored["text"]) > 16_000

    touching = _cited(doc_id, [(5 * i, 5 * i + 5) for i in range(2000)], positions)  # [0, 10,000)
    apart = _cited(doc_id, [(10_005 + 10 * i, 10_005 + 10 * i + 1 + i % 5) for i in range(600)], positions)
    everything = SummarySentence("It all.", (Span(0, 0, 20_000), Span(1, 0, 20_000)), "cited")
    [top] = merged_sentences(SummaryResult("It all.", "m", sentences=(everything,)), [touching, apart])
    await db.execute("UPDATE tasks SET summary_sentences = $2::jsonb WHERE id = $1", task["task_id"], to_json([top]))
    legacy = [[doc_id, position_of(positions, a), a, b] for a, b in [(10 * i, 10 * i + 3) for i in range(3000)]]
    old_row = [{"text": "Old.", "support": "synthesis", "at": [0, 4], "sources": legacy}]
    await db.execute("UPDATE documents SET summary_sentences = $2::jsonb WHERE id = $1", doc_id, json.dumps(old_row))

    async with pipeline.client("alice") as client:
        view = (await client.get(f"/v1/tasks/{task['task_id']}")).json()
    [shown] = view["sentences"]
    assert len(shown["sources"]) <= MAX_SOURCES  # 2,600 before
    assert shown["sources"][0] == {
        "document_id": doc_id, "filename": "record.txt", "unit": "line", "page": 1,
        "last_page": position_of(positions, 9_999), "start": 0, "end": 10_000,
    }  # fmt: skip
    [old] = view["documents"][0]["sentences"]
    assert len(old["sources"]) == MAX_SOURCES  # 3,000 before
    for source in old["sources"]:
        assert source["last_page"] == position_of(positions, source["end"] - 1)
