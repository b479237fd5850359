"""One request rate and one token rate for the whole cluster, paced through Postgres.

Every LLM call of every replica books a start time in one row (the generic cell rate algorithm:
each booking pushes a "theoretical arrival time" on by 60/RPM seconds, and by tokens × 60/TPM on the
token side), then sleeps until its slot. Calls are thus spaced evenly at the configured rates, with
no bursts for the provider to refuse. Tokens are booked by estimate and corrected by the usage the
provider reports. A 429 slows everybody down (the rate factor halves, and the provider's Retry-After
pushes every slot back); each success wins a little of it back — additive increase, multiplicative
decrease. Postgres is already shared by every replica, so no new component is needed for this.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import asyncpg

log = logging.getLogger(__name__)

_MIN_FACTOR = 0.05
_DECREASE = 0.5
_INCREASE = 0.02  # per successful call


@dataclass(frozen=True)
class Reservation:
    tokens: int
    waited_s: float
    # When the slot booked began, in seconds since the epoch on the database's clock, the one every limiter
    # of the key books on: the pace itself, whatever the delay between a call and its booking.
    slot_at: float


class RateLimiter:
    def __init__(self, pool: asyncpg.Pool, key: str, *, rpm: float | None, tpm: float | None) -> None:
        self.pool = pool
        self.key = key
        self.request_interval = 60.0 / rpm if rpm else 0.0
        self.token_interval = 60.0 / tpm if tpm else 0.0
        self._ready = False

    async def _ensure_row(self) -> None:
        if not self._ready:
            await self.pool.execute(
                "INSERT INTO llm_rate_limits (key) VALUES ($1) ON CONFLICT (key) DO NOTHING", self.key
            )
            self._ready = True

    async def acquire(self, tokens: int) -> Reservation:
        """Book the next slot for one call of about `tokens` tokens, and wait for it."""
        await self._ensure_row()
        booked = await self.pool.fetchrow(
            "WITH booked AS ("
            " UPDATE llm_rate_limits SET"
            "  request_tat = greatest(request_tat, clock_timestamp()) + make_interval(secs => $2::float8 / factor),"
            "  token_tat = greatest(token_tat, clock_timestamp())"
            "   + make_interval(secs => $3::float8 * $4::float8 / factor)"
            " WHERE key = $1"
            " RETURNING request_tat - make_interval(secs => $2::float8 / factor) AS request_slot,"
            "  token_tat - make_interval(secs => $3::float8 * $4::float8 / factor) AS token_slot)"
            " SELECT greatest(0, extract(epoch FROM greatest(request_slot, token_slot) - clock_timestamp()))::float8"
            "  AS wait_s, extract(epoch FROM greatest(request_slot, token_slot))::float8 AS slot_at"
            " FROM booked",
            self.key,
            self.request_interval,
            float(tokens),
            self.token_interval,
        )
        wait_s = float(booked["wait_s"] or 0.0)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        return Reservation(tokens, wait_s, float(booked["slot_at"]))

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """Correct the token booking by what the call really used, and win back some rate."""
        await self.pool.execute(
            "UPDATE llm_rate_limits"
            " SET token_tat = token_tat + make_interval(secs => $2::float8 * $3::float8 / factor),"
            " factor = least(1.0, factor + $4::float8) WHERE key = $1",
            self.key,
            float(used_tokens - reservation.tokens),
            self.token_interval,
            _INCREASE,
        )

    async def refused(self, retry_after_s: float | None) -> None:
        """The provider said 429: halve the rate for everybody and respect its Retry-After."""
        await self.pool.execute(
            "UPDATE llm_rate_limits SET factor = greatest($2::float8, factor * $3::float8),"
            " request_tat = greatest(request_tat, clock_timestamp() + make_interval(secs => $4::float8))"
            " WHERE key = $1",
            self.key,
            _MIN_FACTOR,
            _DECREASE,
            float(retry_after_s or 0.0),
        )
        log.info("rate limit %s: provider refused a call; slowing down", self.key)
