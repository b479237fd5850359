"""The gateway's pure decisions (no IO): whether an owner may create a task now (docsum_shared.taskrate)."""

from __future__ import annotations

# The decision is shared with the parser (a producer's new task on Kafka counts against the same limit).
from docsum_shared.taskrate import Admission, admit_task

__all__ = ["Admission", "admit_task"]
