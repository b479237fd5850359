"""A real Prometheus (Debian's) scrapes a running stack with deploy/observability/'s cluster config and
rules, and sees a task move the counters; the no-progress gauge behind DocsumTaskStalled, on PostgreSQL."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import yaml
from prometheus_client import REGISTRY

from docsum_merger.maintenance import count_tasks
from docsum_shared.db import migrate
from docsum_shared.states import TaskStatus
from tests.fake_llm import FakeLLMServer, free_port
from tests.integration.conftest import SERVICES, Stack
from tests.integration.helpers import (
    eventually,
    eventually_blocking,
    marked_text,
    new_marker,
    submit,
    txt,
    wait_for_task,
)
from tests.prometheus import RULES, binary, config_with_static_pods, pod, rule_expressions

pytestmark = pytest.mark.integration


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen, log: Path) -> None:
        self.url, self.process, self.log = url, process, log

    def log_tail(self) -> str:
        return "--- prometheus\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def api(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return self.api("query", query=expr, **({"time": at} if at is not None else {}))["result"]

    def scalar(self, expr: str, at: float | None = None) -> float:
        """The value of an expression that gives one series (0 when it gives none)."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else 0.0

    def now(self) -> float:
        """Prometheus's own clock, as the time of a query (`time()` at its latest instant)."""
        return float(self.api("query", query="time()")["result"][1])


@pytest.fixture
def prometheus(stack: Stack, tmp_path: Path) -> Iterator[Prometheus]:
    """Debian's prometheus on a free loopback port, scraping every process of `stack` every second as
    the cluster config would scrape pods annotated for it, and evaluating alerts.yml every second."""
    pods = [
        # One pod whose address has no port (none declared) and the others with one: the annotation's port
        # replaces it either way.
        pod("127.0.0.1" if name == "gateway" else "127.0.0.1:1", name, stack.health_ports[name])
        for name in SERVICES
    ]
    pods += [
        pod("127.0.0.1:1", "not-annotated", stack.health_ports["parser"], scrape="false"),
        pod("127.0.0.1:1", "someone-else", stack.health_ports["parser"], part_of="other"),
    ]
    config = config_with_static_pods(pods, scrape_interval="1s")
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(RULES)]
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail("prometheus exited:\n" + server.log_tail())
        try:
            return httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually_blocking(ready, timeout=30, interval=0.2, message="prometheus to be ready", stack=server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_prometheus_scrapes_every_service_and_sees_a_task_move_the_counters(
    stack: Stack, llm: FakeLLMServer, prometheus: Prometheus
) -> None:
    # The pods annotated for scraping and part of docsum are the targets, under their app's name; the others
    # are dropped by the relabelling.
    async def discovered() -> dict[str, Any]:
        targets = prometheus.api("targets")
        return targets if len(targets["activeTargets"]) + len(targets["droppedTargets"]) == len(SERVICES) + 2 else {}

    targets = await eventually(discovered, timeout=30, interval=0.3, message="the targets", stack=prometheus)
    assert sorted(t["labels"]["app"] for t in targets["activeTargets"]) == sorted(SERVICES)
    assert {t["labels"]["instance"] for t in targets["activeTargets"]} == {
        f"127.0.0.1:{stack.health_ports[name]}" for name in SERVICES
    }
    assert len(targets["droppedTargets"]) == 2

    async def every_target_up() -> bool:
        up = {r["metric"]["app"]: r["value"][1] for r in prometheus.query('up{job="docsum"}')}
        return up == dict.fromkeys(SERVICES, "1")

    await eventually(every_target_up, timeout=30, interval=0.5, message="every target up", stack=prometheus)

    # Every alert rule evaluates on the live series without an error (its health is "ok", not "err").
    async def rules_evaluated() -> dict[str, str]:
        rules = {r["name"]: r["health"] for g in prometheus.api("rules")["groups"] for r in g["rules"]}
        return rules if "unknown" not in rules.values() else {}

    health = await eventually(rules_evaluated, timeout=30, interval=0.5, message="the rules evaluated")
    assert health == dict.fromkeys(rule_expressions(), "ok")

    consumed = 'sum(docsum_messages_consumed_total{job="docsum"})'
    chunk_calls = 'sum(docsum_llm_calls_total{job="docsum", app="summarizer", kind="chunk"})'
    llm.llm.configure(latency_s=0.5)  # a task of a few seconds: several scrapes while it runs
    try:
        before_at = prometheus.now()
        before = {expr: prometheus.scalar(expr, before_at) for expr in (consumed, chunk_calls)}
        async with stack.client() as client:
            task_id = await submit(client, [txt("scraped.txt", marked_text(9_000, seed=67, marker=new_marker()))])
            task = await wait_for_task(client, task_id, stack)
    finally:
        llm.llm.configure(latency_s=0.0)
    assert task["status"] == "COMPLETED", task
    chunks = task["documents"][0]["chunks"]["total"]
    assert chunks > 1

    # Scraped after the task's end: the counters grew by what the task did at least (other tests' work
    # on the shared stack can only add to it).
    async def grown() -> float | None:
        after_at = prometheus.now()
        after = {expr: prometheus.scalar(expr, after_at) for expr in (consumed, chunk_calls)}
        ok = after[chunk_calls] - before[chunk_calls] >= chunks and after[consumed] - before[consumed] >= 2 + chunks
        return after_at if ok else None

    after_at = await eventually(grown, timeout=30, interval=0.5, message="the counters to grow", stack=prometheus)

    # Per topic, at the same two instants (a series a task's first message creates is absent, i.e. 0, before).
    def by_topic(at: float) -> dict[str, float]:
        query = 'sum by (topic) (docsum_messages_consumed_total{job="docsum"})'
        return {r["metric"]["topic"]: float(r["value"][1]) for r in prometheus.query(query, at)}

    topics_before, topics_after = by_topic(before_at), by_topic(after_at)
    prefix = stack.env["DOCSUM_TOPIC_PREFIX"]
    for topic, least in (("document-submitted", 1), ("document-parsed", 1), ("chunk-created", chunks)):
        grew = topics_after.get(prefix + topic, 0) - topics_before.get(prefix + topic, 0)
        assert grew >= least, (topic, topics_before, topics_after)
    # The merger's maintenance gauges (set every DOCSUM_MAINTENANCE_INTERVAL_S; their values are tested below).
    statuses = {r["metric"]["status"] for r in prometheus.query('docsum_tasks{app="merger"}', after_at)}
    assert statuses == set(TaskStatus)
    assert len(prometheus.query('docsum_task_stalled_seconds{app="merger"}', after_at)) == 1
    # Every process was scraped all along.
    window = f"{max(1, round(after_at - before_at))}s"
    assert prometheus.scalar(f'min(min_over_time(up{{job="docsum"}}[{window}]))', after_at) == 1


def _stalled() -> float:
    value = REGISTRY.get_sample_value("docsum_task_stalled_seconds")
    assert value is not None
    return value


async def test_the_stalled_gauge_counts_progress_not_redrives(db: asyncpg.Pool) -> None:
    """docsum_task_stalled_seconds, as the merger's maintenance loop sets it: the time since the last
    progress of the most stalled unfinished task. Touching last_active_at (what a re-drive does) is no
    progress; an LLM call is."""
    await migrate(db)
    task_id = f"stalled-{uuid.uuid4().hex[:12]}"
    day = 86_400.0
    # Created long ago (older than any task another test leaves unfinished), active "now".
    await db.execute(
        "INSERT INTO tasks (id, owner, status, created_at, last_active_at) VALUES ($1, 'alice', 'PROCESSING',"
        " now() - interval '1000 days', now())",
        task_id,
    )
    try:
        await count_tasks(db)
        assert _stalled() >= 1000 * day
        await db.execute(
            "INSERT INTO llm_calls (task_id, kind, cache_key, model, cached) VALUES ($1, 'chunk', 'k', 'm', false)",
            task_id,
        )
        await count_tasks(db)
        assert _stalled() < 999 * day
        # A task that is no longer unfinished is not counted, however old.
        await db.execute("DELETE FROM llm_calls WHERE task_id = $1", task_id)
        await db.execute("UPDATE tasks SET status = 'PAUSED' WHERE id = $1", task_id)
        await count_tasks(db)
        assert _stalled() < 999 * day
    finally:
        await db.execute("DELETE FROM llm_calls WHERE task_id = $1", task_id)
        await db.execute("DELETE FROM tasks WHERE id = $1", task_id)
