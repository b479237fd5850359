"""The summarizer's settings: the shared ones, the LLM's, how long work may stay still, and how a chunk's
calls are retried and leased."""

from __future__ import annotations

from pydantic import Field

from docsum_shared.settings import LLMSettings, ReconcileSettings


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
