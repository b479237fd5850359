"""The cluster-wide rate limiter on the real database: calls are paced, refusals slow everyone."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import pytest

from docsum_shared.db import migrate
from docsum_shared.ratelimit import RateLimiter

pytestmark = pytest.mark.integration


async def test_two_limiters_share_one_pace(db: asyncpg.Pool) -> None:
    await migrate(db)
    key = f"test-{uuid.uuid4().hex}"
    first, second = RateLimiter(db, key, rpm=600, tpm=None), RateLimiter(db, key, rpm=600, tpm=None)
    started = time.monotonic()
    reservations = await asyncio.gather(*(limiter.acquire(10) for limiter in (first, second) * 10))
    elapsed = time.monotonic() - started
    # 20 calls at 10 per second: the slots are 0.1 s apart, across both limiters. On the database's clock
    # (where they are booked): a wait is from its call's booking, and on a busy machine the bookings of
    # calls made together are spread over a tenth of a second and more.
    slots = sorted(r.slot_at for r in reservations)
    assert slots[-1] - slots[0] >= 1.8 and elapsed >= 1.8
    assert all(b - a >= 0.05 for a, b in zip(slots, slots[1:], strict=False))
    assert max(r.waited_s for r in reservations) > 0  # the calls waited for their slots


async def test_a_refusal_halves_the_rate_and_successes_win_it_back(db: asyncpg.Pool) -> None:
    await migrate(db)
    key = f"test-{uuid.uuid4().hex}"
    limiter = RateLimiter(db, key, rpm=6000, tpm=None)
    reservation = await limiter.acquire(10)
    await limiter.refused(retry_after_s=0.5)
    assert await db.fetchval("SELECT factor FROM llm_rate_limits WHERE key = $1", key) == 0.5
    after_refusal = await limiter.acquire(10)
    assert after_refusal.waited_s >= 0.4  # the provider's Retry-After holds for everybody
    await limiter.settle(reservation, 10)
    assert await db.fetchval("SELECT factor FROM llm_rate_limits WHERE key = $1", key) > 0.5


async def test_tokens_are_paced_and_corrected_by_actual_usage(db: asyncpg.Pool) -> None:
    await migrate(db)
    key = f"test-{uuid.uuid4().hex}"
    limiter = RateLimiter(db, key, rpm=None, tpm=60_000)  # 1,000 tokens a second
    big = await limiter.acquire(2_000)
    assert big.waited_s < 0.5
    await limiter.settle(big, 200)  # it used far less: most of its booking is given back
    after = await limiter.acquire(100)
    assert after.waited_s < 0.5
