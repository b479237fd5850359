"""The services of the tests' stacks, started as forks of a process that imported them once.

Importing a service costs 1–3 s of CPU (pydantic's models, FastAPI, the `openai` package's types), and
the suite starts ~225 service processes: their imports were a large share of the suite's CPU. So each
test process (each pytest-xdist worker) starts multiprocessing's fork server once, which imports the
five services; a service is then a fork of it that runs the service's `__main__` as `python -m` does,
with its stack's environment, the repository as its working directory and its log as stdout and
stderr. It is a process of its own, as under `python -m`: kill -9, SIGSTOP and /proc see its pid, and it
ends with the code `main` gives it.

What a fork cannot show is the start of a service from nothing (its imports, its entry point): the
processes `make up` and `scripts/stack.sh` start are exec'd (tests/integration/test_local_stack.py), as
are the stacks run by another interpreter (`Stack.python`: the built wheels, the bench).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import runpy
import subprocess
import sys
from pathlib import Path

# The environment the fork server started with: what importing the services added to it (a library's
# setdefault at import, as docsum_parser.ocr's thread limit) is kept in every service started from it.
_ENV_AT_START = dict(os.environ)
SERVICES = ("parser", "chunker", "summarizer", "merger", "gateway")  # what a stack runs, and the server preloads


@functools.cache
def _fork_server() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    # This module first: its _ENV_AT_START is the server's environment before the services' imports.
    context.set_forkserver_preload([__name__, *(f"docsum_{name}.__main__" for name in SERVICES)])
    return context


class Forked:
    """A service started by `start`, with what the tests use of a `subprocess.Popen`."""

    def __init__(self, process: multiprocessing.process.BaseProcess, args: list[str]) -> None:
        self._process, self.args = process, args

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._process.exitcode

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def start(service: str, env: dict[str, str], log: Path, cwd: Path) -> Forked:
    """Service `service` ("summarizer") started from the fork server with environment `env`, writing to `log`."""
    process = _fork_server().Process(
        target=_run, args=(f"docsum_{service}", env, str(log), str(cwd)), name=service, daemon=True
    )
    process.start()
    return Forked(process, [sys.executable, "-m", f"docsum_{service}"])


def _run(module: str, env: dict[str, str], log: str, cwd: str) -> None:
    """In the fork: the environment, working directory and output `python -m module` would have, then
    its `__main__` (its imports done already)."""
    added = {key: value for key, value in os.environ.items() if key not in _ENV_AT_START}
    os.environ.clear()
    os.environ.update({**added, **env})
    os.chdir(cwd)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
