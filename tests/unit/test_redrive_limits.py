"""What a re-drive leaves alone (work that is moving), how it slices what it publishes, and how the CLI
waits out a re-drive the gateway refuses for now."""

from __future__ import annotations

import httpx
import pytest

from docsum_cli import client as cli_client
from docsum_cli.client import Gateway, GatewayError
from docsum_shared.events import ChunkCreated, DocumentMerged, DocumentParsed
from docsum_shared.redrive import ChunkToRedrive, DocumentRow, batches, plan
from docsum_shared.states import ChunkStatus, DocumentStatus

TASK, OWNER = "task-1", "alice"


def _doc(doc_id: str, status: DocumentStatus, *, active: bool = False) -> DocumentRow:
    return DocumentRow(
        id=doc_id, status=status, filename="a.txt", content_type="text/plain", blob_sha256="sha",
        size_bytes=10, text_chars=10, size_level=None, active=active,
    )  # fmt: skip


def test_a_chunk_under_a_live_lease_is_not_announced_again() -> None:
    chunks = [
        ChunkToRedrive("c0", 0, ChunkStatus.SUMMARIZING, leased=True),  # a summarizer is answering it
        ChunkToRedrive("c1", 1, ChunkStatus.SUMMARIZING),  # its lease ran out: its holder died
        ChunkToRedrive("c2", 2, ChunkStatus.PENDING),
    ]
    events = plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {"d1": chunks})
    assert [e.chunk_id for e in events if isinstance(e, ChunkCreated)] == ["c1", "c2"]


def test_a_chunk_whose_announcement_is_on_its_way_is_not_announced_again() -> None:
    chunks = [
        ChunkToRedrive("c0", 0, ChunkStatus.PENDING, announced=True),  # queued, no summarizer took it up yet
        ChunkToRedrive("c1", 1, ChunkStatus.PENDING),
    ]
    events = plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {"d1": chunks})
    assert [e.chunk_id for e in events if isinstance(e, ChunkCreated)] == ["c1"]


def test_a_document_whose_only_unfinished_chunk_is_leased_gets_nothing() -> None:
    """Not even its merge: the leased chunk is unfinished, and it is being summarized."""
    chunks = [
        ChunkToRedrive("c0", 0, ChunkStatus.COMPLETED),
        ChunkToRedrive("c1", 1, ChunkStatus.SUMMARIZING, leased=True),
    ]
    assert plan(TASK, OWNER, [_doc("d1", DocumentStatus.SUMMARIZING)], {"d1": chunks}) == []


def test_an_active_document_is_left_alone_and_an_idle_one_is_not() -> None:
    docs = [
        _doc("busy", DocumentStatus.CHUNKING, active=True),
        _doc("busy-chunks", DocumentStatus.SUMMARIZING, active=True),
        _doc("idle", DocumentStatus.CHUNKING),
    ]
    chunks = {"busy-chunks": [ChunkToRedrive("c0", 0, ChunkStatus.PENDING)]}
    [parsed] = plan(TASK, OWNER, docs, chunks)
    assert isinstance(parsed, DocumentParsed) and parsed.document_id == "idle"


def test_an_active_document_does_not_hold_the_task_merge_back_when_all_are_final() -> None:
    """`active` only spares unfinished work: a task whose documents are all final still gets its merge."""
    [merged] = plan(TASK, OWNER, [_doc("d1", DocumentStatus.COMPLETED, active=True)], {})
    assert isinstance(merged, DocumentMerged) and merged.document_id == "d1"


@pytest.mark.parametrize(("n", "size", "sizes"), [(0, 3, []), (3, 3, [3]), (7, 3, [3, 3, 1]), (2, 500, [2])])
def test_batches_keep_order_and_bound_each_slice(n: int, size: int, sizes: list[int]) -> None:
    events = [ChunkCreated(task_id=TASK, document_id="d", chunk_id=f"c{i}", chunk_index=i) for i in range(n)]
    sliced = batches(events, size)
    assert [len(b) for b in sliced] == sizes
    assert [e for b in sliced for e in b] == events


def _gateway(answers: list[httpx.Response], sent: list[httpx.Request]) -> Gateway:
    def respond(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers.pop(0)

    gateway = Gateway("http://gateway.test", key="k" * 32)
    gateway._http = httpx.Client(base_url="http://gateway.test", transport=httpx.MockTransport(respond))
    return gateway


def test_the_cli_waits_out_a_refused_redrive(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(cli_client.time, "sleep", slept.append)
    busy = httpx.Response(429, headers={"Retry-After": "1"}, json={"detail": "another re-drive is running"})
    done = httpx.Response(200, json={"tasks": ["t"], "redriven_events": 3})
    sent: list[httpx.Request] = []
    assert _gateway([busy, busy, done], sent).reconcile() == {"tasks": ["t"], "redriven_events": 3}
    assert slept == [1.0, 1.0] and len(sent) == 3


def test_the_cli_shows_a_refusal_longer_than_its_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(cli_client.time, "sleep", slept.append)
    over = httpx.Response(429, headers={"Retry-After": "40"}, json={"detail": "over 6 re-drives a minute"})
    sent: list[httpx.Request] = []
    with pytest.raises(GatewayError, match="429: over 6 re-drives a minute"):
        _gateway([over], sent).control("t", "resume")
    assert slept == [] and [r.url.path for r in sent] == ["/v1/tasks/t/resume"]
