"""The one failure rule (after_failure), the back-off, and the loops that obey them (docsum_shared.retry)."""

from __future__ import annotations

import asyncio

import pytest

from docsum_shared.errors import Fail, ItemFailed, Kind, ProviderUnavailable, RateLimited, RequestRefused, classify
from docsum_shared.retry import (
    Backoff,
    Later,
    NextRound,
    Step,
    Stopped,
    Tally,
    Wait,
    after_failure,
    for_chunks,
    for_claims,
    for_flex,
    for_merges,
    for_messages,
    keep_running,
    llm_retry,
    obey,
    retry_until,
    until_deadline,
)

NOW = Backoff(base_s=0.0, cap_s=0.0)


def _wait_out_providers(exc: Exception, tally: Tally) -> float | None:
    return 0.0 if classify(exc) is Kind.RETRIABLE else None


def test_a_chunk_tries_in_place_then_waits_for_rounds_then_fails() -> None:
    limits = for_chunks(max_attempts=4, inplace_attempts=2, round_wait_s=30.0, backoff=NOW)
    retriable = Kind.RETRIABLE
    assert after_failure(retriable, 1, 1, limits) == Wait(0.0)
    assert after_failure(retriable, 2, 2, limits) == Later(30.0)
    assert after_failure(retriable, 3, 1, limits) == Wait(0.0)  # the next round starts over in place
    assert after_failure(retriable, 4, 2, limits, said="503") == Fail("gave up after 4 attempts: 503")
    assert after_failure(retriable, 4, 1, limits, said="503") == Fail("gave up after 4 attempts: 503")


def test_rate_limits_never_count_as_attempts_and_wait_as_asked() -> None:
    chunks = for_chunks(max_attempts=1, inplace_attempts=1, round_wait_s=30.0)
    assert after_failure(Kind.RATE_LIMITED, 5, 3, chunks, retry_after=7.0) == Wait(7.0)
    assert after_failure(Kind.RATE_LIMITED, 0, 100, chunks, said="429") == Fail(
        "the provider kept refusing for its rate limit (100 times): 429"
    )
    merges = for_merges(max_attempts=4)
    assert after_failure(Kind.RATE_LIMITED, 0, 10_000, merges, retry_after=2.0) == Wait(2.0)


def test_a_merge_has_no_rounds() -> None:
    limits = for_merges(max_attempts=3, backoff=NOW)
    assert after_failure(Kind.RETRIABLE, 2, 2, limits) == Wait(0.0)
    assert after_failure(Kind.RETRIABLE, 3, 3, limits, said="x") == Fail("gave up after 3 attempts: x")


def test_what_is_the_items_or_the_messages_own_fails_at_once_and_a_bug_is_tried_a_few_times() -> None:
    limits = for_messages(NOW)
    assert after_failure(Kind.FAILS_ITEM, 0, 1, limits, said="bad pdf") == Fail("bad pdf")
    assert after_failure(Kind.POISON, 0, 1, limits, said="unreadable") == Fail("unreadable")
    assert after_failure(None, 0, 2, limits) == Wait(0.0)
    assert after_failure(None, 0, 3, limits, said="bug") == Fail("bug")
    assert after_failure(Kind.RETRIABLE, 10_000, 10_000, limits) == Wait(0.0)  # infrastructure: no end


def test_a_flex_refusal_is_waited_out_as_a_rate_limit_then_given_up() -> None:
    limits = for_flex(tries=3, backoff=NOW)
    assert after_failure(Kind.RATE_LIMITED, 0, 2, limits, retry_after=0.0) == Wait(0.0)
    assert isinstance(after_failure(Kind.RATE_LIMITED, 0, 3, limits), Fail)  # the default tier, from here on


def test_a_held_chunk_is_claimed_again_at_a_steady_pace_without_end() -> None:
    limits = for_claims(0.5)
    assert after_failure(Kind.RETRIABLE, 0, 1, limits) == Wait(0.5)
    assert after_failure(Kind.RETRIABLE, 0, 10_000, limits) == Wait(0.5)  # no jitter, no growth, no end
    assert obey(after_failure(Kind.RETRIABLE, 0, 3, limits)) == 0.5


class _Item:
    """An item's side of `llm_retry`: one failed attempt stored before this run, the steps it saw."""

    def __init__(self) -> None:
        self.asked = 0
        self.seen: list[tuple[Kind, Step, int]] = []

    async def stored_attempts(self, tally: Tally) -> int:
        self.asked += 1
        return 1 + tally[Kind.RETRIABLE]

    async def then(self, exc: Exception, kind: Kind, step: Step, failures: int) -> None:
        self.seen.append((kind, step, failures))


async def test_an_items_llm_call_waits_out_rate_limits_without_counting_them() -> None:
    item = _Item()
    decide = llm_retry(for_chunks(5, 2, 30.0, backoff=NOW), item.stored_attempts, item.then)
    assert await decide(RateLimited("429", retry_after=2.0), Tally({Kind.RATE_LIMITED: 1})) == 2.0
    assert item.asked == 0 and item.seen == [(Kind.RATE_LIMITED, Wait(2.0), 0)]


async def test_an_items_llm_call_tries_in_place_then_waits_for_its_round_then_fails() -> None:
    item = _Item()
    decide = llm_retry(for_chunks(4, 2, 30.0, backoff=NOW), item.stored_attempts, item.then)
    failure = ProviderUnavailable("503")
    assert await decide(failure, Tally({Kind.RETRIABLE: 1})) == 0.0
    with pytest.raises(NextRound) as later:
        await decide(failure, Tally({Kind.RETRIABLE: 2}))
    assert later.value.seconds == 30.0
    with pytest.raises(ItemFailed, match="gave up after 4 attempts: 503"):
        await decide(failure, Tally({Kind.RETRIABLE: 3}))
    assert item.seen == [
        (Kind.RETRIABLE, Wait(0.0), 2),
        (Kind.RETRIABLE, Later(30.0), 3),
        (Kind.RETRIABLE, Fail("gave up after 4 attempts: 503"), 4),
    ]


async def test_an_items_llm_call_leaves_refusals_infrastructure_and_bugs_to_their_own_rules() -> None:
    item = _Item()
    decide = llm_retry(for_merges(3, backoff=NOW), item.stored_attempts, item.then)
    for exc in (RequestRefused("400"), ConnectionResetError("the database went away"), KeyError("bug")):
        assert await decide(exc, Tally({classify(exc): 1})) is None  # raised as it is
    assert item.asked == 0 and item.seen == []


def test_obey_turns_a_step_into_a_wait_or_the_exception_that_ends_it() -> None:
    cause = ProviderUnavailable("503")
    assert obey(Wait(2.5), cause) == 2.5
    with pytest.raises(NextRound) as later:
        obey(Later(30.0), cause)
    assert later.value.seconds == 30.0 and later.value.__cause__ is cause
    with pytest.raises(ItemFailed, match="gave up"):
        obey(Fail("gave up"), cause)


async def test_retry_until_tallies_failures_by_kind() -> None:
    failures: list[Exception] = [RateLimited("429"), ProviderUnavailable("503"), RateLimited("429")]
    seen: list[tuple[int, int]] = []

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    def decide(exc: Exception, tally: Tally) -> float:
        seen.append((tally[Kind.RATE_LIMITED], tally[Kind.RETRIABLE]))
        return 0.0

    assert await retry_until(attempt, decide) == "ok"
    assert seen == [(1, 0), (1, 1), (2, 1)]


async def test_keep_running_starts_a_failed_round_again_and_ends_when_stopped() -> None:
    stop = asyncio.Event()
    rounds: list[int] = []

    async def one_round() -> None:
        rounds.append(len(rounds))
        if len(rounds) < 3:
            raise ConnectionResetError("the database went away")
        stop.set()

    await asyncio.wait_for(keep_running("test loop", one_round, stop=stop, backoff=NOW), 5.0)
    assert rounds == [0, 1, 2]


def test_backoff_grows_is_capped_jittered_and_follows_retry_after() -> None:
    backoff = Backoff(base_s=1.0, cap_s=8.0, jitter=0.5)
    assert 0.5 <= backoff.delay(1) <= 1.0
    assert 2.0 <= backoff.delay(3) <= 4.0
    assert 4.0 <= backoff.delay(30) <= 8.0
    assert backoff.delay(1, retry_after=3.0) == 3.0


async def test_retry_until_retries_what_decide_allows_and_raises_the_rest() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ProviderUnavailable("503")
        return "done"

    decide = _wait_out_providers
    assert await retry_until(flaky, decide) == "done" and len(calls) == 3

    async def refused() -> str:
        raise RequestRefused("400")

    with pytest.raises(RequestRefused):
        await retry_until(refused, decide)


async def test_retry_until_takes_an_async_decide_that_may_raise_its_own_outcome() -> None:
    async def always() -> None:
        raise ProviderUnavailable("500")

    async def decide(exc: Exception, tally: Tally) -> float | None:
        if tally.total() >= 2:
            raise ItemFailed(f"gave up after {tally.total()} attempts: {exc}")
        return 0.0

    with pytest.raises(ItemFailed, match="gave up after 2 attempts: 500"):
        await retry_until(always, decide)


async def test_a_stop_during_the_wait_hands_the_work_back() -> None:
    stop = asyncio.Event()

    async def down() -> None:
        stop.set()
        raise ConnectionResetError()

    with pytest.raises(Stopped):
        await retry_until(down, lambda exc, tally: 30.0, stop=stop)


async def test_start_up_waits_out_an_outage_until_its_deadline_then_gives_up() -> None:
    seen: list[Exception] = []
    tries = 0

    async def down_twice() -> str:
        nonlocal tries
        tries += 1
        if tries <= 2:
            raise ConnectionRefusedError("not yet")
        return "up"

    assert await retry_until(down_twice, until_deadline(5.0, seen.append, Backoff(0.0, 0.0))) == "up"
    assert len(seen) == 2

    async def never() -> None:
        raise ConnectionRefusedError("down")

    with pytest.raises(ConnectionRefusedError):
        await retry_until(never, until_deadline(0.05, seen.append, Backoff(0.01, 0.01)))

    async def wrong() -> None:
        raise RuntimeError("cannot create topic x")

    with pytest.raises(RuntimeError):  # not a passing outage: no waiting at all
        await retry_until(wrong, until_deadline(5.0, seen.append))


async def test_a_loop_woken_runs_its_next_round_before_its_period() -> None:
    rounds: list[float] = []
    wake, stop = asyncio.Event(), asyncio.Event()

    async def one_round() -> None:
        rounds.append(asyncio.get_running_loop().time())
        if len(rounds) == 3:
            stop.set()

    loop = asyncio.create_task(keep_running("woken", one_round, every_s=3600, stop=stop, wake=wake))
    for expected in (1, 2):
        while len(rounds) < expected:
            await asyncio.sleep(0)
        wake.set()  # the next round now, not in an hour
    await asyncio.wait_for(loop, timeout=5)
    assert len(rounds) == 3 and not wake.is_set()
