"""One-shot migration: `python -m docsum_shared.migrations` applies the migrations not applied yet, then exits 0.

Kubernetes runs it as a Job and compose as a one-shot service before the services start. The services
still migrate at start-up (under the same lock), so this is an ordering convenience, never a requirement.
The exit code is 0 when the database is at the newest migration, 1 when it could not be migrated.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from ..db import connect_pool, migrate
from ..settings import Settings, service_settings

log = logging.getLogger("docsum_shared.migrations")


async def run(database_url: str, *, wait_s: float) -> list[str]:
    """Apply what is missing (waiting up to `wait_s` for the database); the names of the migrations applied."""
    pool = await connect_pool(database_url, max_size=1, wait_s=wait_s)
    try:
        return await migrate(pool)
    finally:
        await pool.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = service_settings("migrations", Settings)
    try:
        applied = asyncio.run(run(settings.database_url, wait_s=120.0))
    except Exception as exc:  # one line, no traceback: the Job's log says why
        print(f"docsum-migrations: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    log.info("database is up to date (%d migration(s) applied now)", len(applied))


if __name__ == "__main__":
    main()
