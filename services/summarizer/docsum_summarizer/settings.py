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
