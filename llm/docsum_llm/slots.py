"""A process's call slots, given to the waiting calls lowest rank first.

asyncio.Semaphore wakes its waiters first come, first served: a summarizer holds the chunks admitted to
it (its calls in flight and the spare announced behind them), and a newcomer's chunk, admitted ahead of
the spare in the fair order, would still wait for every spare chunk that reached the process before it.
Here a free slot goes to the waiter with the lowest rank (the fair order's: admission.py), ties in the
order they came. A call with no rank (a merge, a chunk admitted first in, first out or before ranks were
given) goes before ranked ones: among themselves unranked calls keep the order they came in, which is
what they had, and a ranked call cannot wait behind an endless run of them in a summarizer, whose only
unranked chunks are those (a finite set) or all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator

# A waiter's place: unranked first, then by rank; then by arrival.
_Key = tuple[tuple[float, ...], int]


class RankedSlots:
    """`n` slots. A slot freed goes straight to the waiter with the lowest rank (`acquire`), so a call
    arriving meanwhile cannot take it past the waiters; a waiter cancelled leaves no slot lost."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"at least one slot, not {n}")
        self._free = n
        self._waiting: list[tuple[_Key, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        """The waiters not cancelled."""
        return sum(1 for _, future in self._waiting if not future.done())

    @contextlib.asynccontextmanager
    async def slot(self, rank: tuple[float, ...] | None = None) -> AsyncIterator[None]:
        await self.acquire(rank)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, rank: tuple[float, ...] | None = None) -> None:
        if self._free > 0:  # then nobody waits: a slot freed goes to a waiter before it counts as free
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = ((0.0,) if rank is None else (1.0, *rank), next(self._arrivals))
        heapq.heappush(self._waiting, (key, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # given the slot as it was cancelled: the next waiter has it
            raise

    def release(self) -> None:
        while self._waiting:
            _, future = heapq.heappop(self._waiting)
            if not future.done():  # a cancelled waiter's future is done: skipped
                future.set_result(None)
                return
        self._free += 1
