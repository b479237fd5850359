"""The pipeline in the tests' own process: the plan run by the in-process runner, in a thread and event loop
of its own (the tests' loops come and go with each test), on the session's PostgreSQL.

A test that starts a stack only to change a setting gets an `InProcessStack`: the same environment as a
stack of processes (the same strings, read by the same settings classes), the gateway at `gateway_url`
with the same keys, and no process to start, kill or wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvloop
from docsum_pipeline import plan
from docsum_pipeline.inprocess import Bus, BusRecord, run_in_process

from docsum_cli.client import KEEPALIVE_EXPIRY_S
from docsum_shared.settings import Settings

_ENVIRON = threading.Lock()  # os.environ is the process's: one stack's settings are read at a time


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    with _ENVIRON:
        before = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(before)


def settings_from(env: Mapping[str, str]) -> dict[str, Settings]:
    """Each stage's settings, read from `env` as its service reads them from its environment."""
    with _environment(env):
        return {stage.name: stage.settings() for stage in plan.stages()}


class _Lines(logging.Handler):
    """The log lines of one stack's thread, to its log file."""

    def __init__(self, path: Path, thread: int) -> None:
        super().__init__(logging.INFO)
        self.path, self.thread = path, thread
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.thread

    def emit(self, record: logging.LogRecord) -> None:
        with self.path.open("a") as out:
            out.write(self.format(record) + "\n")



def gateway_client(base_url: str, key: str) -> httpx.AsyncClient:
    """A test's client of the gateway at `base_url`, with the API key `key`: it lets an idle connection
    go before the gateway does, as the CLI's does (a test's client idle while it waits for another
    owner's task, then asking for its own, met the race that KEEPALIVE_EXPIRY_S says)."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
        limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
    )


@dataclass
class InProcessStack:
    """The whole pipeline running in a thread of this process, until `stop_all`."""

    env: dict[str, str]
    keys: dict[str, str]  # owner -> API key
    logs: Path
    twice: bool = False  # deliver every event twice
    services: tuple[str, ...] | None = None  # the stages to run (None: the whole plan)
    gateway_url: str = ""
    bus: Bus | None = None
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _ended: Future[None] = field(default_factory=Future)

    def start(self, timeout: float = 60.0) -> InProcessStack:
        settings = settings_from(self.env)
        started: Future[str] = Future()

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            try:
                stages = [s for s in plan.stages() if self.services is None or s.name in self.services]
                async with run_in_process(
                    lambda stage: settings[stage.name], stages=stages, twice=self.twice, keep=True
                ) as running:
                    self.bus = running.bus
                    started.set_result(running.url or "")
                    await self._stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        def thread() -> None:
            handler = _Lines(self.logs / "pipeline.log", threading.get_ident())
            root = logging.getLogger()
            root.addHandler(handler)
            if root.level > logging.INFO or root.level == logging.NOTSET:
                root.setLevel(logging.INFO)
            try:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    runner.run(main())
                self._ended.set_result(None)
            except BaseException as exc:  # noqa: BLE001 - shown by stop_all
                self._ended.set_exception(exc)
            finally:
                root.removeHandler(handler)

        self._thread = threading.Thread(target=thread, name="pipeline", daemon=True)
        self._thread.start()
        self.gateway_url = started.result(timeout)
        return self

    def client(self, owner: str = "alice") -> httpx.AsyncClient:
        return gateway_client(self.gateway_url, self.keys[owner])

    def stop_all(self, timeout: float = 30.0) -> None:
        if self._loop is None or self._stop is None or self._thread is None:
            return
        loop, stop, self._loop = self._loop, self._stop, None
        with contextlib.suppress(RuntimeError):  # its loop ended already
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the in-process pipeline did not stop within {timeout}s:\n{self.log_tail()}")
        self._ended.result()

    def log_of(self, service: str) -> Path:
        """Where `service`'s lines are logged: every stage's, in the one file of this stack's thread."""
        return self.logs / "pipeline.log"

    def log_tail(self, lines: int = 40) -> str:
        path = self.logs / "pipeline.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "--- pipeline (in-process)\n" + "\n".join(text.splitlines()[-lines:])

    async def read_topics(self, topics: list[str]) -> list[BusRecord]:
        """Every message published on `topics` (full names; `<topic>.dlq` for dead letters), in order."""
        kept = self.bus.kept if self.bus is not None else None
        return [record for record in list(kept or []) if record.topic in topics]
