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
