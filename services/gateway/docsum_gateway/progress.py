"""Progress fan-out: the pipeline's events, as they happen, to the WebSocket clients watching a task.

Each gateway replica reads the progress topics with a consumer of its own (no group: every replica
sees every event, from the moment it starts) and hands each event to the queues of the clients
watching that event's task. Nothing here is state: a client that connects gets the task's stored
state first, then the events; a client that falls behind loses events, never the final state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

from aiokafka import AIOKafkaConsumer
from pydantic import ValidationError

from docsum_shared.events import Event, Topic, decode
from docsum_shared.kafka import client_options
from docsum_shared.settings import Settings

log = logging.getLogger(__name__)

PROGRESS_TOPICS = (Topic.DOCUMENT_PARSED, Topic.CHUNK_SUMMARIZED, Topic.DOCUMENT_MERGED, Topic.TASK_EVENTS)
QUEUE_SIZE = 1000


class ProgressHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._watchers: dict[str, set[asyncio.Queue[Event]]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None

    def watch(self, task_id: str) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self._watchers[task_id].add(queue)
        return queue

    def unwatch(self, task_id: str, queue: asyncio.Queue[Event]) -> None:
        self._watchers[task_id].discard(queue)
        if not self._watchers[task_id]:
            del self._watchers[task_id]

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        topics = {self.settings.topic(t): t for t in PROGRESS_TOPICS}
        while True:  # the broker may be away: keep trying, progress is a convenience
            consumer = AIOKafkaConsumer(*topics, **client_options(self.settings), auto_offset_reset="latest")
            try:
                await consumer.start()
                async for record in consumer:
                    try:
                        event = decode(topics[record.topic], record.value)
                    except ValidationError:
                        continue  # the owning service dead-letters it; nothing to show
                    for queue in list(self._watchers.get(event.task_id, ())):
                        with contextlib.suppress(asyncio.QueueFull):  # a slow client skips events
                            queue.put_nowait(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("progress consumer: %s; restarting", exc)
                await asyncio.sleep(1.0)
            finally:
                await consumer.stop()
