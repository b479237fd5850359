"""Progress streams, without a server: compact entries, the caps, positions, one read for idle
streams, a stalled reader dropped, tickets that name their key."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from docsum_gateway.progress.recorder.policy import LoggedChunk, compact, entries_for
from docsum_gateway.progress.streams import ProgressFeed, admit
from docsum_gateway.routers.progress import ProgressResponse, log_position
from docsum_gateway.security import KEY_PREFIX, Tickets, new_key, revocable_key_id, ticket_secret
from docsum_shared.events import ChunkSummarized
from tests.unit.test_progress_policy import _doc, _view

DOCS = 100


def test_an_entry_carries_the_documents_it_changed_and_the_snapshot_plus_entries_is_the_whole_picture() -> None:
    docs = [_doc(f"d{i:03d}", done=0, total=1) for i in range(DOCS)]
    first = entries_for(ChunkSummarized(task_id="t1", document_id="d000", chunk_id="c0", chunk_index=0), _view(*docs))
    told_bodies, told = compact([e.body for e in first], {})
    assert len(told_bodies[0]["documents"]) == DOCS  # the first entry tells every document once
    assert all(body["documents"] == [] for body in told_bodies[1:])  # nothing changed since
    client = {d["document_id"]: d for d in told_bodies[0]["documents"]}  # what a client holds

    sizes = []
    for i in range(DOCS):  # one chunk of each document ends, in turn
        docs[i] = _doc(f"d{i:03d}", done=1, total=1)
        event = ChunkSummarized(task_id="t1", document_id=f"d{i:03d}", chunk_id=f"c{i}", chunk_index=0)
        entry = entries_for(event, _view(*docs), [LoggedChunk(f"c{i}", f"d{i:03d}", 0, "COMPLETED")])[-1]
        (body,), told = compact([entry.body], told)
        assert [d["document_id"] for d in body["documents"]] == [f"d{i:03d}"]
        sizes.append(len(json.dumps(body)))
        client.update({d["document_id"]: d for d in body["documents"]})
    assert max(sizes) < 1024, max(sizes)  # whatever the task's size
    final = entries_for(ChunkSummarized(task_id="t1", document_id="d000", chunk_id="c0", chunk_index=0), _view(*docs))
    assert client == {d["document_id"]: d for d in final[0].body["documents"]}


@pytest.mark.parametrize("text", ["²", "١٢", "1" * 19, "-1", "1.0", "0x1", "1 2", "+1", "1_0"])
def test_a_position_is_up_to_18_ascii_digits(text: str) -> None:
    with pytest.raises(ValueError, match="18 digits"):
        log_position(text)


def test_positions_that_are_numbers_and_none() -> None:
    assert log_position(None) is None and log_position("") is None and log_position("  ") is None
    assert log_position("0") == 0 and log_position(" 42 ") == 42 and log_position("9" * 18) == 10**18 - 1


def test_the_caps_per_owner_and_in_all() -> None:
    assert admit(Counter(), "alice", per_owner=2, most=3) is None
    assert "2 progress streams open already" in (admit(Counter(alice=2), "alice", per_owner=2, most=3) or "")
    assert admit(Counter(alice=2), "bob", per_owner=2, most=3) is None
    assert "as many progress streams as it can" in (admit(Counter(alice=2, bob=1), "bob", per_owner=2, most=3) or "")


class _CountingPool:
    """Counts the log reads and head reads the feed makes; the log holds `head` entries."""

    def __init__(self, head: int) -> None:
        self.head, self.log_reads, self.head_reads = head, 0, 0

    async def fetch(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        if "FROM progress_heads" in sql:
            self.head_reads += 1
            return [{"task_id": task_id, "seq": self.head} for task_id in args[0]]
        assert "FROM progress_log" in sql
        self.log_reads += 1
        after = args[1]
        return [
            {"seq": n, "kind": "chunk-summarized", "text": f'{{"seq": {n}}}'} for n in range(after + 1, self.head + 1)
        ]


async def test_idle_streams_share_one_read_of_the_heads_and_read_the_log_only_when_it_grew() -> None:
    pool = _CountingPool(head=3)
    feed = ProgressFeed("unused", pool, poll_s=3600, heartbeat_s=3600)  # type: ignore[arg-type]
    streams = [feed.open("alice", "t1", None, per_owner=50, most=50) for _ in range(10)]
    got: list[list[int]] = [[] for _ in streams]

    async def follow(i: int) -> None:
        async for batch in feed.follow(streams[i], 0, 64 * 1024):
            got[i].extend(entry.seq for entry in batch)

    readers = [asyncio.create_task(follow(i)) for i in range(len(streams))]
    try:
        await _settle()
        assert got == [[1, 2, 3]] * 10 and pool.log_reads == 20  # the backlog, then "nothing after it"
        for _ in range(5):  # five polls of an idle task: one query each, for every stream
            await feed.check()
            await _settle()
        assert pool.head_reads == 5 and pool.log_reads == 20
        pool.head = 4  # an entry appended (its NOTIFY lost): the next poll wakes the streams
        await feed.check()
        await _settle()
        assert got == [[1, 2, 3, 4]] * 10 and pool.log_reads == 40
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_client_that_takes_nothing_is_dropped_and_its_place_given_back() -> None:
    released: list[bool] = []

    async def body() -> Any:
        while True:
            yield b": heartbeat\n\n"

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the socket never drains

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client neither reads nor leaves
        return {}

    response = ProgressResponse(body(), stall_s=0.05, release=lambda: released.append(True))
    scope = {"type": "http", "asgi": {"spec_version": "2.3"}}
    await asyncio.wait_for(response(scope, receive, send), 10)  # type: ignore[arg-type]
    assert released == [True]


def test_a_ticket_names_the_stored_key_it_was_issued_with() -> None:
    static = "s" * 20
    tickets = Tickets(ticket_secret(None, {static: "alice"}), ttl_s=30)
    stored = new_key()
    assert stored.key.startswith(KEY_PREFIX) and revocable_key_id({static: "alice"}, stored.key) == stored.key_id
    assert revocable_key_id({static: "alice"}, static) is None  # DOCSUM_API_KEYS: not revocable at run time
    claim = tickets.claim(tickets.issue("carol", "t1", now=1000.0, key_id=stored.key_id), "t1", now=1001.0)
    assert claim is not None and claim.owner == "carol" and claim.key_id == stored.key_id
    plain = tickets.claim(tickets.issue("alice", "t1", now=1000.0), "t1", now=1001.0)
    assert plain is not None and plain.key_id is None and plain.expires == 1030
