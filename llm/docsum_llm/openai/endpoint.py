"""What docsum knows of an LLM endpoint and model: its input budget, configured or learned.

A configured budget (`DOCSUM_LLM_CONTEXT_TOKENS`) is an upper bound. A provider that refuses a
prompt as too long teaches a lower one, stored in Postgres (`llm_endpoints`), so every replica plans
under it within `REFRESH_S` and a restart keeps it. A learned budget only ever goes down.
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from docsum_shared.errors import ContextLimitExceeded

from ..budget import TokenCalibration, lowered_budget

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # how stale another replica's lesson may be here


class EndpointLimits:
    def __init__(self, pool: asyncpg.Pool, key: str, *, configured: int | None) -> None:
        self.pool = pool
        self.key = key
        self.configured = configured
        self.learned: int | None = None
        self.learned_from: str | None = None
        self._read_at = -REFRESH_S
        # One read at a time: the calls that find the budget stale while it is being read wait for that
        # read, not each send their own (a summarizer's 32 handlings asked at once, every REFRESH_S).
        self._reading = asyncio.Lock()

    def effective(self) -> int | None:
        values = [v for v in (self.configured, self.learned) if v is not None]
        return min(values) if values else None

    async def budget(self) -> int | None:
        """The input budget to plan under now, in tokens (None: unlimited)."""
        if self._stale():
            async with self._reading:
                if self._stale():
                    row = await self.pool.fetchrow(
                        "SELECT context_tokens, learned_from FROM llm_endpoints WHERE key = $1", self.key
                    )
                    self.learned, self.learned_from = (
                        (row["context_tokens"], row["learned_from"]) if row else (None, None)
                    )
                    self._read_at = time.monotonic()
        return self.effective()

    def _stale(self) -> bool:
        return time.monotonic() - self._read_at >= REFRESH_S

    async def learn(
        self,
        refusal: ContextLimitExceeded,
        refused_estimate: int,
        reserve: int,
        calibration: TokenCalibration | None = None,
    ) -> bool:
        """Take the lesson of a refusal of a prompt of `refused_estimate` tokens (our estimate) that kept
        `reserve` tokens for its answer; True when the request should be planned again (the budget is
        lower now than the one it was planned under), False when it cannot shrink."""
        if refusal.requested is not None and calibration is not None:
            calibration.observe(refused_estimate, refusal.requested)
        current = await self.budget()
        if current is not None and refused_estimate + reserve > current:
            return True  # planned under an older, larger budget: plan again under today's
        new = lowered_budget(current, refused_estimate + reserve, stated_limit=refusal.limit)
        if new is None:
            return False
        learned = await self._lower_to(new, f"refused: {str(refusal)[:300]}")
        log.warning(
            "%s: the provider refused a prompt of about %d tokens as too long; input budget now %d tokens",
            self.key,
            refused_estimate,
            learned,
        )
        return True

    async def observe(self, context_tokens: int, source: str) -> int:
        """The window the endpoint states about itself (a probe): the budget goes down to it, never up."""
        learned = await self._lower_to(context_tokens, source)
        log.info("%s: the endpoint says its context window is %d tokens (%s)", self.key, context_tokens, source)
        return learned

    async def _lower_to(self, tokens: int, source: str) -> int:
        learned = await self.pool.fetchval(
            "INSERT INTO llm_endpoints (key, context_tokens, learned_from) VALUES ($1, $2, $3)"
            " ON CONFLICT (key) DO UPDATE SET"
            "  context_tokens = least(llm_endpoints.context_tokens, EXCLUDED.context_tokens),"
            "  learned_from = CASE WHEN llm_endpoints.context_tokens IS NULL"
            "   OR EXCLUDED.context_tokens < llm_endpoints.context_tokens"
            "   THEN EXCLUDED.learned_from ELSE llm_endpoints.learned_from END,"
            "  updated_at = now()"
            " RETURNING context_tokens",
            self.key,
            tokens,
            source,
        )
        self.learned, self._read_at = learned, time.monotonic()
        if learned == tokens:
            self.learned_from = source
        return int(learned)

    def describe(self) -> str:
        """The budget and where it comes from, for error messages a user can act on."""
        budget = self.effective()
        if budget is None:
            return "no known input budget"
        if self.learned is not None and (self.configured is None or self.learned < self.configured):
            how = (
                "stated by the endpoint"
                if not (self.learned_from or "").startswith("refused")
                else "learned from the provider's refusal"
            )
            return f"an input budget of {budget} tokens, {how}"
        return f"an input budget of {budget} tokens (DOCSUM_LLM_CONTEXT_TOKENS)"
