"""The batch driver: gathers queued lines into batches, submits them exactly once, polls them, cancels
them when their task stops or its deadline comes near, and ingests what they answered.

Every step reads the batch's recorded state and moves it one state on, so a process killed at any
moment leaves a state the next driver resumes from:
- recorded: nothing was sent (or an upload whose file id was never stored: uploading again costs nothing);
- uploaded: the create is not sent yet;
- creating: the create may have been performed: the batch is looked for by its metadata (our id) and
  adopted when found, created only when not;
- submitted: polled; ingested when ended. Ingest stores each answer under its line's custom_id (the
  result cache's key) in one statement with its ledger line, guarded by the line's status: reading the
  same output again pays and books nothing twice.
One process drives at a time (a lock in PostgreSQL, let go when its connection closes).

A batch is never held whole (a summarizer has 768 MiB): its input file is written to a temporary file
from its requests read a page at a time, and uploaded from there; its output is read line by line as
it arrives and stored a page at a time.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from asyncpg import Connection

from docsum_llm.batch_api import BatchAPI, LineResult, ProviderBatch, input_line
from docsum_llm.openai.client import OpenAIBackend
from docsum_shared import metrics
from docsum_shared.errors import RequestRefused
from docsum_shared.events import ChunkCreated, TaskEvent
from docsum_shared.handlers import Publish, Sender
from docsum_shared.retry import keep_running
from docsum_shared.states import TaskStatus

from ..settings import SummarizerSettings
from .policy import (
    BATCH_KEY,
    TASK_KEY,
    BatchState,
    Ending,
    LineStatus,
    ending,
    must_finish_now,
    passes,
    readable,
    reason,
    request_from,
    will_miss,
)
from .repository import BatchRepository, OpenBatch, QueuedTask

log = logging.getLogger(__name__)
BATCH_DRIVER = Sender("the summarizer's batch driver", emits=(ChunkCreated, TaskEvent))
ANNOUNCE_AT_ONCE = 500
# Requests read at once to write an input file, and output lines stored at once (one transaction).
REQUESTS_AT_ONCE = 500
LINES_AT_ONCE = 500


class BatchDriver:
    def __init__(
        self,
        repo: BatchRepository,
        backend: OpenAIBackend,
        publish: Publish,
        settings: SummarizerSettings,
        *,
        earlier_endpoint: str | None = None,
    ) -> None:
        self.repo = repo
        self.earlier_endpoint = earlier_endpoint  # batches recorded under it are taken over, once
        self.backend = backend
        self.api = BatchAPI.connect(backend.base_url, backend.api_key)
        self.publish = publish
        self.settings = settings
        self.margin = timedelta(seconds=settings.llm_batch_deadline_margin_s)
        self._moved: dict[str, str] = {}  # tasks whose batches moved this round: what happened

    async def run(self) -> None:
        try:
            await keep_running("batch driver", self.drive_once, every_s=self.settings.llm_batch_poll_s)
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        await self.api.aclose()

    async def drive_once(self) -> None:
        async with self.repo.leading() as leading:
            if not leading:
                return
            if self.earlier_endpoint is not None and self.earlier_endpoint != self.repo.endpoint:
                if taken := await self.repo.take_over(self.earlier_endpoint):
                    log.info("%d batches recorded before their endpoint named the account: taken over", taken)
                self.earlier_endpoint = None
            for task in await self.repo.queued_tasks(self.settings.llm_batch_gather_s):
                await self._isolated(f"task {task.task_id}", self._gather(task), self._gathering_failed(task))
            for batch in await self.repo.open_batches():
                await self._isolated(f"batch {batch.id}", self._advance(batch), self._failed(batch))
            await self._announce()
            await self._tell()
            await self.repo.keep_waiting_tasks_active()

    async def _isolated(self, what: str, step: Awaitable[None], failed: Callable[[str], Awaitable[None]]) -> None:
        """The one rule of a round: each task's gathering and each batch's step stands alone. What passes
        (the provider or the database away, a rate limit) leaves it for the next poll; anything else ends
        that one, with its reason, and the round goes on for the others: one bad item never stops the
        batches of every owner."""
        try:
            await step
        except Exception as exc:  # noqa: BLE001 - sorted by `passes`; either way the round goes on
            if passes(exc):
                log.warning("%s: %s; trying again in %.0fs", what, exc, self.settings.llm_batch_poll_s)
                return
            why = reason(exc)
            log.error("%s failed: %s", what, why, exc_info=exc)
            try:
                await failed(why)
            except Exception as second:  # noqa: BLE001 - the database away: the next poll fails it again
                log.warning("%s: could not record its failure (%s); again at the next poll", what, second)

    # --- gathering ---------------------------------------------------------------------------------

    async def _gather(self, task: QueuedTask) -> None:
        if not task.takes_work:
            metrics.BATCH_LINES.labels("dropped").inc(await self.repo.settle_queued(task.task_id, LineStatus.DROPPED))
            return
        if must_finish_now(_now(), task.deadline, self.margin):
            sent = await self.repo.settle_queued(task.task_id, LineStatus.REALTIME)
            log.info("task %s: its deadline is near; %d lines go realtime instead of a batch", task.task_id, sent)
            return
        made = await self.repo.gather(task, self.settings.llm_batch_max_lines)
        if made:
            log.info("task %s: %d batches recorded", task.task_id, len(made))

    def _gathering_failed(self, task: QueuedTask) -> Callable[[str], Awaitable[None]]:
        async def failed(why: str) -> None:
            """Its queued lines go realtime, each saying why: the task still finishes."""
            sent = await self.repo.settle_queued(task.task_id, LineStatus.REALTIME, f"not sent as a batch: {why}")
            metrics.BATCH_LINES.labels("unanswered").inc(sent)

        return failed

    # --- one batch, one step -----------------------------------------------------------------------

    async def _advance(self, batch: OpenBatch) -> None:
        if batch.state in (BatchState.RECORDED, BatchState.UPLOADED):
            if not batch.takes_work:
                await self._unsent(batch, Ending.CANCELLED, "its task was paused or ended before it was sent")
            elif must_finish_now(_now(), batch.deadline, self.margin):
                await self._unsent(batch, Ending.CANCELLED, "its task's deadline came before it was sent")
            elif batch.state is BatchState.RECORDED:
                await self._upload(batch)
            else:
                await self._create(batch)
        elif batch.state is BatchState.CREATING:
            await self._adopt_or_create(batch)
        elif batch.state is BatchState.SUBMITTED:
            await self._poll(batch)

    def _failed(self, batch: OpenBatch) -> Callable[[str], Awaitable[None]]:
        async def failed(why: str) -> None:
            """The batch ends FAILED with `why`. Running at the provider, it is cancelled, so that no line
            that now goes realtime is also paid in it; the lines it answered keep their stored answers,
            the others go back to their chunks (realtime) with the reason."""
            if batch.provider_id is not None:
                try:
                    await self.api.cancel(batch.provider_id)
                except Exception as exc:  # noqa: BLE001 - cancelling is a courtesy; the batch fails anyway
                    log.warning("batch %s: could not cancel %s (%s)", batch.id, batch.provider_id, reason(exc))
            back = await self.repo.sent_back(batch.id, None, f"its batch failed: {why}")
            await self.repo.end(batch.id, Ending.FAILED, why)
            self._moved[batch.task_id] = str(Ending.FAILED)
            metrics.BATCHES.labels(Ending.FAILED).inc()
            metrics.BATCH_LINES.labels("unanswered").inc(back)
            log.warning("batch %s failed (%s): %d lines back to their chunks", batch.id, why, back)

        return failed

    async def _upload(self, batch: OpenBatch) -> None:
        with tempfile.TemporaryFile() as spool:
            size = 0
            async for page in self.repo.request_pages(batch.id, REQUESTS_AT_ONCE):
                for custom_id, request in page:
                    size += spool.write(input_line(custom_id, self.backend.chat_body(request_from(request))))
            if size > self.settings.llm_batch_max_bytes and batch.lines > 1:
                made = await self.repo.split(batch)
                await self.repo.end(batch.id, Ending.SPLIT, f"{size} bytes: over DOCSUM_LLM_BATCH_MAX_BYTES")
                log.info("batch %s: %d bytes, split in %d", batch.id, size, len(made))
                return
            spool.seek(0)
            try:
                file_id = await self.api.upload(f"{batch.id}.jsonl", spool)
            except RequestRefused as exc:
                await self._unsent(batch, Ending.FAILED, f"the provider refused its input file: {reason(exc)}")
                return
        await self.repo.move(batch.id, BatchState.UPLOADED, input_file_id=file_id)

    async def _create(self, batch: OpenBatch) -> None:
        assert batch.input_file_id is not None
        # Recorded before it is sent: a create whose answer never comes is looked for, not sent again.
        await self.repo.move(batch.id, BatchState.CREATING)
        try:
            created = await self.api.create(batch.input_file_id, {BATCH_KEY: batch.id, TASK_KEY: batch.task_id})
        except RequestRefused as exc:
            await self._unsent(batch, Ending.FAILED, f"the provider refused the batch: {reason(exc)}")
            return
        await self._submitted(batch, created, "submitted")

    async def _adopt_or_create(self, batch: OpenBatch) -> None:
        assert batch.input_file_id is not None
        found = await self.api.find(BATCH_KEY, batch.id, batch.input_file_id, since=batch.created_at.timestamp())
        if found is None:
            log.info("batch %s: its create was never performed; creating it", batch.id)
            await self._create(batch)
            return
        log.info("batch %s: created as %s but never recorded; adopted", batch.id, found.id)
        await self._submitted(batch, found, "adopted")

    async def _submitted(self, batch: OpenBatch, provider: ProviderBatch, how: str) -> None:
        await self.repo.move(
            batch.id, BatchState.SUBMITTED, provider_id=provider.id, provider_status=provider.status,
            submitted_at=datetime.fromtimestamp(provider.created_at, UTC) if provider.created_at else _now(),
        )  # fmt: skip
        metrics.BATCHES.labels(how).inc()
        self._moved[batch.task_id] = how

    async def _poll(self, batch: OpenBatch) -> None:
        assert batch.provider_id is not None
        provider = await self.api.retrieve(batch.provider_id)
        if provider is None:
            queued = await self.repo.requeue(batch.id)
            await self.repo.end(batch.id, Ending.LOST, f"the provider no longer knows {batch.provider_id}")
            metrics.BATCHES.labels(Ending.LOST).inc()
            log.warning("batch %s: lost at the provider; its %d lines are queued again", batch.id, queued)
            return
        if await self.repo.observed(batch.id, provider.status, provider.completed, provider.failed):
            self._moved[batch.task_id] = f"{provider.completed} of {provider.total} lines done"
        if provider.ended:
            await self._ingest(batch, provider)
            return
        why = self._cancel_reason(batch, provider)
        if why and provider.status != "cancelling" and batch.cancel_reason is None:
            log.info("batch %s: cancelling it (%s)", batch.id, why)
            await self.repo.cancelling(batch.id, why)
            await self.api.cancel(provider.id)

    def _cancel_reason(self, batch: OpenBatch, provider: ProviderBatch) -> str | None:
        if not batch.takes_work:
            return "its task was paused or ended"
        if will_miss(_now(), batch.deadline, self.margin, batch.submitted_at, provider.completed, provider.total):
            return "it would not end before its task's deadline"
        return None

    async def _ingest(self, batch: OpenBatch, provider: ProviderBatch) -> None:
        answered = failed = 0
        for file_id in (provider.output_file_id, provider.error_file_id):
            if not file_id:
                continue
            page: list[LineResult] = []
            async for line in self.api.lines(file_id):
                page.append(line)
                if len(page) == LINES_AT_ONCE:
                    took, back = await self._ingest_page(batch, page)
                    answered, failed, page = answered + took, failed + back, []
            took, back = await self._ingest_page(batch, page)
            answered, failed = answered + took, failed + back
        outcome = ending(provider.status, provider.errors, batch.lines)
        unanswered = 0
        if outcome is Ending.SPLIT:
            made = await self.repo.split(batch)
            log.info("batch %s: over the provider's enqueued-token cap; split in %d", batch.id, len(made))
        else:
            why = readable(provider.error_text) or f"its batch {provider.status}"
            unanswered = await self.repo.sent_back(batch.id, None, f"not answered by the provider's batch: {why}")
        await self.repo.end(batch.id, outcome, readable(provider.error_text))
        self._moved[batch.task_id] = str(outcome)
        metrics.BATCHES.labels(outcome).inc()
        metrics.BATCH_LINES.labels("answered").inc(answered)
        metrics.BATCH_LINES.labels("failed").inc(failed)
        metrics.BATCH_LINES.labels("unanswered").inc(unanswered)
        log.info(
            "batch %s %s: %d lines answered, %d failed, %d unanswered", batch.id, outcome, answered, failed, unanswered
        )

    async def _ingest_page(self, batch: OpenBatch, page: list[LineResult]) -> tuple[int, int]:
        """A page of output lines stored in one transaction: (lines answered, lines sent back)."""
        if not page:
            return 0, 0
        requests = await self.repo.requests_of(batch.id, [line.custom_id for line in page])
        answered = failed = 0
        async with self.repo.page() as conn:
            for line in page:
                request = requests.get(line.custom_id)
                if request is None:
                    continue  # not ours: nothing to store
                if not (line.answered and line.body is not None):
                    if line.code != "batch_expired":
                        said = line.error or f"HTTP {line.status_code}"
                        why = f"the batch line failed: {readable(said)}"
                        failed += await self.repo.sent_back(batch.id, [line.custom_id], why, conn)
                    continue
                took, back = await self._take(conn, batch, line.custom_id, line.body, request)
                answered, failed = answered + took, failed + back
        return answered, failed

    async def _take(
        self, conn: Connection, batch: OpenBatch, custom_id: str, body: dict[str, Any], request: dict[str, Any]
    ) -> tuple[int, int]:
        """A line's answer read and stored: (1, 0); else its lines sent back with why: (0, their count).
        Reading is pure: whatever it raises (an empty answer, a shape no provider should send, JSON
        nested too deep) is that line's alone, as is an answer PostgreSQL refuses to store (its savepoint
        rolled back). The database away passes: the batch is read again at the next poll (what is
        stored stays)."""
        try:
            result = self.backend.read_answer(body, request_from(request))
        except Exception as exc:  # noqa: BLE001 - the line fails alone, with the reason
            why = f"the batch's answer could not be read: {reason(exc)}"
        else:
            try:
                return int(await self.repo.answered(conn, batch.id, custom_id, result, str(request["kind"]))), 0
            except Exception as exc:
                if passes(exc):
                    raise
                why = f"the batch's answer could not be stored: {reason(exc)}"
        return 0, await self.repo.sent_back(batch.id, [custom_id], why, conn)

    async def _unsent(self, batch: OpenBatch, outcome: Ending, why: str) -> None:
        """A batch ended before the provider ran it: its lines back to their chunks."""
        back = await self.repo.sent_back(batch.id, None, why)
        await self.repo.end(batch.id, outcome, why)
        metrics.BATCHES.labels(outcome).inc()
        metrics.BATCH_LINES.labels("unanswered").inc(back)
        log.info("batch %s ended unsent (%s): %d lines back to their chunks", batch.id, why, back)

    # --- announcing ------------------------------------------------------------------------------

    async def _tell(self) -> None:
        """Tell the progress log that a task's batch moved (submitted, lines done, ended): nothing else
        happens to a task while the provider works on its batch, so without this its stream would say
        nothing for hours. Told at most once per round and task; a lost one is told by the next move."""
        moved, self._moved = self._moved, {}
        if moved:
            events = [
                TaskEvent(task_id=task_id, status=TaskStatus.PROCESSING, detail={"batch": what})
                for task_id, what in moved.items()
            ]
            await self.publish(events, sender=BATCH_DRIVER)

    async def _announce(self) -> None:
        """Announce again each chunk whose line was answered or sent back (a crash between the two
        announces it again: harmless, its claim decides)."""
        while due := await self.repo.announcements(ANNOUNCE_AT_ONCE):
            events = [ChunkCreated(**asdict(a)) for a in due]
            await self.publish(events, sender=BATCH_DRIVER)
            await self.repo.announced([a.chunk_id for a in due])
            if len(due) < ANNOUNCE_AT_ONCE:
                return


def _now() -> datetime:
    return datetime.now(UTC)
