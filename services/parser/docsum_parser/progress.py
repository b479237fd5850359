"""What the parser tells the progress stream while it reads a document page by page (a scan by OCR):
"reading page 41 of 300 (OCR)", as a task-events message the gateway's recorder turns into an entry.

A handler only notes the page; a loop beside the consumer publishes. Only the latest note of each
document waits, so what is held stays one note per document being read however fast pages go, and a
slow broker never slows the reading. A note that cannot be published is dropped: the task's view shows
what is being read from PostgreSQL (documents.reading) all the same, and the next page brings another.
"""

from __future__ import annotations

import asyncio
import logging

from docsum_shared.events import TaskEvent
from docsum_shared.handlers import Publish, Sender
from docsum_shared.states import TaskStatus

log = logging.getLogger("docsum_parser.progress")

READING = Sender("the parser's reading progress", emits=(TaskEvent,))


class ReadingProgress:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[str, str]] = {}  # document -> (its task, what is being read)
        self._noted = asyncio.Event()

    def note(self, task_id: str, document_id: str, note: str) -> None:
        self._latest[document_id] = (task_id, note)
        self._noted.set()

    @property
    def waiting(self) -> int:
        """Notes not yet published (one per document at most)."""
        return len(self._latest)

    async def run(self, publish: Publish) -> None:
        """Publish each document's latest note as it comes, until cancelled."""
        while True:
            await self._noted.wait()
            self._noted.clear()
            latest, self._latest = self._latest, {}
            events = [
                TaskEvent(
                    task_id=task_id,
                    status=TaskStatus.PROCESSING,
                    detail={"reading": {"document_id": document_id, "note": note}},
                )
                for document_id, (task_id, note) in latest.items()
            ]
            try:
                await publish(events, sender=READING)
            except Exception as exc:  # progress only: the view has it, and the next page brings another
                log.warning("reading progress not published (%d notes dropped): %s", len(events), exc)
