"""Together: calls made at about the same time, run as one round, each caller with its own result."""

from __future__ import annotations

import asyncio

import pytest

from docsum_shared.together import ByKey, Together


class Rows:
    """A stand-in for a statement over many rows: records each round, doubles each argument."""

    def __init__(self, *, fail_on: int | None = None, gate: asyncio.Event | None = None) -> None:
        self.rounds: list[list[int]] = []
        self.fail_on = fail_on
        self.gate = gate

    async def __call__(self, arguments: list[int]) -> list[int]:
        self.rounds.append(list(arguments))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_on in arguments:
            raise ValueError(f"row {self.fail_on} refused")
        return [a * 2 for a in arguments]


async def test_calls_made_in_one_turn_go_in_one_round_each_with_its_own_result() -> None:
    rows = Rows()
    double = Together(rows)
    results = await asyncio.gather(*(double(n) for n in range(10)))
    assert results == [n * 2 for n in range(10)]
    assert rows.rounds == [list(range(10))]


async def test_a_call_alone_waits_for_nothing() -> None:
    rows = Rows()
    double = Together(rows)
    assert await double(4) == 8
    assert await double(5) == 10
    assert rows.rounds == [[4], [5]]


async def test_calls_made_while_a_round_runs_go_together_in_the_next() -> None:
    gate = asyncio.Event()
    rows = Rows(gate=gate)
    double = Together(rows)
    first = asyncio.create_task(double(1))
    await asyncio.sleep(0.01)  # the first round runs, held at the gate
    later = [asyncio.create_task(double(n)) for n in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert rows.rounds == [[1]]
    gate.set()
    assert await first == 2
    assert await asyncio.gather(*later) == [4, 6, 8]
    assert rows.rounds == [[1], [2, 3, 4]]


async def test_a_failed_round_fails_its_calls_and_not_the_next_round() -> None:
    gate = asyncio.Event()
    rows = Rows(fail_on=2, gate=gate)
    double = Together(rows)
    failing = [asyncio.create_task(double(n)) for n in (1, 2)]
    await asyncio.sleep(0.01)
    after = asyncio.create_task(double(3))
    gate.set()
    for task in failing:
        with pytest.raises(ValueError, match="row 2 refused"):
            await task
    assert await after == 6
    assert rows.rounds == [[1, 2], [3]]


async def test_a_round_failed_by_one_call_is_run_again_call_by_call_when_alone_says_so() -> None:
    """One bad row (a value the database refuses) fails its own caller only; the others' rows are written
    and each caller has its own result, once."""
    rows = Rows(fail_on=2)
    double = Together(rows, alone=lambda exc: isinstance(exc, ValueError))
    outcomes = await asyncio.gather(*(double(n) for n in (1, 2, 3)), return_exceptions=True)
    assert outcomes[0] == 2 and outcomes[2] == 6
    assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "row 2 refused"
    assert rows.rounds == [[1, 2, 3], [1], [2], [3]]


async def test_a_round_failed_otherwise_fails_every_call_once() -> None:
    rows = Rows(fail_on=2)
    double = Together(rows, alone=lambda exc: isinstance(exc, KeyError))
    outcomes = await asyncio.gather(*(double(n) for n in (1, 2, 3)), return_exceptions=True)
    assert all(isinstance(o, ValueError) for o in outcomes)
    assert rows.rounds == [[1, 2, 3]]


async def test_a_caller_cancelled_before_its_round_is_left_out() -> None:
    gate = asyncio.Event()
    rows = Rows(gate=gate)
    double = Together(rows)
    first = asyncio.create_task(double(1))
    await asyncio.sleep(0.01)
    gone, kept = asyncio.create_task(double(2)), asyncio.create_task(double(3))
    await asyncio.sleep(0.01)
    gone.cancel()
    gate.set()
    assert await first == 2 and await kept == 6
    assert rows.rounds == [[1], [3]]


async def test_a_round_takes_at_most_most_calls() -> None:
    rows = Rows()
    double = Together(rows, most=4)
    assert await asyncio.gather(*(double(n) for n in range(10))) == [n * 2 for n in range(10)]
    assert rows.rounds == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_a_round_that_gives_the_wrong_number_of_results_fails_its_calls() -> None:
    async def short(arguments: list[int]) -> list[int]:
        return arguments[:-1]

    together = Together(short)
    results = await asyncio.gather(together(1), together(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)


async def test_by_key_calls_of_one_key_go_together_and_keys_never_share_a_round() -> None:
    rounds: list[tuple[str, list[int]]] = []

    async def run(key: str, arguments: list[int]) -> list[str]:
        rounds.append((key, list(arguments)))
        await asyncio.sleep(0.01)
        return [f"{key}{a}" for a in arguments]

    by_key: ByKey[str, int, str] = ByKey(run)
    results = await asyncio.gather(by_key("a", 1), by_key("b", 2), by_key("a", 3))
    assert results == ["a1", "b2", "a3"]
    assert sorted(rounds) == [("a", [1, 3]), ("b", [2])]
    assert await by_key("a", 4) == "a4"  # a key whose rounds ended starts afresh
    assert rounds[-1] == ("a", [4])
    assert not by_key._of  # nothing kept for keys nobody calls


async def test_a_lingering_round_takes_the_calls_made_meanwhile_and_an_urgent_call_ends_the_wait() -> None:
    rows = Rows()
    double = Together(rows, linger_s=0.5, urgent=lambda n: n < 0)
    first = asyncio.create_task(double(1))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(double(2))
    await asyncio.sleep(0.05)
    assert rows.rounds == []  # both wait for more
    started = asyncio.get_running_loop().time()
    assert await asyncio.gather(first, second, double(-3)) == [2, 4, -6]
    assert asyncio.get_running_loop().time() - started < 0.3  # the urgent call did not wait out the linger
    assert rows.rounds == [[1, 2, -3]]


async def test_a_lingering_round_goes_when_its_time_is_up() -> None:
    rows = Rows()
    double = Together(rows, linger_s=0.05, urgent=lambda n: n < 0)
    assert await asyncio.wait_for(double(1), 2) == 2
    assert rows.rounds == [[1]]
