"""Following a task's progress log: the entries after a point, then each new one as it is stored.

The log is in PostgreSQL (the recorder appends it, docsum_gateway.progress.recorder), so any gateway replica
serves any task's stream, from any point: a client that reconnects with the last number it saw gets
exactly what came after. Each append NOTIFYs `docsum_progress` with the task id; every gateway keeps
one connection LISTENing, and wakes the streams of that task.

An idle stream costs the database nothing of its own: one loop per gateway reads, every
`progress_poll_s`, the last entry's number of every task a stream follows (one query for all of
them; a notification lost with a dropped connection costs latency, never an entry), and whether the
stored keys the streams were opened with are still live. A stream reads the log only when there is
something after what it sent, at most DOCSUM_PROGRESS_BATCH_BYTES of it at a time.

How many streams are open is capped per owner and in all (`open`): each holds a connection, and up
to a batch of entries while its client takes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg

from docsum_shared import db
from docsum_shared.retry import keep_running

from .. import keystore
from .recorder import repository
from .recorder.repository import CHANNEL, Logged

log = logging.getLogger(__name__)


class StreamsFull(Exception):
    """No more streams for this owner, or for this gateway: the client should come back later."""


class KeyRevoked(Exception):
    """The key the stream was opened with (directly or through a ticket) has been revoked."""


@dataclass(eq=False)
class Stream:
    """One open stream: whose it is, the stored key it was opened with (None: a key of
    DOCSUM_API_KEYS, which cannot be revoked while the gateway runs), how far it has read."""

    owner: str
    task_id: str
    key_id: str | None
    after: int = 0
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    revoked: bool = False


def admit(open_by_owner: Counter[str], owner: str, per_owner: int, most: int) -> str | None:
    """Why one more stream for `owner` is refused, or None. Pure: a function of what is open."""
    if open_by_owner[owner] >= per_owner:
        return f"this key's owner has {per_owner} progress streams open already; close one or retry later"
    if sum(open_by_owner.values()) >= most:
        return "the gateway serves as many progress streams as it can; retry later"
    return None


class ProgressFeed:
    def __init__(
        self,
        database_url: str,
        pool: asyncpg.Pool,
        *,
        poll_s: float,
        heartbeat_s: float,
    ) -> None:
        self.database_url, self.pool = database_url, pool
        self.poll_s, self.heartbeat_s = poll_s, heartbeat_s
        self._streams: dict[str, set[Stream]] = defaultdict(set)  # by task
        self._open: Counter[str] = Counter()  # by owner
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._watch())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ----------------------------------------------------------------------------------------------
    # Streams: opened under the caps, closed by their transport

    def open(self, owner: str, task_id: str, key_id: str | None, *, per_owner: int, most: int) -> Stream:
        """A new stream, or StreamsFull (with the reason for the client) beyond a cap."""
        refused = admit(self._open, owner, per_owner, most)
        if refused is not None:
            raise StreamsFull(refused)
        stream = Stream(owner, task_id, key_id)
        self._streams[task_id].add(stream)
        self._open[owner] += 1
        return stream

    def close(self, stream: Stream) -> None:
        streams = self._streams.get(stream.task_id)
        if streams is None or stream not in streams:
            return  # closed already
        streams.discard(stream)
        if not streams:
            del self._streams[stream.task_id]
        self._open[stream.owner] -= 1
        if self._open[stream.owner] <= 0:
            del self._open[stream.owner]

    async def follow(self, stream: Stream, after: int, max_bytes: int) -> AsyncIterator[list[Logged]]:
        """The entries after `after`, in order, in batches of at most `max_bytes` of text (or one
        entry); an empty batch when nothing came for
        `heartbeat_s` (the caller sends its heartbeat). Ends when the caller stops reading; raises
        KeyRevoked once the stream's key is revoked."""
        loop = asyncio.get_running_loop()
        stream.after = after
        quiet_since = loop.time()
        read = True  # the first time, and whenever woken: something may be after `after`
        while True:
            if stream.revoked:
                raise KeyRevoked(stream.key_id)
            if read:
                stream.woken.clear()  # before reading: an append from now on wakes the wait below
                batch = await repository.entries_after(self.pool, stream.task_id, stream.after, max_bytes)
                if batch:
                    stream.after = batch[-1].seq
                    quiet_since = loop.time()
                    yield batch
                    continue  # a batch may not have held everything: read until nothing is left
            if loop.time() - quiet_since >= self.heartbeat_s:
                quiet_since = loop.time()
                yield []
                continue
            wait = self.heartbeat_s - (loop.time() - quiet_since)
            try:
                await asyncio.wait_for(stream.woken.wait(), max(0.01, wait))
                read = True
            except TimeoutError:
                read = False

    # ----------------------------------------------------------------------------------------------
    # What wakes the streams: NOTIFY, and one poll for all of them

    def _notified(self, task_id: str) -> None:
        for stream in self._streams.get(task_id, ()):
            stream.woken.set()

    async def _watch(self) -> None:
        # The database away: the next round tries again.
        await keep_running("progress streams: reading the heads and keys", self.check, every_s=self.poll_s)

    async def check(self) -> None:
        """Wake the streams behind their task's last entry, and mark those whose key was revoked:
        one query for the heads of every followed task, one for the keys of every stream."""
        if not self._streams:
            return
        heads = await repository.heads(self.pool, list(self._streams))
        streams = [s for followers in list(self._streams.values()) for s in followers]
        key_ids = sorted({s.key_id for s in streams if s.key_id is not None})
        live = await keystore.live_key_ids(self.pool, key_ids) if key_ids else set()
        for stream in streams:
            if stream.key_id is not None and stream.key_id not in live:
                stream.revoked = True
                stream.woken.set()
            elif heads.get(stream.task_id, 0) > stream.after:
                stream.woken.set()

    async def _listen(self) -> None:
        # The database may restart: listen again (the poll covers the gap).
        await db.listen(self.database_url, CHANNEL, self._notified, "progress listener")
