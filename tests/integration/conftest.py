"""Integration fixtures: the real Kafka broker and PostgreSQL, and the five services as processes.

The broker and the database server are started once by the project's own scripts (idempotent, so a
running `make up` stack is reused). Each test session gets its own database and its own topic and
consumer-group prefix: tests never see the events or rows of a `make up` stack or of another run.
Under pytest-xdist each worker is a session of its own: its own database (dropped by it alone), stand-in
LLM server, stacks and ports (`free_port`: the worker's share), on the broker and database server all
share; a module's fixtures (a second broker, the S3 server on its fixed ports) need --dist loadfile.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import pytest_asyncio

from docsum_shared.db import migrate
from tests.fake_llm import FakeLLM, FakeLLMServer, free_port
from tests.inprocess import InProcessStack, gateway_client
from tests.integration import launcher
from tests.integration.helpers import delete_topics, eventually_blocking, read_topics

ROOT = Path(__file__).resolve().parents[2]
SERVICES = launcher.SERVICES
# The broker the project's scripts start (or the one named by KAFKA_BOOTSTRAP_SERVERS).
OWN_BROKER = not os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or f"127.0.0.1:{os.environ.get('DOCSUM_KAFKA_PORT', '9092')}"
OWN_DATABASE = not os.environ.get("DATABASE_URL")

# The Python processes the tests start (the services of every stack, the CLI, schemathesis, the scripts'
# helpers) keep their bytecode under the state dir. With PYTHONDONTWRITEBYTECODE (set on some machines)
# and a venv that uv installed without bytecode, each of them compiled every module it imports again:
# ~1.3 s of CPU per process, five per stack. This process itself is unaffected (it read both at start).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(os.environ.get("DOCSUM_STATE_DIR") or ROOT / ".run") / "pycache"))


def _script(*args: str) -> str:
    return subprocess.run(
        [str(ROOT / "scripts" / args[0]), *args[1:]], check=True, capture_output=True, text=True
    ).stdout.strip()


def start_infra(database_prefix: str = "docsum_test") -> dict[str, str]:
    """Start (or reuse) Kafka and PostgreSQL; a fresh database of its own (the bench uses it too)."""
    subprocess.run([str(ROOT / "scripts" / "stack.sh"), "infra"], check=True)
    server_url = os.environ.get("DATABASE_URL") or _script("postgres.sh", "url")
    return {
        "DATABASE_URL": asyncio.run(create_database(server_url, database_prefix)),
        "KAFKA_BOOTSTRAP_SERVERS": BOOTSTRAP,
    }


async def create_database(server_url: str, prefix: str) -> str:
    """A new, empty database on the server `server_url` points at (named `prefix`_<random>); its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await _admin(server_url, f'CREATE DATABASE "{name}"')
    base, _, _ = server_url.rpartition("/")
    return f"{base}/{name}"


async def drop_database(url: str) -> None:
    """Drop the database `url` names, its connections closed first."""
    base, _, name = url.rpartition("/")
    await _admin(f"{base}/postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _admin(server_url: str, sql: str) -> None:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def infra() -> Iterator[dict[str, str]]:
    """Kafka and PostgreSQL; a fresh database and topic prefix for this session, the database dropped
    at its end."""
    started = start_infra()
    yield started
    asyncio.run(drop_database(started["DATABASE_URL"]))


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
    processes: dict[str, subprocess.Popen[bytes] | launcher.Forked] = field(default_factory=dict)
    health_ports: dict[str, int] = field(default_factory=dict)  # /healthz, /readyz and /metrics per process
    # The interpreter (and so the environment) the services run in; None: this one, each service forked
    # from the services imported once (tests/integration/launcher.py).
    python: str | None = None

    def start(self, name: str, **env: str) -> None:
        """Start service `name` ("summarizer", or "summarizer-2" for a second replica) as a process: forked
        from the services imported once (tests/integration/launcher.py), or under another interpreter
        `python -m` in it."""
        service = name.partition("-")[0]
        self.health_ports[name] = free_port()
        environment = {**self.env, "DOCSUM_HEALTH_PORT": str(self.health_ports[name]), **env}
        if self.python is None:
            self.processes[name] = launcher.start(service, environment, self.logs / f"{name}.log", ROOT)
            return
        with (self.logs / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [self.python, "-m", f"docsum_{service}"],
                env=environment,
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

    def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM to every process at once, then wait for each (SIGKILL past `timeout`): the processes
        shut down side by side, as they would under an orchestrator, instead of one after another."""
        stop_together([self.processes.pop(name) for name in list(self.processes)], timeout)

    def kill(self, name: str) -> None:
        """SIGKILL: no clean-up, no commit, no goodbye."""
        process = self.processes.pop(name)
        process.kill()
        process.wait()

    def kill_all(self) -> None:
        """SIGKILL to every process at once, then wait for each: the end of a stack nothing is asked of
        any more (a graceful stop waits for work in flight, seconds per stack)."""
        processes = [self.processes.pop(name) for name in list(self.processes)]
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()

    def wait_ready(self, timeout: float = 90.0) -> None:
        def healthy() -> bool:
            if self.processes["gateway"].poll() is not None:
                pytest.fail("the gateway exited:\n" + self.log_tail())
            try:
                return httpx.get(f"{self.gateway_url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        eventually_blocking(healthy, timeout=timeout, interval=0.3, message="the gateway to start", stack=self)

    def client(self, owner: str = "alice") -> httpx.AsyncClient:
        return gateway_client(self.gateway_url, self.keys[owner])

    async def read_topics(self, topics: list[str]) -> list[Any]:
        """Every record now on `topics` (full names; `<topic>.dlq` for dead letters), from the beginning."""
        return await read_topics(self.env, topics)

    def log_of(self, service: str) -> Path:
        """Where process `service` ("gateway", "summarizer-2") logs."""
        return self.logs / f"{service}.log"

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            name = path.stem
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(parts)


# A test about what a setting does runs on either: the same environment, gateway, keys and topics.
AnyStack = Stack | InProcessStack


class StackFactory:
    """Starts stacks of the five services as real processes; each stack has its own topic and consumer
    group prefix, so tests that kill, pause or reconfigure services never disturb one another. A stack's
    topics go with it when it ends (`end`): the broker keeps a directory, open files and timers per
    partition, and a suite's thousands of partitions left behind slowed the broker for every later run."""

    def __init__(
        self, infra: dict[str, str], llm: FakeLLMServer, logs: pytest.TempPathFactory, python: str | None = None
    ) -> None:
        self.infra, self.llm, self.logs, self.python = infra, llm, logs, python
        self.stacks: list[Stack | InProcessStack] = []
        self.ended: set[int] = set()  # id() of the stacks `end` has ended

    def __call__(self, services: tuple[str, ...] = SERVICES, **overrides: str) -> Stack:
        env, keys, port = self.environment(**overrides)
        stack = Stack(env, f"http://127.0.0.1:{port}", keys, self.logs.mktemp("logs"), python=self.python)
        self.stacks.append(stack)
        for name in services:
            stack.start(name)
        if "gateway" in services:
            stack.wait_ready()
        return stack

    def in_process(
        self, services: tuple[str, ...] | None = None, *, twice: bool = False, **overrides: str
    ) -> InProcessStack:
        """The pipeline (`services`' stages: all by default) with these settings in this process
        (tests/inprocess.py): for a test about what a setting does, not about processes or the broker."""
        env, keys, _ = self.environment(**overrides)
        stack = InProcessStack(env, keys, self.logs.mktemp("logs"), twice=twice, services=services)
        self.stacks.append(stack)
        return stack.start()

    def environment(self, **overrides: str) -> tuple[dict[str, str], dict[str, str], int]:
        """A stack's environment (its own topic prefix and keys), its owners' keys, its gateway's port."""
        keys = {"alice": secrets.token_urlsafe(24), "bob": secrets.token_urlsafe(24)}
        port = free_port()
        env = {
            **os.environ,
            **self.infra,
            "DOCSUM_TOPIC_PREFIX": f"test-{uuid.uuid4().hex[:8]}.",
            "DOCSUM_LLM_BACKEND": "openai",
            "DOCSUM_LLM_MODEL": "stand-in-1",
            "OPENAI_BASE_URL": self.llm.base_url,
            "OPENAI_API_KEY": "test-key",
            "DOCSUM_API_KEYS": ",".join(f"{owner}={key}" for owner, key in keys.items()),
            "DOCSUM_GATEWAY_PORT": str(port),
            "DOCSUM_MAX_FILE_BYTES": str(5 * 1024 * 1024),
            "DOCSUM_MAX_FILES_PER_TASK": "25",
            # Fast group membership: a killed consumer's partitions move on within seconds.
            "DOCSUM_SESSION_TIMEOUT_MS": "6000",
            "DOCSUM_HEARTBEAT_INTERVAL_MS": "1000",
            # Every stack shares the session's database, so alice's tasks of all tests would count against
            # one rate; the limit has its own test (test_gateway_keys.py).
            "DOCSUM_TASKS_PER_MINUTE": "0",
            # Likewise the re-drive rate; and tests reconcile tasks they have just written. Both have their
            # own test (test_redrive_storm.py).
            "DOCSUM_REDRIVES_PER_MINUTE": "0",
            "DOCSUM_REDRIVE_IDLE_S": "0",
            **overrides,
        }
        return env, keys, port

    def end(self, stack: Stack | InProcessStack) -> None:
        """A stack nothing is asked of any more: its processes killed (what a stop does is the graceful-stop
        tests' business: a drain waits seconds for work in flight), an in-process one stopped; then its
        topics deleted from the session's broker. Topics are looked up there by the stack's prefix whatever
        broker the stack was pointed at (a proxy in front of it; a broker of a test's own has its own
        prefix, so nothing here, and goes with its state dir). An in-process stack's bus is in memory."""
        if id(stack) in self.ended:
            return
        self.ended.add(id(stack))
        if isinstance(stack, Stack):
            stack.kill_all()
        else:
            stack.stop_all()
        prefix = stack.env["DOCSUM_TOPIC_PREFIX"]
        # A test may start a stack in another's deployment (its prefix): the topics go with the last of them,
        # if any of them was a stack of processes.
        deployment = [s for s in self.stacks if s.env["DOCSUM_TOPIC_PREFIX"] == prefix]
        live = [s for s in deployment if id(s) not in self.ended]
        if not live and any(isinstance(s, Stack) for s in deployment):
            # In a thread of its own: asyncio.run would unset this thread's event loop (pytest-asyncio's).
            session_broker = {**os.environ, **self.infra, "DOCSUM_TOPIC_PREFIX": prefix}
            with ThreadPoolExecutor(1) as aside:
                aside.submit(asyncio.run, delete_topics(session_broker)).result()

    def end_all(self, stacks: list[Stack | InProcessStack]) -> None:
        """`end` each of `stacks`; one that fails to end (its topics, say) leaves none of the others running."""
        failures = []
        for stack in stacks:
            try:
                self.end(stack)
            except Exception as failure:
                failures.append(failure)
        if failures:
            raise failures[0]

    def stop_all(self) -> None:
        """The session's end: every stack not ended yet (the session's and the modules') ended."""
        self.end_all(self.stacks)


def stop_together(processes: list[subprocess.Popen[bytes] | launcher.Forked], timeout: float) -> None:
    """SIGTERM to every one of `processes` at once, then wait for each; SIGKILL past `timeout`."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def make_stack(
    infra: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackFactory]:
    factory = StackFactory(infra, llm, tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture(autouse=True)
def _stacks_end_with_their_test(make_stack: StackFactory) -> Iterator[None]:
    """A stack a test starts for itself stops when the test ends (session and module stacks, made before
    the test, stay). Every stack shares the session's database; each takes only its own deployment's
    tasks (its topic prefix: its admission, round scheduler and maintenance), but a leftover stack's
    processes would still take the machine's CPU and the database's connections from the next tests."""
    before = len(make_stack.stacks)
    yield
    # A graceful stop has its own test (test_crash_recovery.py::test_sigterm_drains_the_summarizer): here
    # the processes need only be gone, so they are killed, not drained (seconds per stack of processes).
    make_stack.end_all(make_stack.stacks[before:])


@pytest.fixture(scope="session")
def stack(make_stack: StackFactory) -> Stack:
    """The stack of processes on Kafka that tests about processes and the broker share: default settings,
    never killed."""
    return make_stack()


@pytest.fixture(scope="session")
def pipeline(make_stack: StackFactory) -> InProcessStack:
    """The in-process pipeline that tests about what docsum does share: default settings."""
    return make_stack.in_process()


def start_s3() -> tuple[dict[str, str], bool]:
    """The S3-compatible server scripts/s3.sh runs, started unless it runs, with a new bucket: the AWS
    variables a client needs and DOCSUM_BLOB_STORE naming the bucket; whether it ran before (the bench
    uses it too)."""
    ran = subprocess.run([str(ROOT / "scripts" / "s3.sh"), "status"], capture_output=True).returncode == 0
    subprocess.run([str(ROOT / "scripts" / "s3.sh"), "start"], check=True)
    env = dict(line.split("=", 1) for line in _script("s3.sh", "env").splitlines())
    bucket = f"docsum-test-{uuid.uuid4().hex[:12]}"
    asyncio.run(create_bucket(env, bucket))
    return {**env, "DOCSUM_BLOB_STORE": f"s3://{bucket}/blobs"}, ran


def stop_s3() -> None:
    subprocess.run([str(ROOT / "scripts" / "s3.sh"), "stop"], check=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, str]]:
    """The S3 server (started for the first test that asks for it, stopped at the session's end if this
    session started it), and a bucket of this session's: `start_s3`."""
    env, ran = start_s3()
    try:
        yield env
    finally:
        if not ran:
            stop_s3()


async def create_bucket(env: dict[str, str], bucket: str) -> None:
    from aiobotocore.session import get_session

    from docsum_shared.blobs import s3_client_config

    async with get_session().create_client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=s3_client_config(),
    ) as client:
        await client.create_bucket(Bucket=bucket)


@pytest_asyncio.fixture(scope="session")
async def repository_db(infra: dict[str, str]) -> AsyncIterator[asyncpg.Pool]:
    """A migrated database of its own for the repository contracts (tests/repositories): no service of
    the session's stacks reads or writes it, so a case's rows change only by the case's own calls."""
    url = await create_database(infra["DATABASE_URL"], "docsum_repositories")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    await migrate(pool)
    yield pool
    await pool.close()
    await drop_database(url)


@pytest_asyncio.fixture(scope="session")
async def db(infra: dict[str, str]) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(infra["DATABASE_URL"], min_size=1, max_size=4)
    yield pool
    await pool.close()


# --- a server of a test's own (the outage and kill -9 tests) ----------------------------------------------


@dataclass(frozen=True)
class Server:
    """A server of the test's own: `script` run with `env` starts and stops it; `settings`, the stack's."""

    script: str
    env: dict[str, str]
    settings: dict[str, str]

    async def run(self, command: str) -> str:
        done = await asyncio.to_thread(
            subprocess.run, [str(ROOT / "scripts" / self.script), command], env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{self.script} {command} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout.strip()


def own_state_dir() -> Path:
    """A state dir for a server of the test's own; traversable by others (as root, scripts/postgres.sh
    runs the server as the postgres user, who could not reach pytest's private temporary dirs)."""
    path = Path(tempfile.mkdtemp(prefix="docsum-outage-"))
    path.chmod(0o755)
    return path


@pytest.fixture
async def own_database() -> AsyncIterator[Server]:
    # DATABASE_URL (an external server for the rest of the suite) would make `start` a no-op.
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    state = own_state_dir()
    env |= {"DOCSUM_STATE_DIR": str(state), "DOCSUM_PG_PORT": str(free_port())}
    server = Server("postgres.sh", env, {})
    try:
        await server.run("start")
        url = await create_database(await server.run("url"), "docsum_outage")
        yield replace(server, settings={"DATABASE_URL": url})
    finally:
        await server.run("stop")
        shutil.rmtree(state, ignore_errors=True)
