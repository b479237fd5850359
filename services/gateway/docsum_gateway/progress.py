"""Following a task's progress log: the entries after a point, then each new one as it is stored.

The log is in PostgreSQL (the recorder appends it, docsum_gateway.recorder), so any gateway replica
serves any task's stream, from any point: a client that reconnects with the last number it saw gets
exactly what came after. Each append NOTIFYs `docsum_progress` with the task id; every gateway keeps
one connection LISTENing, and wakes the streams of that task. A stream also reads the log every
`progress_poll_s` whatever it heard, so a notification lost with a dropped connection costs latency,
never an entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from .recorder import repository
from .recorder.repository import CHANNEL, Logged

log = logging.getLogger(__name__)


class ProgressFeed:
    def __init__(self, database_url: str, pool: asyncpg.Pool, *, poll_s: float, heartbeat_s: float) -> None:
        self.database_url, self.pool = database_url, pool
        self.poll_s, self.heartbeat_s = poll_s, heartbeat_s
        self._waiting: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def follow(self, task_id: str, after: int) -> AsyncIterator[list[Logged]]:
        """The entries after `after`, in order, in batches; an empty batch when nothing came for
        `heartbeat_s` (the caller sends its heartbeat). Ends only when the caller stops reading."""
        woken = asyncio.Event()
        self._waiting[task_id].add(woken)
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            while True:
                woken.clear()  # before reading: an append from now on wakes the wait below
                batch = await repository.entries_after(self.pool, task_id, after)
                if batch:
                    after = batch[-1].seq
                    quiet_since = loop.time()
                    yield batch
                    continue
                if loop.time() - quiet_since >= self.heartbeat_s:
                    quiet_since = loop.time()
                    yield []
                    continue
                wait = min(self.poll_s, self.heartbeat_s - (loop.time() - quiet_since))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), max(0.01, wait))
        finally:
            self._waiting[task_id].discard(woken)
            if not self._waiting[task_id]:
                del self._waiting[task_id]

    def _notified(self, _conn: Any, _pid: int, _channel: str, task_id: str) -> None:
        for woken in self._waiting.get(task_id, ()):
            woken.set()

    async def _listen(self) -> None:
        while True:  # the database may restart: listen again; the streams poll meanwhile
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.database_url)
                await conn.add_listener(CHANNEL, self._notified)
                while not conn.is_closed():
                    await asyncio.sleep(5.0)
                    await conn.execute("SELECT 1")  # notices a dead connection
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("progress listener: %s; listening again", exc)
                await asyncio.sleep(1.0)
            finally:
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)
