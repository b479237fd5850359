"""Messages waiting per key, in the order they came: both runners' way of keeping one key's events in
order while other keys go side by side (the Kafka runner's lanes are a partition and a key, the
in-process bus's a topic and a key)."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

L = TypeVar("L", bound=Hashable)  # what a lane is keyed by
R = TypeVar("R")  # what waits in it


@dataclass
class Lanes(Generic[L, R]):
    """The head of each lane is being handled, or waits for a free slot (`ready`, in the order the lanes
    opened)."""

    waiting: dict[L, collections.deque[R]] = field(default_factory=dict)
    held: int = 0  # messages in all lanes, heads included
    ready: collections.deque[L] = field(default_factory=collections.deque)

    def add(self, lane: L, record: R) -> bool:
        """Queue `record`; True when it opens a new lane (to be handled now, or once a slot is free)."""
        self.held += 1
        queue = self.waiting.get(lane)
        if queue is not None:
            queue.append(record)
            return False
        self.waiting[lane] = collections.deque([record])
        return True

    def leading(self, lane: L, most: int) -> list[R]:
        """The head of `lane` and up to `most` - 1 records behind it, in order."""
        queue = self.waiting.get(lane)
        return list(itertools.islice(queue, most)) if queue else []

    def done(self, lane: L) -> None:
        """The head of `lane` is done; the lane closes when nothing waits behind it."""
        queue = self.waiting[lane]
        queue.popleft()
        self.held -= 1
        if not queue:
            del self.waiting[lane]

    def close(self, lane: L) -> None:
        """Hand back what `lane` still holds."""
        self.held -= len(self.waiting.pop(lane, ()))

    def next_ready(self) -> L | None:
        """The lane that has waited longest for a slot."""
        return self.ready.popleft() if self.ready else None

    def close_ready(self, which: Callable[[L], bool] = lambda lane: True) -> None:
        """Hand back the lanes still waiting for a slot that `which` picks (all by default)."""
        for lane in [lane for lane in self.ready if which(lane)]:
            self.ready.remove(lane)
            self.close(lane)
