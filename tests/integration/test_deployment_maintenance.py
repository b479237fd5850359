"""The merger's maintenance when deployments share one database: each expires and re-drives only its own
tasks, onto its own topics (another deployment's re-driven there would be worked by this one's services)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from docsum_merger.maintenance import maintain_once
from docsum_merger.settings import MergerSettings
from docsum_shared.states import DocumentStatus, TaskStatus
from tests.integration.test_admission_repository import Published

pytestmark = pytest.mark.integration

TTL_S = 86_400.0
IDLE_S = 60.0


async def _task(db: asyncpg.Pool, deployment: str, idle_s: float) -> str:
    """An unfinished task of `deployment`, idle `idle_s`, with one document parsed and waiting to be cut."""
    task_id = f"task-{uuid.uuid4().hex[:12]}"
    await db.execute(
        "INSERT INTO tasks (id, owner, status, deployment, last_active_at)"
        " VALUES ($1, 'alice', $2, $3, now() - make_interval(secs => $4))",
        task_id, TaskStatus.PROCESSING, deployment, idle_s,
    )  # fmt: skip
    await db.execute(
        "INSERT INTO documents (id, task_id, filename, status, text_chars, size_level, updated_at)"
        " VALUES ($1, $2, 'd.txt', $3, 100, 'SMALL', now() - make_interval(secs => $4))",
        f"{task_id}-d", task_id, DocumentStatus.CHUNKING, idle_s,
    )  # fmt: skip
    return task_id


async def test_each_deployment_expires_and_redrives_only_its_own_tasks(repository_db: asyncpg.Pool) -> None:
    east, west = f"east-{uuid.uuid4().hex[:6]}.", f"west-{uuid.uuid4().hex[:6]}."
    stuck = {d: await _task(repository_db, d, 10 * IDLE_S) for d in (east, west)}
    stale = {d: await _task(repository_db, d, 2 * TTL_S) for d in (east, west)}
    settings = MergerSettings(_env_file=None, topic_prefix=west, task_ttl_s=TTL_S, reconcile_idle_s=IDLE_S)  # type: ignore[call-arg]
    published = Published()
    await maintain_once(repository_db, published, settings)

    statuses = dict(
        await repository_db.fetch("SELECT id, status FROM tasks WHERE id = ANY($1::text[])", [*stale.values()])
    )
    assert statuses == {stale[west]: TaskStatus.EXPIRED, stale[east]: TaskStatus.PROCESSING}
    touched = {getattr(e, "task_id", None) for e in published.events}
    assert stuck[west] in touched and stale[west] in touched  # re-driven, and its end announced
    assert not touched & {stuck[east], stale[east]}, "another deployment's tasks published on west's topics"
