"""The integration tests' wait: `eventually` polls a plain or async condition, bounded."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.helpers import eventually, eventually_blocking


def countdown(n: int) -> Callable[[], str | None]:
    """A condition that is falsy n times, then returns "done"."""
    looks = iter(range(n, -1, -1))
    return lambda: "done" if next(looks) == 0 else None


async def test_returns_the_first_truthy_result_of_a_plain_condition() -> None:
    assert await eventually(countdown(3), timeout=5, interval=0.01) == "done"


async def test_awaits_an_async_condition() -> None:
    looks: list[int] = []

    async def condition() -> list[int]:
        looks.append(1)
        return looks if len(looks) >= 3 else []

    assert await eventually(condition, timeout=5, interval=0.01) == [1, 1, 1]


async def test_fails_with_the_message_and_the_stacks_log_tail() -> None:
    class Logs:
        def log_tail(self) -> str:
            return "--- gateway\nlast words"

    with pytest.raises(pytest.fail.Exception) as failed:
        await eventually(lambda: False, timeout=0.05, interval=0.01, message="the moon", stack=Logs())
    assert str(failed.value) == "timed out after 0.05s waiting for the moon\n--- gateway\nlast words"


async def test_a_callable_message_reports_the_last_state_seen() -> None:
    seen: list[int] = []

    def condition() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(pytest.fail.Exception, match=r"waiting for three looks \(looked \d+ times\)"):
        await eventually(
            condition, timeout=0.05, interval=0.01, message=lambda: f"three looks (looked {len(seen)} times)"
        )


def test_the_blocking_twin() -> None:
    assert eventually_blocking(countdown(2), timeout=5, interval=0.01) == "done"
    with pytest.raises(pytest.fail.Exception, match="timed out after 0.05s waiting for nothing"):
        eventually_blocking(lambda: 0, timeout=0.05, interval=0.01, message="nothing")
