"""The gateway's read model: queries rows shaped into the response models, without a database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from docsum_cli.main import as_json, printed_json
from docsum_shared.cited import CitedSentence, Source, to_json
from docsum_shared.readmodel import queries, views
from docsum_shared.readmodel.schemas import Usage
from docsum_shared.scope import Scope
from docsum_shared.settings import LLMSettings

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SETTINGS = LLMSettings(llm_model="m1", llm_prices={"m1": (1.0, 2.0), "m2": (10.0, 20.0)})
POOL: Any = object()  # never touched: the queries functions are replaced below
ALICE = Scope("", "alice")


def _task(**fields: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": "t1",
        "title": "a title",
        "status": "PROCESSING",
        "created_at": T0,
        "updated_at": T0,
        "summary": None,
        "summary_model": None,
        "error": None,
        "options": '{"strict": true, "length": "brief"}',
        "redrives": 2,
    }
    row.update(fields)
    return row


def _document(doc_id: str, **fields: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": doc_id,
        "filename": f"{doc_id}.txt",
        "status": "SUMMARIZING",
        "size_level": "SMALL",
        "text_chars": 900,
        "chunk_total": 3,
        "summary": None,
        "summary_model": None,
        "error": None,
        "coverage": None,
        "failed_chunks": None,
        "chunks_done": 1,
        "chunks_failed": 1,
    }
    row.update(fields)
    return row


def _usage(document_id: str | None, model: str, prompt: int, completion: int, calls: int, cached: int) -> dict:
    return {
        "document_id": document_id,
        "model": model,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "llm_calls": calls,
        "cached_calls": cached,
    }


@pytest.fixture
def rows(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the queries answers; a test changes an entry before calling the view."""
    answers: dict[str, Any] = {
        "owns": True,
        "get_task": (_task(), [_document("d1"), _document("d2", status="PENDING", chunk_total=None)]),
        "usage_rows": [
            _usage("d1", "m1", 1000, 100, 2, 1),
            _usage("d1", "m2", 10, 5, 1, 0),
            _usage(None, "m1", 500, 50, 1, 0),  # the task-level merge
        ],
        "remaining_work": {"chunks": 4, "prompt_tokens": 2000, "calls_last_minute": 30},
        # 3 of them waiting for their turn, 10 of its owner's other chunks first, at 30 calls a minute
        "place": {"waiting": 3, "ahead": 10, "calls_last_minute": 30},
        "recovery": {"attempts": 5, "interruptions": 1},
        "batch_lines": [],  # no batch lines: `batch` is null (tests/unit/test_batch_progress_view.py)
        "sentences": [],  # no summary's sentences known: each `sentences` is null
        "reuse_rows": [],  # nothing made yet: each `reuse` is null
        "previous_documents": [],  # not a new version: each `previous_document_id` is null
        "failures": [
            {"document_id": "d1", "filename": "d1.txt", "chunk_index": 2, "error": "no", "attempts": 3},
            {"document_id": "d2", "filename": "d2.txt", "chunk_index": None, "error": "damaged", "attempts": None},
        ],
        "list_tasks": [
            {
                "id": "t2",
                "title": None,
                "status": "COMPLETED",
                "created_at": T0,
                "first_files": ["r.pdf", "s.txt"],
                "files": 3,
            },
            {
                "id": "t1",
                "title": "a title",
                "status": "PROCESSING",
                "created_at": T0,
                "first_files": ["a.txt"],
                "files": 1,
            },
        ],
    }

    def answer(name: str) -> Any:
        async def fake(*args: object) -> Any:
            return answers[name]

        return fake

    answers["load_task"] = answers["get_task"]
    for name in answers:
        monkeypatch.setattr(queries, name, answer(name))
    return answers


async def test_task_view_shapes_the_rows(rows: dict[str, Any]) -> None:
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None
    assert (view.task_id, view.title, view.status, view.created_at) == ("t1", "a title", "PROCESSING", T0)
    assert view.options.strict and view.options.length == "brief"
    # All calls count for the task; the merge (document None) for no document.
    assert view.usage.model_dump() == {
        "prompt_tokens": 1510,
        "completion_tokens": 155,
        "llm_calls": 4,
        "cached_calls": 1,
        "cost_usd": pytest.approx(0.0020),
    }
    d1, d2 = view.documents
    assert d1.usage.model_dump() == {
        "prompt_tokens": 1010,
        "completion_tokens": 105,
        "llm_calls": 3,
        "cached_calls": 1,
        "cost_usd": pytest.approx(0.0014),
    }
    assert d2.usage == Usage()
    assert (d1.chunks.done, d1.chunks.failed, d1.chunks.total) == (1, 1, 3)
    assert d2.chunks.total is None and d2.failed_chunks == [] and d2.status == "PENDING"
    # Recovery: the chunk counters, the task's re-drives, and the calls answered from the cache.
    assert view.recovery.model_dump() == {"attempts": 5, "interruptions": 1, "redrives": 2, "calls_saved": 1}
    # 4 chunks at 30 calls a minute; prompt tokens as stored, completions at the expected size.
    assert view.estimate.model_dump() == {
        "remaining_chunks": 4,
        "prompt_tokens": 2000,
        "cost_usd": pytest.approx((2000 * 1.0 + 4 * views.EXPECTED_COMPLETION_TOKENS * 2.0) / 1e6),
        "eta_s": 8.0,
    }
    # Where its waiting chunks stand: 13 chunks of its owner's at 30 calls a minute.
    assert view.place is not None
    assert view.place.model_dump() == {"waiting_chunks": 3, "ahead_chunks": 10, "calls_per_minute": 30, "eta_s": 26.0}


async def test_task_view_of_a_missing_or_foreign_task_is_none(rows: dict[str, Any]) -> None:
    rows["get_task"] = None
    assert await views.task_view(POOL, SETTINGS, Scope("", "bob"), "t1") is None


@pytest.mark.parametrize(
    ("chunks", "calls", "eta"),
    [(4, 0, None), (0, 0, 0.0), (0, 12, 0.0), (7, 1, 420.0), (1, 7, 8.6)],
)
def test_estimate_eta(chunks: int, calls: int, eta: float | None) -> None:
    estimate = views.estimate_from(SETTINGS, {"chunks": chunks, "prompt_tokens": 0, "calls_last_minute": calls})
    assert estimate.remaining_chunks == chunks and estimate.eta_s == eta


def test_document_view_keeps_coverage_and_failed_chunks() -> None:
    row = _document("d1", status="COMPLETED_WITH_ERRORS", coverage=0.5, failed_chunks=[1, 2], summary="s")
    view = views.document_view(row, Usage())
    assert (view.coverage, view.failed_chunks, view.summary) == (0.5, [1, 2], "s")


async def test_failures(rows: dict[str, Any]) -> None:
    listed = await views.failures(POOL, ALICE, "t1")
    assert listed is not None
    assert [(f.document_id, f.chunk_index, f.error, f.attempts) for f in listed] == [
        ("d1", 2, "no", 3),
        ("d2", None, "damaged", None),
    ]
    rows["owns"] = False
    assert await views.failures(POOL, Scope("", "bob"), "t1") is None


async def test_list_tasks(rows: dict[str, Any]) -> None:
    listed = await views.list_tasks(POOL, ALICE, 50)
    assert [(t.task_id, t.title, t.name, t.status) for t in listed] == [
        ("t2", None, "r.pdf and 2 more", "COMPLETED"),
        ("t1", "a title", "a title", "PROCESSING"),
    ]


def test_a_task_without_a_title_is_named_after_its_files() -> None:
    assert views.task_name(None, ["report.pdf", "b.docx"], 3) == "report.pdf and 2 more"
    assert views.task_name("", ["report.pdf", "b.docx"], 2) == "report.pdf and b.docx"
    assert views.task_name("  ", ["report.pdf"], 1) == "report.pdf"
    assert views.task_name(None, [], 0) == "Untitled task"  # its files are not stored yet
    assert views.task_name("Q3 reading", ["report.pdf"], 1) == "Q3 reading"


async def test_the_published_result_is_what_the_cli_prints_as_json(rows: dict[str, Any]) -> None:
    rows["get_task"] = rows["load_task"] = (_task(status="COMPLETED", summary="all of it"), [_document("d1")])
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    result = await views.task_result(POOL, SETTINGS, "t1")
    assert view is not None and result is not None
    printed = as_json(json.loads(view.model_dump_json()))  # the CLI reads the gateway's JSON
    assert printed == json.loads(result.model_dump_json())
    assert printed["summary"] == "all of it" and printed["documents"][0]["chunks"] == {
        "done": 1,
        "failed": 1,
        "total": 3,
    }


# The sentences of d1's summary and of the task's, as stored, and what the query adds to each source.
D1_SENTENCES = to_json(
    [
        CitedSentence("Rain fell.", (Source("d1", 3, 120, 130),), "cited", (0, 10)),
        CitedSentence("Both agree.", (Source("d1", 3, 200, 260), Source("d2", None, 5, 9)), "synthesis", (11, 22)),
        CitedSentence("Matched.", (Source("d1", 1, 0, 8),), "aligned", (23, 31)),
    ]
)
D1_PLACES = json.dumps([["d1.txt", "page", 3], ["d1.txt", "page", 4], ["d2.txt", None, None], ["d1.txt", "page", 1]])
TASK_SENTENCES = to_json(
    [CitedSentence("Rain fell.", (Source("d1", 3, 120, 130), Source("dx", 1, 0, 5)), "cited", (0, 10))]
)
TASK_PLACES = json.dumps([["d1.txt", "page", 3], [None, None, None]])  # dx is no document of the task


async def test_sentences_are_mapped_with_their_sources_places(rows: dict[str, Any]) -> None:
    rows["sentences"] = [
        {"holder": None, "sentences": TASK_SENTENCES, "places": TASK_PLACES},
        {"holder": "d1", "sentences": D1_SENTENCES, "places": D1_PLACES},
    ]
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None
    d1, d2 = view.documents
    assert d2.sentences is None  # no row: none known
    assert d1.sentences is not None
    assert [(s.text, s.support, s.at) for s in d1.sentences] == [
        ("Rain fell.", "cited", (0, 10)),
        ("Both agree.", "synthesis", (11, 22)),
        ("Matched.", "aligned", (23, 31)),
    ]
    assert [s.model_dump() for s in d1.sentences[1].sources] == [
        {
            "document_id": "d1",
            "filename": "d1.txt",
            "unit": "page",
            "page": 3,
            "last_page": 4,
            "start": 200,
            "end": 260,
        },
        {
            "document_id": "d2",
            "filename": "d2.txt",
            "unit": None,
            "page": None,
            "last_page": None,
            "start": 5,
            "end": 9,
        },
    ]
    assert d1.sentences[0].sources[0].last_page == 3
    # A source in no document of the task is left out; the sentence stays.
    assert view.sentences is not None and [s.document_id for s in view.sentences[0].sources] == ["d1"]
    printed = printed_json(json.loads(view.model_dump_json()))
    assert printed["sentences"][0]["sources"][0]["filename"] == "d1.txt"
    assert (
        printed["documents"][0]["sentences"][2]["support"] == "aligned" and printed["documents"][1]["sentences"] is None
    )


async def test_without_rows_every_sentences_is_null(rows: dict[str, Any]) -> None:
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.sentences is None and all(d.sentences is None for d in view.documents)
    assert json.loads(view.model_dump_json())["sentences"] is None


async def test_the_pipelines_views_read_no_sentences(rows: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress recorder reads a view at every append, the merger one per finished task: neither shows
    sentences, so neither makes their query."""

    async def refused(*args: object) -> Any:
        raise AssertionError("the sentences were read")

    monkeypatch.setattr(queries, "sentences", refused)
    assert await views.pipeline_view(POOL, SETTINGS, "t1") is not None
    assert await views.task_result(POOL, SETTINGS, "t1") is not None
    with pytest.raises(AssertionError, match="the sentences were read"):
        await views.task_view(POOL, SETTINGS, ALICE, "t1")


async def test_the_progress_logs_view_reads_no_chunk_nor_the_endpoint(
    rows: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder reads a view at every append: what none of its entries shows (the attempts and
    interruptions summed over every chunk of the task, the endpoint's budget) it does not read."""

    async def refused(*args: object) -> Any:
        raise AssertionError("read")

    monkeypatch.setattr(queries, "recovery", refused)
    monkeypatch.setattr(queries, "learned_budget", refused)
    view = await views.pipeline_view(POOL, SETTINGS, "t1")
    assert view is not None and view.llm is None
    assert view.recovery.model_dump() == {"attempts": 0, "interruptions": 0, "redrives": 2, "calls_saved": 1}
    with pytest.raises(AssertionError, match="read"):
        await views.task_result(POOL, SETTINGS, "t1")


async def test_a_strict_task_shows_and_publishes_its_summaries_without_their_unsupported_sentences(
    rows: dict[str, Any],
) -> None:
    summary = "Rain fell. Dragons ate the harvest. The river rose."
    stored = to_json(
        [
            CitedSentence("Rain fell.", (Source("d1", 3, 120, 130),), "cited", (0, 10)),
            CitedSentence("Dragons ate the harvest.", (), "unsupported", (11, 35)),
            CitedSentence("The river rose.", (Source("d1", 4, 200, 215),), "aligned", (36, 51)),
        ]
    )
    places = json.dumps([["d1.txt", "page", 3], ["d1.txt", "page", 4]])
    rows["sentences"] = [
        {"holder": None, "sentences": stored, "places": places},
        {"holder": "d1", "sentences": stored, "places": places},
    ]
    for support, shown in (("all", summary), ("strict", "Rain fell. The river rose.")):
        task = _task(status="COMPLETED", summary=summary, options=json.dumps({"support": support}))
        rows["get_task"] = rows["load_task"] = (task, [_document("d1", summary=summary)])
        view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
        result = await views.task_result(POOL, SETTINGS, "t1")
        assert view is not None and result is not None
        for text, sentences in (
            (view.summary, view.sentences),
            (view.documents[0].summary, view.documents[0].sentences),
        ):
            assert text == shown and sentences is not None
            assert [s.support for s in sentences] == ["cited", "unsupported", "aligned"]  # all kept, labelled
            assert [shown[a:b] for a, b in (s.at for s in sentences)] == [
                "Rain fell.",
                "" if support == "strict" else "Dragons ate the harvest.",
                "The river rose.",
            ]
        assert result.summary == shown and result.documents[0].summary == shown  # what task-finished carries


def _made(document_id: str | None, kind: str, made: int, reused: int) -> dict[str, object]:
    return {"document_id": document_id, "kind": kind, "made": made, "reused": reused}


async def test_a_new_version_says_what_it_reused_and_what_each_document_is_a_version_of(
    rows: dict[str, Any],
) -> None:
    rows["get_task"] = (_task(previous_task="t0"), [_document("d1"), _document("d2")])
    rows["reuse_rows"] = [
        _made("d1", "chunk", 100, 98), _made("d1", "document", 5, 2),
        _made("d2", "chunk", 1, 1),
        _made(None, "task", 1, 0),  # the task's own merge: in the task's figures only
    ]  # fmt: skip
    rows["previous_documents"] = [{"id": "d1", "previous": "p1", "previous_sentences": None}]
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.previous_task == "t0"
    d1, d2 = view.documents
    assert (d1.previous_document_id, d2.previous_document_id) == ("p1", None)
    assert d1.reuse is not None and d1.reuse.model_dump() == {
        "chunk_summaries": 100, "chunk_summaries_reused": 98, "merges": 5, "merges_reused": 2,
        "said": "98 of 100 chunk summaries reused, 3 merges redone, 2 reused",
    }  # fmt: skip
    assert d2.reuse is not None and d2.reuse.said == "1 of 1 chunk summary reused"  # one chunk: no merge
    assert view.reuse is not None and view.reuse.said == "99 of 101 chunk summaries reused, 4 merges redone, 2 reused"


@pytest.mark.parametrize(
    ("counts", "said"),
    [
        ((12, 11, 3, 0), "11 of 12 chunk summaries reused, 3 merges redone"),
        ((12, 12, 1, 1), "12 of 12 chunk summaries reused, 0 merges redone, 1 reused"),
        ((2, 0, 1, 0), "0 of 2 chunk summaries reused, 1 merge redone"),
        ((0, 0, 1, 0), "1 merge redone"),
    ],
)
def test_reuse_in_words(counts: tuple[int, int, int, int], said: str) -> None:
    assert views.reuse(*counts).said == said


def test_a_task_nothing_was_made_for_yet_has_no_reuse() -> None:
    assert views.reuse_by_document([]) == (None, {})


async def test_a_new_versions_sentences_are_marked_against_the_previous_summary(rows: dict[str, Any]) -> None:
    def said(*texts: str) -> str:
        return to_json([CitedSentence(t, (), "synthesis", (0, len(t))) for t in texts])

    rows["get_task"] = (_task(previous_task="t0"), [_document("d1", summary="x")])
    rows["sentences"] = [
        {"holder": "d1", "places": "[]", "sentences": said("Sales rose 5% in May.", "Costs fell.", "A plant opened.")}
    ]
    rows["previous_documents"] = [
        {"id": "d1", "previous": "p1", "previous_sentences": said("Sales rose 4% in May.", "Costs fell.", "Old news.")}
    ]
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None
    (doc,) = view.documents
    assert doc.sentences is not None
    assert [(s.change, s.was) for s in doc.sentences] == [
        ("changed", "Sales rose 4% in May."), ("unchanged", None), ("new", None),
    ]  # fmt: skip
    assert doc.removed_sentences == ["Old news."]
    # Either summary without known sentences: nothing is marked.
    rows["previous_documents"] = [{"id": "d1", "previous": "p1", "previous_sentences": None}]
    view = await views.task_view(POOL, SETTINGS, ALICE, "t1")
    assert view is not None and view.documents[0].sentences is not None
    assert {s.change for s in view.documents[0].sentences} == {None} and view.documents[0].removed_sentences is None


def test_a_waiting_tasks_place_counts_its_owners_work_and_times_it_by_its_owners_pace() -> None:
    assert views.place_from(None) is None  # the task takes no work
    assert views.place_from({"waiting": 0, "ahead": 50, "calls_last_minute": 10}) is None  # none of its waits
    place = views.place_from({"waiting": 40, "ahead": 1_240, "calls_last_minute": 320})
    assert place is not None
    assert (place.waiting_chunks, place.ahead_chunks, place.calls_per_minute) == (40, 1_240, 320)
    assert place.eta_s == 240.0  # 1,280 chunks at 320 a minute
    idle = views.place_from({"waiting": 3, "ahead": 0, "calls_last_minute": 0})
    assert idle is not None and idle.eta_s is None  # no pace to time it by
