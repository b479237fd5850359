"""What happens after a failure, in one place: the rule, the back-off presets, and the loops that obey them.

The failure's kind comes from errors.py (`classify`). Then one pure function decides what follows:

    after_failure(kind, stored_attempts, this_round, limits) -> Wait | Later | Fail

- Wait(seconds): try again here, after a back-off (or after what the other side asked for).
- Later(seconds): this round's attempts are spent; the item waits for its next round in PostgreSQL
  (a chunk's `retry_at`), and no consumer slot is held meanwhile.
- Fail(error): stop trying. The item fails with `error` (a chunk, a document's or a task's summary);
  for the consumer shell, the message goes to its dead-letter topic.

By kind (`Limits` gives the numbers; `None` means no end):
- RATE_LIMITED: always Wait, as long as the provider asked (it never counts as an attempt), up to
  `rate_limit_waits` per item.
- RETRIABLE: Fail once `stored_attempts` (failed attempts stored on the item, across rounds and
  re-drives) reaches `attempts`; Later once `this_round` reaches `per_round`; Wait otherwise.
- FAILS_ITEM and POISON: Fail at once.
- None (an unexpected failure, a bug): Wait, up to `unexpected` times.

Who uses which limits: `for_chunks` (the summarizer), `for_merges` (the merger), `for_messages` (the
consumer shell), `for_flex` (a flex call refused for lack of capacity, in the OpenAI backend),
`for_claims` (a chunk another handling holds, in the summarizer). `retry_until` runs an attempt until it
returns, asking a `decide` function after each failure: `llm_retry` is the one for an item's LLM call
(a chunk's summary, a merge); `keep_running` is every background loop of the services (start again
after a failure, with back-off); `until_deadline` waits for infrastructure at start-up.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import Fail, ItemFailed, Kind, LLMError, classify

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with jitter: `base_s` doubled per failure up to `cap_s`, then a random share
    of up to `jitter` taken off, so that many waiters do not come back at the same moment."""

    base_s: float = 0.25
    cap_s: float = 10.0
    jitter: float = 0.3

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        if retry_after is not None:  # the other side said how long: that, not our guess
            return max(0.0, min(retry_after, max(self.cap_s, 60.0)))
        delay = min(self.cap_s, self.base_s * 2 ** max(0, min(failures - 1, 16)))
        return delay * (1 - self.jitter * random.random())


# The back-offs, by what waits.
MESSAGES = Backoff(base_s=0.5, cap_s=10.0)  # a message its handler could not handle yet (consumer shell)
PROVIDER = Backoff(base_s=1.0, cap_s=60.0)  # an LLM call (chunk summaries, merges)
START_UP = Backoff(base_s=0.5, cap_s=2.0)  # the database or broker a starting service waits for
LOOPS = Backoff(base_s=1.0, cap_s=30.0)  # a background loop that failed (listener, recorder, maintenance)
# A flex call refused for lack of capacity: short, since the default tier is the way out after a few.
FLEX = Backoff(base_s=0.5, cap_s=10.0)


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Later:
    seconds: float


Step = Wait | Later | Fail


@dataclass(frozen=True)
class Limits:
    backoff: Backoff
    attempts: int | None = None  # failed attempts an item gets in all (stored on it)
    per_round: int | None = None  # attempts in place before the item waits for its next round
    round_wait_s: float = 0.0  # how long it waits for that round
    rate_limit_waits: int | None = None  # "not now" answers waited out for one item
    unexpected: int | None = None  # unexpected failures (bugs) tried again


def after_failure(
    kind: Kind | None,
    stored_attempts: int,
    this_round: int,
    limits: Limits,
    *,
    retry_after: float | None = None,
    said: str = "",
) -> Step:
    """The one failure rule. `stored_attempts`: the item's failed attempts stored so far, this one
    included; `this_round`: failures of this kind in this run of attempts, this one included; `said`:
    the failure's own words, kept in the item's error."""
    if kind is Kind.RATE_LIMITED:
        if limits.rate_limit_waits is not None and this_round >= limits.rate_limit_waits:
            return Fail(f"the provider kept refusing for its rate limit ({this_round} times): {said}")
        return Wait(limits.backoff.delay(this_round, retry_after))
    if kind is Kind.RETRIABLE:
        if limits.attempts is not None and stored_attempts >= limits.attempts:
            return Fail(f"gave up after {stored_attempts} attempts: {said}")
        if limits.per_round is not None and this_round >= limits.per_round:
            return Later(limits.round_wait_s)
        return Wait(limits.backoff.delay(this_round, retry_after))
    if kind is None and (limits.unexpected is None or this_round < limits.unexpected):
        return Wait(limits.backoff.delay(this_round))
    return Fail(said)


def for_chunks(max_attempts: int, inplace_attempts: int, round_wait_s: float, backoff: Backoff = PROVIDER) -> Limits:
    """A chunk's call: `inplace_attempts` tries in place, then rounds `round_wait_s` apart, until
    `max_attempts` failed in all; up to 100 rate-limit waits per round."""
    return Limits(backoff, max_attempts, inplace_attempts, round_wait_s, rate_limit_waits=100)


def for_merges(max_attempts: int, backoff: Backoff = PROVIDER) -> Limits:
    """A merge call: as many failed attempts as a chunk gets, all in place (a merge has no rounds: it
    holds its document's or task's place in the tree); rate limits are waited out without end."""
    return Limits(backoff, max_attempts)


def for_messages(backoff: Backoff = MESSAGES) -> Limits:
    """A message in the consumer shell: infrastructure and rate limits are waited out without end; an
    unexpected failure is tried 3 times; what is the message's own fault is dead-lettered at once."""
    return Limits(backoff, unexpected=3)


def for_flex(tries: int, backoff: Backoff = FLEX) -> Limits:
    """A flex call refused for lack of flex capacity (not our rate limit): waited out as a rate limit,
    up to `tries` refusals in a row; the Fail after that sends it at the default tier, so that a task
    never stalls on flex capacity."""
    return Limits(backoff, rate_limit_waits=tries)


def for_claims(every_s: float) -> Limits:
    """A chunk another handling holds under its lease: claimed again every `every_s`, without end and
    without counting an attempt (the holder's call is the attempt; its lease's expiry the backstop)."""
    return Limits(Backoff(base_s=every_s, cap_s=every_s, jitter=0.0))


class NextRound(Exception):
    """A Later step raised out of `retry_until`: the item waits `seconds` for its next round."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"next round in {seconds:g}s")
        self.seconds = seconds


def obey(step: Step, exc: Exception | None = None) -> float:
    """A step as `retry_until`'s `decide` gives it: the seconds of a Wait; a Later raises NextRound and
    a Fail raises ItemFailed (from `exc`, the failure that led to it, if any)."""
    if isinstance(step, Wait):
        return step.seconds
    if isinstance(step, Later):
        raise NextRound(step.seconds) from exc
    raise ItemFailed(step.error) from exc


# --- the loops -----------------------------------------------------------------------------------


class Tally(Counter[Kind | None]):
    """The failures of one `retry_until`, by kind (this one included when `decide` sees it); `total()`
    counts them all."""


class Stopped(Exception):
    """The wait before a retry was cut short: the service is stopping."""


Decide = Callable[[Exception, Tally], "float | None | Awaitable[float | None]"]


async def retry_until(attempt: Callable[[], Awaitable[T]], decide: Decide, *, stop: asyncio.Event | None = None) -> T:
    """Call `attempt` until it returns. After each failure, `decide(exc, tally)` (sync or async) gives
    the seconds to wait before the next try, or None to give up: the exception is raised (or whatever
    `decide` raised instead). A `stop` set while waiting raises `Stopped`."""
    tally = Tally()
    while True:
        try:
            return await attempt()
        except Exception as exc:
            tally[classify(exc)] += 1
            delay = decide(exc, tally)
            if inspect.isawaitable(delay):
                delay = await delay
            if delay is None:
                raise
        if not await _waited(delay, stop):
            raise Stopped()


# What an item does with the step of its failed LLM call before the step is obeyed (store the failure,
# log it): the failure, its kind, the step, and the item's failed attempts stored (0 for a rate limit).
Then = Callable[[Exception, Kind, Step, int], Awaitable[None]]


def llm_retry(
    limits: Limits, stored_attempts: Callable[[Tally], Awaitable[int]], then: Then
) -> Callable[[Exception, Tally], Awaitable[float | None]]:
    """The `decide` of an item's LLM call (a chunk's summary, a merge) for `retry_until`.

    A failure that is no LLMError (infrastructure, a bug: the consumer shell's), or an LLMError that is
    neither passing nor a rate limit (a refusal: it fails the item as ItemFailed), is raised as it is.
    The others get `after_failure`'s step: `stored_attempts(tally)` gives the item's failed attempts
    stored, this one included (asked of a passing failure only: a rate limit never counts); `then` sees
    the step; then it is obeyed (Wait: its seconds; Later: NextRound; Fail: ItemFailed)."""

    async def decide(exc: Exception, tally: Tally) -> float | None:
        kind = classify(exc)
        if not isinstance(exc, LLMError) or kind not in (Kind.RETRIABLE, Kind.RATE_LIMITED):
            return None
        failures = await stored_attempts(tally) if kind is Kind.RETRIABLE else 0
        retry_after = getattr(exc, "retry_after", None)
        step = after_failure(kind, failures, tally[kind], limits, retry_after=retry_after, said=str(exc))
        await then(exc, kind, step, failures)
        return obey(step, exc)

    return decide


async def keep_running(
    what: str,
    one_round: Callable[[], Awaitable[object]],
    *,
    every_s: float = 0.0,
    stop: asyncio.Event | None = None,
    backoff: Backoff = LOOPS,
    wake: asyncio.Event | None = None,
) -> None:
    """Run `one_round` again and again, `every_s` apart (sooner when `wake` is set), until `stop` is set
    (or the task is cancelled). A round that fails is logged as `what` and the next starts after a
    back-off (at most `every_s`, when that is set): the database or broker away stops nothing for good."""
    failures = 0
    while stop is None or not stop.is_set():
        try:
            await one_round()
            failures, delay = 0, every_s
        except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
            failures += 1
            delay = backoff.delay(failures)
            delay = min(delay, every_s) if every_s else delay
            log.warning("%s: %s; again in %.1fs", what, exc, delay)
        if not await _waited(delay, stop, wake):
            return


async def _waited(seconds: float, stop: asyncio.Event | None, wake: asyncio.Event | None = None) -> bool:
    """Wait `seconds`, or until `wake` is set (which it clears); False when `stop` was set meanwhile."""
    if wake is None:
        if stop is None:
            await asyncio.sleep(seconds)
            return True
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            return True
        return False
    waiters = [asyncio.ensure_future(event.wait()) for event in (stop, wake) if event is not None]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    wake.clear()
    return stop is None or not stop.is_set()


def until_deadline(
    wait_s: float, on_retry: Callable[[Exception], None], backoff: Backoff = START_UP
) -> Callable[[Exception, Tally], float | None]:
    """A `decide` for `retry_until` at start-up: wait out retriable failures for up to `wait_s` seconds
    in all, then give up (the service exits, and its supervisor restarts it)."""
    deadline = asyncio.get_running_loop().time() + wait_s

    def decide(exc: Exception, tally: Tally) -> float | None:
        if classify(exc) is not Kind.RETRIABLE or asyncio.get_running_loop().time() > deadline:
            return None
        on_retry(exc)
        return backoff.delay(tally.total())

    return decide
