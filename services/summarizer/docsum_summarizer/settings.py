"""The summarizer's settings: the shared ones, the LLM's, how long work may stay still, and how a chunk's
calls are retried and leased."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from docsum_shared.settings import LLMSettings, ReconcileSettings

from .schedule import Policy


class SummarizerSettings(LLMSettings, ReconcileSettings):
    # A chunk's call is tried `llm_inplace_attempts` times in place (with back-off), then again after
    # `llm_retry_delay_s` (kept in Postgres, re-announced when due), until `llm_max_attempts` failed in
    # all: then it is FAILED.
    llm_inplace_attempts: int = Field(2, ge=1)
    llm_retry_delay_s: float = Field(30.0, ge=0)
    # A chunk being summarized is leased to one process; a lease not renewed (its holder died) expires.
    lease_ttl_s: float = Field(15.0, ge=1)
    # Batch mode: how often the batch driver looks at the provider's batches; how long a task's queued
    # lines must have stopped arriving before they are sent as a batch; the most requests and bytes
    # of one batch (the provider's limits: 50,000 and 200 MB; 5,000 requests by default, so that a
    # batch failing or expiring sends back a tenth of what it could, and more batches run side by
    # side); how long before a task's deadline what is left goes realtime (a running batch is
    # cancelled, its answered lines kept).
    llm_batch_poll_s: float = Field(30.0, gt=0)
    llm_batch_gather_s: float = Field(10.0, ge=0)
    llm_batch_max_lines: int = Field(5_000, ge=1, le=50_000)
    llm_batch_max_bytes: int = Field(200 * 1024 * 1024, ge=1024, le=200 * 1024 * 1024)
    llm_batch_deadline_margin_s: float = Field(900.0, ge=0)
    # Fair shares between owners (admission.py): at most `admission_window` chunks admitted and not yet
    # finished across every replica (None: the live summarizers' DOCSUM_LLM_MAX_INFLIGHT summed, plus
    # `admission_spare` each, 3 × its own calls in flight when unset: the calls running and some announced
    # behind them, so a call ending has its next chunk in hand while the admission refills the slot, and a
    # newcomer waits behind a few calls, not a backlog; its last slot kept for whoever arrives next), the
    # rest waiting in PostgreSQL, admitted in the fair order every `admission_interval_s` and as soon as a
    # chunk finishes. An admitted chunk no
    # summarizer has leased within `admission_hold_s` (its announcement lost) is announced again.
    admission_window: int | None = Field(None, ge=1)
    admission_spare: int | None = Field(None, ge=0)
    admission_interval_s: float = Field(0.1, gt=0)
    admission_hold_s: float = Field(60.0, gt=0)
    # A task's priority (its options): how many tokens (at its owner's weight) an owner's urgent work may
    # be served ahead of the owner served least, before other owners' normal work (so urgent is never a
    # way around fairness: at most this much early); how long background work waits for idle capacity
    # before it competes as normal work (so it is never starved).
    urgent_credit_tokens: float = Field(16_000.0, ge=0)
    background_after_s: float = Field(300.0, ge=0)
    # The order of admission: "fair" (the shares above) or "fifo", the oldest ready chunk first whoever's
    # it is, weights and priorities unused: the order of the broker alone, first in, first out. Within
    # the same window; the counters are still charged, so that going back to "fair" starts from them.
    admission_order: Literal["fair", "fifo"] = "fair"

    def window(self, live_inflight: Sequence[int] = ()) -> int:
        """The chunks admitted and unfinished at once: `admission_window` when set, else what the live
        summarizers run at once (their DOCSUM_LLM_MAX_INFLIGHT each, as they recorded it) plus
        `admission_spare` each; this process's own when none is recorded yet."""
        if self.admission_window is not None:
            return self.admission_window
        spare = self.admission_spare
        return sum(n + (3 * n if spare is None else spare) for n in live_inflight or [self.llm_max_inflight])

    def policy(self) -> Policy:
        return Policy(urgent_credit=self.urgent_credit_tokens, background_after_s=self.background_after_s)
