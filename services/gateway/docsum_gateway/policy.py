"""The gateway's pure decisions (no IO): whether an owner may create a task now."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Admission:
    allowed: bool
    tat: float  # the owner's theoretical arrival time to store (unchanged when refused)
    retry_after_s: int  # when refused: whole seconds until a request would be allowed; else 0


def admit_task(tat: float | None, now: float, per_minute: int) -> Admission:
    """The generic cell rate algorithm (as for the LLM calls in docsum_shared.ratelimit), refusing
    instead of waiting: each task pushes the owner's theoretical arrival time (TAT) on by 60/rate
    seconds, and a task is refused while the TAT runs more than a minute ahead of now. An owner who
    was quiet for a minute may thus create `per_minute` tasks at once (the burst), and after that one
    every 60/rate seconds: over any stretch of time, at most the burst plus the rate.
    """
    interval = 60.0 / per_minute
    start = max(tat if tat is not None else now, now)
    tolerance = 60.0 - interval  # how far ahead of now the TAT may be before this task is booked
    if start - now > tolerance + 1e-9:
        return Admission(False, start, max(1, math.ceil(start - now - tolerance)))
    return Admission(True, start + interval, 0)
