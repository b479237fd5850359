"""Integration fixtures: the real Kafka broker and PostgreSQL, and the five services as processes.

The broker and the database server are started once by the project's own scripts (idempotent, so a
running `make up` stack is reused). Each test session gets its own database and its own topic and
consumer-group prefix: tests never see the events or rows of a `make up` stack or of another run.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio

from tests.fake_llm import FakeLLM, FakeLLMServer, free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("parser", "chunker", "summarizer", "merger", "gateway")
FINAL = {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED", "EXPIRED"}


def _script(*args: str) -> str:
    return subprocess.run(
        [str(ROOT / "scripts" / args[0]), *args[1:]], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="session")
def infra() -> dict[str, str]:
    """Start (or reuse) Kafka and PostgreSQL; a fresh database and topic prefix for this session."""
    subprocess.run([str(ROOT / "scripts" / "stack.sh"), "infra"], check=True)
    server_url = os.environ.get("DATABASE_URL") or _script("postgres.sh", "url")
    database = f"docsum_test_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await asyncpg.connect(server_url)
        try:
            await conn.execute(f'CREATE DATABASE "{database}"')
        finally:
            await conn.close()

    asyncio.run(create())
    base, _, _ = server_url.rpartition("/")
    return {
        "DATABASE_URL": f"{base}/{database}",
        "KAFKA_BOOTSTRAP_SERVERS": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        "DOCSUM_TOPIC_PREFIX": f"test-{uuid.uuid4().hex[:8]}.",
    }


@pytest.fixture(scope="session")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@dataclass
class Stack:
    env: dict[str, str]
    gateway_url: str
    keys: dict[str, str]  # owner -> API key
    logs: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", f"docsum_{name}"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def stop(self, name: str, timeout: float = 20.0) -> None:
        process = self.processes.pop(name)
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def client(self, owner: str = "alice") -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.gateway_url, headers={"Authorization": f"Bearer {self.keys[owner]}"}, timeout=60
        )

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for name in SERVICES:
            path = self.logs / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts)


@pytest.fixture(scope="session")
def stack(infra: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    keys = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}
    port = free_port()
    env = {
        **os.environ,
        **infra,
        "DOCSUM_LLM_BACKEND": "openai",
        "DOCSUM_LLM_MODEL": "stand-in-1",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "DOCSUM_API_KEYS": ",".join(f"{owner}={key}" for owner, key in keys.items()),
        "DOCSUM_GATEWAY_PORT": str(port),
        "DOCSUM_MAX_FILE_BYTES": str(5 * 1024 * 1024),
        "DOCSUM_MAX_FILES_PER_TASK": "25",
    }
    stack = Stack(env, f"http://127.0.0.1:{port}", keys, tmp_path_factory.mktemp("logs"))
    for name in SERVICES:
        stack.start(name)
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{stack.gateway_url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or stack.processes["gateway"].poll() is not None:
            pytest.fail("the gateway did not start:\n" + stack.log_tail())
        time.sleep(0.3)
    yield stack
    for name in list(stack.processes):
        stack.stop(name)


@pytest_asyncio.fixture(scope="session")
async def db(infra: dict[str, str]) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(infra["DATABASE_URL"], min_size=1, max_size=4)
    yield pool
    await pool.close()


async def wait_for_task(client: httpx.AsyncClient, task_id: str, stack: Stack, timeout: float = 180.0) -> dict:
    """Poll until the task is final (bounded), failing with the services' logs otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = await client.get(f"/v1/tasks/{task_id}")
        response.raise_for_status()
        task = response.json()
        if task["status"] in FINAL:
            return task
        await asyncio.sleep(0.3)
    pytest.fail(f"task {task_id} not finished after {timeout}s: {task}\n{stack.log_tail()}")
