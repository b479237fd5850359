"""Statuses stored in Postgres. They tell each service where a task, document or chunk resumes."""

from enum import StrEnum


class TaskStatus(StrEnum):
    """A task's status, as stored in Postgres and reported on task-events."""

    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    PAUSED = "PAUSED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"  # over its owner's cost ceiling: resume approves, cancel drops
    COMPLETED = "COMPLETED"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"


class DocumentStatus(StrEnum):
    PENDING = "PENDING"
    PARSING = "PARSING"
    CHUNKING = "CHUNKING"
    SUMMARIZING = "SUMMARIZING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class ChunkStatus(StrEnum):
    PENDING = "PENDING"
    SUMMARIZING = "SUMMARIZING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


# Taking work: the pipeline starts and finishes work only for these (every other status is held or final).
class LineStatus(StrEnum):
    """A chunk's request on its way through the provider's batch (batch mode)."""

    QUEUED = "queued"  # waiting to be gathered into a batch
    SUBMITTED = "submitted"  # in a batch (recorded, sent, or running at the provider)
    ANSWERED = "answered"  # its answer is in the result cache: its chunk completes from there
    REALTIME = "realtime"  # the batch did not answer it: its chunk calls in realtime
    DROPPED = "dropped"  # its task paused or ended: queued again if the chunk is wanted again


class BatchState(StrEnum):
    """Where a provider's batch is in its life; each state names the step that comes next."""

    RECORDED = "recorded"  # lines chosen: upload its input file
    UPLOADED = "uploaded"  # input file uploaded: create the batch
    CREATING = "creating"  # create sent, answer not stored: find it by its metadata, else create it
    SUBMITTED = "submitted"  # running at the provider: poll, cancel when it must, ingest when it ended
    ENDED = "ended"


TASK_TAKES_WORK = (TaskStatus.PENDING, TaskStatus.PROCESSING)
# Waiting for its owner: no work is started for it (resume re-drives what is left).
TASK_HELD = frozenset({TaskStatus.PAUSED, TaskStatus.AWAITING_APPROVAL})
TASK_FINAL = frozenset(
    {
        TaskStatus.COMPLETED,
        TaskStatus.COMPLETED_WITH_ERRORS,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.EXPIRED,
    }
)
DOCUMENT_FINAL = frozenset({DocumentStatus.COMPLETED, DocumentStatus.FAILED, DocumentStatus.CANCELLED})
CHUNK_FINAL = frozenset({ChunkStatus.COMPLETED, ChunkStatus.FAILED})


def takes_work(task_status: TaskStatus) -> bool:
    """A task still takes work unless it is held (paused, or awaiting its owner's approval: resume
    re-drives it) or final."""
    return task_status in TASK_TAKES_WORK


LINE_LIVE = (LineStatus.QUEUED, LineStatus.SUBMITTED)  # its chunk waits for the batch
