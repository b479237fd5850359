"""The local stack as `make up` and `make observe` start it: every process's /metrics answers at the URL `up`
prints, Prometheus scrapes all of them with the shipped rules, and `down` leaves nothing listening.

The stack runs from a state folder of its own, on this session's database and broker (stack.sh starts no
infrastructure when DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS are set), with its own ports.
"""

from __future__ import annotations

import ctypes
import functools
import os
import random
import re
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fake_llm import free_port
from tests.integration.conftest import ROOT, SERVICES
from tests.integration.helpers import eventually_blocking

pytestmark = pytest.mark.integration

STACK = str(ROOT / "scripts" / "stack.sh")


def free_range(count: int) -> int:
    """The first of `count` consecutive ports nothing listens on, below the kernel's ephemeral range (where
    free_port's ports come from, so the two never meet)."""
    while True:
        base = random.randrange(20_000, 30_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_prints_metrics_that_answer_and_observe_scrapes_them(infra: dict[str, str], tmp_path: Path) -> None:
    base = free_range(len(SERVICES))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DOCSUM_")},
        **infra,
        "DOCSUM_STATE_DIR": str(tmp_path / "state"),
        "DOCSUM_TOPIC_PREFIX": f"test-{uuid.uuid4().hex[:8]}.",
        "DOCSUM_GATEWAY_PORT": str(free_port()),
        "DOCSUM_HEALTH_PORT_BASE": str(base),
        "DOCSUM_PROMETHEUS_PORT": str(free_port()),
        # Every second: the first scrape of each process comes within a second of Prometheus's start, not
        # five (what is tested is that it scrapes them all with the rules, not how often).
        "DOCSUM_PROMETHEUS_SCRAPE_S": "1",
    }

    def stack(*args: str) -> str:
        done = subprocess.run([STACK, *args], env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        printed = stack("up")
        urls = dict(re.findall(r"^  (\S+) +(http://127\.0\.0\.1:\d+/metrics)$", printed, re.MULTILINE))
        assert sorted(urls) == sorted(SERVICES), printed
        ports = [int(url.split(":")[2].split("/")[0]) for url in urls.values()]
        assert sorted(ports) == list(range(base, base + len(SERVICES)))
        for name, url in urls.items():
            metrics = httpx.get(url, timeout=5)
            assert metrics.status_code == 200, (name, metrics.text)
            assert "docsum_" in metrics.text, name
            assert httpx.get(url.replace("/metrics", "/healthz"), timeout=5).status_code == 200

        observed = stack("observe")
        prometheus = re.search(r"Prometheus at (http://127\.0\.0\.1:\d+)", observed)
        assert prometheus, observed

        def all_up() -> list[dict] | None:
            targets = httpx.get(f"{prometheus[1]}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            up = [t for t in targets if t["health"] == "up"]
            return targets if len(up) == len(SERVICES) else None

        targets = eventually_blocking(all_up, timeout=60, interval=0.5, message="Prometheus to scrape every process")
        assert {t["labels"]["app"] for t in targets} == set(SERVICES)
        assert all(t["labels"]["job"].startswith("docsum") for t in targets)  # what the alert rules select
        groups = httpx.get(f"{prometheus[1]}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert any(rule["name"] == "DocsumServiceDown" for group in groups for rule in group["rules"])
        prometheus_port = int(prometheus[1].rsplit(":", 1)[1])
    finally:
        subprocess.run([STACK, "down"], env=env, capture_output=True, timeout=120)

    for port in [*ports, int(env["DOCSUM_GATEWAY_PORT"]), prometheus_port]:
        assert not listening(port), f"127.0.0.1:{port} still listens after down"


PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphaned descendants become this process's children


def _subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    """A process's state letter (R, S, Z...) and parent, from /proc; None once it is reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return fields[0], int(fields[1])


def test_up_right_after_a_kill_9_starts_the_services_again(infra: dict[str, str], tmp_path: Path) -> None:
    """Every service killed with SIGKILL and `up` run at once, as a supervisor (or a person) restarting
    does: the killed processes are zombies until their parent reaps them, and kill -0 still answers for
    them. This test is their parent (a child subreaper, as a supervisor is) and reaps them only after
    `up`. Besides, one pid file names a live program that is not the service (a reused pid). `up` starts
    every service again and the gateway answers; neither `up` nor `down` signals the other program."""
    state = tmp_path / "state"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DOCSUM_")},
        **infra,
        "DOCSUM_STATE_DIR": str(state),
        "DOCSUM_TOPIC_PREFIX": f"test-{uuid.uuid4().hex[:8]}.",
        "DOCSUM_GATEWAY_PORT": str(free_port()),
        "DOCSUM_HEALTH_PORT_BASE": str(free_range(len(SERVICES))),
    }

    def stack(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([STACK, *args], env=env, capture_output=True, text=True, timeout=240)

    def pids() -> dict[str, int]:
        return {name: int((state / f"{name}.pid").read_text()) for name in SERVICES}

    other = subprocess.Popen(["sleep", "600"])  # a program that got a dead service's pid
    ours: set[int] = set()
    _subreaper(True)
    try:
        first = stack("up")
        assert first.returncode == 0, first.stdout + first.stderr
        killed = pids()
        ours |= set(killed.values())
        assert all((_state_and_parent(pid) or ("", 0))[1] == os.getpid() for pid in killed.values())
        for pid in killed.values():
            os.kill(pid, signal.SIGKILL)
        eventually_blocking(
            lambda: all((_state_and_parent(pid) or ("",))[0] == "Z" for pid in killed.values()),
            timeout=30,
            message="the killed services to be zombies",
        )
        (state / "chunker.pid").write_text(f"{other.pid}\n")

        again = stack("up")
        assert again.returncode == 0, again.stdout + again.stderr
        assert httpx.get(f"http://127.0.0.1:{env['DOCSUM_GATEWAY_PORT']}/healthz", timeout=5).status_code == 200
        started = pids()
        ours |= set(started.values())
        for name, pid in started.items():
            assert pid != killed[name] and pid != other.pid, name
            assert (_state_and_parent(pid) or ("Z",))[0] != "Z", name
            assert f"docsum_{name}" in Path(f"/proc/{pid}/cmdline").read_text(), name
        assert not (state / "chunker.pid").read_text().startswith(f"{other.pid}\n")
    finally:
        down = stack("down")
        _subreaper(False)
        for pid in ours:  # the killed ones, and those `down` stopped: this test's children, reaped here
            eventually_blocking(functools.partial(_reaped, pid), timeout=30, message=f"process {pid} to end")
    assert down.returncode == 0, down.stdout + down.stderr
    assert other.poll() is None, "a program that got a service's pid was signalled"
    other.kill()
    other.wait()


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not (or no longer) this process's child
    return done == pid
