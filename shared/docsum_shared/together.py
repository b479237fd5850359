"""Calls made at about the same time, run as one: a statement for many rows instead of one per row.

    claim = Together(claim_rows)          # claim_rows(list of arguments) -> list of results, in order
    claimed = await claim((chunk_id, holder))

Each caller awaits its own result, as if it had made its call alone. The calls made while a round
runs wait for it to end and go together in the next round (at most `most` in one), so that under load
one round trip serves many callers and, alone, a call waits for nothing. A round that fails fails
every call in it with its exception: a round is one statement, all of it or nothing. With `alone`, a
round of several calls that fails with an error `alone` names (one row's fault, such as a value the
database refuses) is run again call by call: each caller gets its own outcome, and the one bad call
fails alone instead of failing every call that happened to share its round.

With `linger_s`, a round of calls none of which is `urgent` waits up to that long for more calls
first (an urgent call ends the wait): fewer, larger rounds where a little delay costs nothing.

A caller cancelled before its round starts is left out of it; one cancelled while its round runs
does not stop the round (its rows are written all the same), as when a process dies after its
statement committed: what the round wrote must be safe for another to find (a lease expires, an
answer stored is an answer found).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Generic, TypeVar

A = TypeVar("A")
K = TypeVar("K")
R = TypeVar("R")

MOST = 256  # calls in one round: bounds a statement's parameters


class Together(Generic[A, R]):
    """`run` takes the arguments of several calls and returns their results in the same order."""

    def __init__(
        self,
        run: Callable[[list[A]], Awaitable[Sequence[R]]],
        *,
        most: int = MOST,
        idle: Callable[[], object] | None = None,
        linger_s: float = 0.0,
        urgent: Callable[[A], bool] = lambda _: False,
        alone: Callable[[Exception], bool] = lambda _: False,
    ) -> None:
        self._run = run
        self._most = most
        self._idle = idle  # called when the last round ends and nobody waits
        self._alone = alone
        self._linger_s, self._urgent = linger_s, urgent
        self._hurry = asyncio.Event()  # an urgent call waits: a lingering round goes now
        self._waiting: list[tuple[A, asyncio.Future[R]]] = []
        self._rounds: asyncio.Task[None] | None = None

    async def __call__(self, argument: A) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((argument, future))
        if self._linger_s and self._urgent(argument):
            self._hurry.set()
        if self._rounds is None:
            # Of nobody's context: the rounds serve every caller, not the first one's log ids or trace.
            self._rounds = asyncio.create_task(self._run_rounds(), context=contextvars.Context())
        return await future

    async def _run_rounds(self) -> None:
        calls: list[tuple[A, asyncio.Future[R]]] = []
        try:
            await asyncio.sleep(0)  # the calls made in this turn of the loop join the first round
            while self._waiting:
                if self._linger_s and not self._hurry.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hurry.wait(), self._linger_s)
                calls = [(a, f) for a, f in self._waiting[: self._most] if not f.done()]
                del self._waiting[: self._most]
                if not any(self._urgent(a) for a, _ in self._waiting):
                    self._hurry.clear()
                if not calls:
                    continue
                try:
                    await self._settle(calls)
                except Exception as exc:  # noqa: BLE001 - one call's fault, maybe: each is told its own
                    if len(calls) == 1 or not self._alone(exc):
                        self._fail(calls, exc)
                        continue
                    for call in calls:
                        try:
                            await self._settle([call])
                        except Exception as own:  # noqa: BLE001 - its caller raises it
                            self._fail([call], own)
        finally:
            self._rounds = None
            for _, future in [*calls, *self._waiting]:  # cancelled, or broken: nobody waits forever
                if not future.done():
                    future.cancel()
            self._waiting.clear()
            if self._idle is not None:
                self._idle()

    async def _settle(self, calls: list[tuple[A, asyncio.Future[R]]]) -> None:
        """One round: `run` over the calls' arguments, each caller given its result."""
        results = await self._run([argument for argument, _ in calls])
        if len(results) != len(calls):
            raise RuntimeError(f"a round of {len(calls)} calls gave {len(results)} results")
        for (_, future), result in zip(calls, results, strict=True):
            if not future.done():
                future.set_result(result)

    @staticmethod
    def _fail(calls: list[tuple[A, asyncio.Future[R]]], exc: Exception) -> None:
        for _, future in calls:
            if not future.done():
                future.set_exception(exc)


class ByKey(Generic[K, A, R]):
    """Together for each key: the calls of one key made at about the same time go as one round of
    `run(key, arguments)`; calls of different keys never share a round, nor wait for each other's."""

    def __init__(
        self,
        run: Callable[[K, list[A]], Awaitable[Sequence[R]]],
        *,
        most: int = MOST,
        linger_s: float = 0.0,
        urgent: Callable[[A], bool] = lambda _: False,
    ) -> None:
        self._run = run
        self._most = most
        self._linger_s, self._urgent = linger_s, urgent
        self._of: dict[K, Together[A, R]] = {}

    async def __call__(self, key: K, argument: A) -> R:
        together = self._of.get(key)
        if together is None:
            together = self._of[key] = Together(
                partial(self._run, key),
                most=self._most,
                idle=partial(self._forget, key),
                linger_s=self._linger_s,
                urgent=self._urgent,
            )
        return await together(argument)

    def _forget(self, key: K) -> None:
        self._of.pop(key, None)
