"""The merger service: wiring only (the handlers are in handlers.py, expiry and reconcile in maintenance.py)."""

from __future__ import annotations

import asyncpg

from docsum_shared.consumer import Background, Consumer, run_service, serve
from docsum_shared.summarizers import Summarizing

from .handlers import Deps, handlers
from .maintenance import maintain_forever
from .repository import MergeRepository
from .settings import MergerSettings


def consumers(settings: MergerSettings, pool: asyncpg.Pool) -> list[Consumer]:
    llm = Summarizing.from_settings(settings, pool)
    deps = Deps(MergeRepository(pool, settings), llm, settings)
    return [Consumer(handlers.bind(deps), close=llm.aclose, background=maintenance(settings, pool))]


def maintenance(settings: MergerSettings, pool: asyncpg.Pool) -> Background:
    """Expiry and reconcile run beside the merger (one process at a time, under a database lock)."""
    return lambda publish: maintain_forever(pool, publish, settings)


def main() -> None:
    run_service(lambda stop: serve("merger", stop, MergerSettings, consumers))


if __name__ == "__main__":
    main()
