"""Where a measure's time goes: py-spy sampling each service process while the measure runs.

`bench/run.py --profile` wraps every measure in `Profiles.during(name, processes)`: one `py-spy record`
per process (100 samples a second, idle threads left out, so a process's samples ÷ 100 ≈ the seconds it
spent running Python), written as collapsed stacks to `bench/results/profiles/<measure>-<service>.txt`.
`summary` reads them back: busy seconds per service and the functions that took the most of them
(inclusive), which is what bench/README.md's "Where the time goes" quotes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

RATE = 100
# Frames worth naming: ours, and the libraries between our code and the wire.
_NAMED = re.compile(r"docsum_\w+|aiokafka|asyncpg|pydantic|openai|httpx|httpcore|json|uvicorn|fastapi|starlette")


@dataclass
class Profile:
    service: str
    samples: int
    inclusive: Counter[str]

    @property
    def busy_s(self) -> float:
        return self.samples / RATE

    def top(self, n: int = 8) -> list[tuple[str, float]]:
        """The n functions with the most samples under them, as shares of the process's samples."""
        if not self.samples:
            return []
        return [(fn, count / self.samples) for fn, count in self.inclusive.most_common(n)]


def read(path: Path, service: str) -> Profile:
    samples = 0
    inclusive: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        seen = set()
        for frame in stack.split(";"):
            # "function (module/file.py:line)" → "function (module/file.py)"
            name = re.sub(r":\d+\)$", ")", frame.strip())
            if _NAMED.search(name) and name not in seen:
                seen.add(name)
                inclusive[name] += count
    return Profile(service, samples, inclusive)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used, with its waited-for children's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _state_pid(name: str) -> int | None:
    """The pid our own scripts wrote for the broker or the database server (scripts/kafka.sh, postgres.sh)."""
    state = Path(os.environ.get("DOCSUM_STATE_DIR", Path(__file__).resolve().parents[1] / ".run"))
    try:
        return int((state / f"{name}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far: each service (with its worker), the stand-in provider and client (this
    process), PostgreSQL (its server and every backend), Kafka (the broker's JVM), the whole machine."""
    taken: dict[str, float] = {}
    for service, pid in pids.items():
        taken[service] = _proc_cpu(pid) + sum(_proc_cpu(c) for c in _children(pid))
    taken["stand-in + client"] = _proc_cpu(os.getpid())
    broker, database = _state_pid("kafka"), _state_pid("postgres")
    taken["kafka"] = _proc_cpu(broker) if broker else 0.0
    taken["postgres"] = (_proc_cpu(database) + sum(_proc_cpu(c) for c in _children(database))) if database else 0.0
    busy = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    taken["machine"] = (sum(int(x) for x in busy) - int(busy[3]) - int(busy[4])) / _TICK  # all but idle, iowait
    return taken


class Profiles:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.taken: dict[str, list[Profile]] = {}
        self.cpu: dict[str, tuple[float, dict[str, float]]] = {}  # measure: (wall s, CPU s by part)
        self.py_spy = shutil.which("py-spy") or str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "py-spy")

    @contextlib.contextmanager
    def during(self, measure: str, pids: Mapping[str, int]) -> Iterator[None]:
        self.out.mkdir(parents=True, exist_ok=True)
        running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        for service, pid in sorted(pids.items()):
            path = self.out / f"{measure}-{service}.txt"
            command = [self.py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(RATE),
                       "--subprocesses", "--nonblocking", "--output", str(path)]  # fmt: skip
            running.append(
                (service, path, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            )
        before, started = cpu_snapshot(pids), time.monotonic()
        try:
            yield
        finally:
            after, wall = cpu_snapshot(pids), time.monotonic() - started
            self.cpu[measure] = (wall, {k: after[k] - before.get(k, 0.0) for k in after})
            for _, _, spy in running:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiles = []
            for service, path, spy in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(timeout=30)
                if path.exists():
                    profiles.append(read(path, service))
            self.taken[measure] = profiles

    def summary(self) -> str:
        lines = []
        for measure, profiles in self.taken.items():
            lines.append(f"### {measure}\n")
            wall, cpu = self.cpu.get(measure, (0.0, {}))
            ranked = sorted(((v, k) for k, v in cpu.items() if k != "machine"), reverse=True)
            parts = ", ".join(f"{k} {v:.1f}" for v, k in ranked)
            cores = os.cpu_count() or 1
            lines.append(f"CPU seconds over {wall:.1f} s of wall time ({cores} cores: at most {wall * cores:.1f}):"
                         f" the machine {cpu.get('machine', 0):.1f}; {parts}.\n")  # fmt: skip
            lines.append("| service | busy s | where (share of its samples, inclusive) |")
            lines.append("|---|---|---|")
            for p in sorted(profiles, key=lambda p: -p.samples):
                top = "; ".join(f"{fn} {share:.0%}" for fn, share in p.top(6))
                lines.append(f"| {p.service} | {p.busy_s:.1f} | {top} |")
            lines.append("")
        return "\n".join(lines)
