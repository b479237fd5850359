"""The merger's settings: the shared ones, the LLM's, how long work may stay still, and its maintenance (which
sweeps the blob store's orphans)."""

from __future__ import annotations

from pydantic import Field

from docsum_shared.settings import BlobSettings, LLMSettings, ReconcileSettings


class MergerSettings(LLMSettings, ReconcileSettings, BlobSettings):
    # Maintenance: unfinished tasks idle longer than the TTL expire; those idle for `reconcile_idle_s`
    # are re-driven from Postgres (start-up and every `maintenance_interval_s`).
    task_ttl_s: float = Field(24 * 3600.0, gt=0)
    maintenance_interval_s: float = Field(30.0, gt=0)
