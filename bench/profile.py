"""Where a measure's time goes: the CPU each part used, and (with --profile) py-spy samples.

`bench/run.py` wraps every measure in `Profiles.during(name, processes)`, which counts the CPU seconds
each part used meanwhile (each service, the stand-in provider, the broker, the database, the whole
machine: from /proc). With `--profile` it also runs one `py-spy record` per service (50 samples a
second, idle threads left out), written as collapsed stacks to
`bench/results/profiles/<measure>-<service>.txt`; `summary` names the packages each service was
running in most often (the frame on top of each sample: asyncio's loop, asyncpg, openai, ours...).
bench/README.md's "Where the time goes" quotes both.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

RATE = 50


@dataclass
class Profile:
    service: str
    samples: int
    by_package: Counter[str]  # samples whose running frame is in that package ("asyncio", "openai", ...)

    def top(self, n: int = 6) -> list[tuple[str, float]]:
        """The n packages the process was running in most often, as shares of its samples."""
        if not self.samples:
            return []
        return [(package, count / self.samples) for package, count in self.by_package.most_common(n)]


_FILE = re.compile(r"\(([^/)]+)(?:/[^)]*)?\.py:\d+\)$|\(<frozen ([\w.]+)>")


def read(path: Path, service: str) -> Profile:
    samples = 0
    by_package: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        leaf = stack.split(";")[-1].strip()
        found = _FILE.search(leaf)
        package = (found.group(1) or found.group(2)) if found else "native"
        by_package[package.split(".")[0]] += count
    return Profile(service, samples, by_package)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int, *, reaped: bool = True) -> float:
    """CPU seconds (user + system) a process has used, with (if `reaped`) its ended children's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11 : 15 if reaped else 13]) / _TICK  # utime, stime (cutime, cstime)


def children(pid: int) -> list[int]:
    """The process's children, whichever of its threads started them (the parser's worker is started
    from a worker thread)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _state_pid(name: str) -> int | None:
    """The pid our own scripts wrote for the broker or the database server (scripts/kafka.sh, postgres.sh)."""
    state = Path(os.environ.get("DOCSUM_STATE_DIR", Path(__file__).resolve().parents[1] / ".run"))
    try:
        return int((state / f"{name}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far: each service (with its worker), the stand-in provider (a process among
    `pids`), the bench's client (this process), PostgreSQL (its server and every backend), Kafka (the
    broker's JVM), the whole machine."""
    taken: dict[str, float] = {}
    for service, pid in pids.items():
        taken[f"{service}@{pid}"] = _proc_cpu(pid) + sum(_proc_cpu(c) for c in children(pid))
    # Not its children's: the services it stopped are its children too.
    taken["bench (the client)"] = _proc_cpu(os.getpid(), reaped=False)
    broker, database = _state_pid("kafka"), _state_pid("postgres")
    taken["kafka"] = _proc_cpu(broker) if broker else 0.0
    taken["postgres"] = (_proc_cpu(database) + sum(_proc_cpu(c) for c in children(database))) if database else 0.0
    busy = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    taken["machine"] = (sum(int(x) for x in busy) - int(busy[3]) - int(busy[4])) / _TICK  # all but idle, iowait
    return taken


def _spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each part used between two snapshots. A service restarted in between (its pid
    changed) is told so: the CPU of the process that ended is gone with it."""
    spent: dict[str, float] = {}
    for key, value in after.items():
        name, _, _ = key.partition("@")
        if key in before:
            spent[name] = value - before[key]
        elif "@" in key:
            spent[f"{name} (restarted during the measure: its new process only)"] = value
        else:
            spent[name] = value
    return spent


class Profiles:
    """CPU seconds per part for every measure (always: read from /proc, costs nothing); with `sample`,
    py-spy stacks too (py-spy takes a good share of a core itself: figures of a sampled run are slower)."""

    def __init__(self, out: Path, *, sample: bool) -> None:
        self.out, self.sample = out, sample
        self.taken: dict[str, list[Profile]] = {}
        self.cpu: dict[str, tuple[float, dict[str, float]]] = {}  # measure: (wall s, CPU s by part)
        self.py_spy = shutil.which("py-spy") or str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "py-spy")

    @contextlib.contextmanager
    def during(self, measure: str, pids_now: Callable[[], Mapping[str, int]]) -> Iterator[None]:
        pids = pids_now()
        running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        if self.sample:
            self.out.mkdir(parents=True, exist_ok=True)
            for service, pid in sorted(pids.items()):
                path = self.out / f"{measure}-{service}.txt"
                command = [self.py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(RATE),
                           "--nonblocking", "--output", str(path)]  # fmt: skip
                if service == "parser":
                    command.append("--subprocesses")  # its worker
                spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                running.append((service, path, spy))
        before, started = cpu_snapshot(pids), time.monotonic()
        try:
            yield
        finally:
            after, wall = cpu_snapshot(pids_now()), time.monotonic() - started
            self.cpu[measure] = (wall, _spent(before, after))
            for _, _, spy in running:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiles = []
            for service, path, spy in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(timeout=30)
                if path.exists():
                    profiles.append(read(path, service))
            self.taken[measure] = profiles

    def summary(self, chunks: Mapping[str, int]) -> str:
        """The CPU table of each measure (per chunk where the measure says how many), and what py-spy saw."""
        lines = []
        cores = os.cpu_count() or 1
        for measure, (wall, cpu) in self.cpu.items():
            n = chunks.get(measure)
            lines.append(f"### {measure}\n")
            lines.append(f"{wall:.1f} s of wall time, {cores} cores: at most {wall * cores:.1f} CPU seconds; the whole"
                         f" machine used {cpu.get('machine', 0):.1f}" + (f" ({n} chunks)." if n else "."))  # fmt: skip
            lines.append("")
            head = "| part | CPU s |" + (" ms per chunk |" if n else "") + (" where (py-spy) |" if self.sample else "")
            lines.append(head)
            lines.append("|---|---|" + ("---|" if n else "") + ("---|" if self.sample else ""))
            sampled = {p.service: p for p in self.taken.get(measure, [])}
            ours = sum(v for k, v in cpu.items() if k != "machine")
            rows = sorted(((v, k) for k, v in cpu.items() if k != "machine"), reverse=True)
            rows.append((cpu.get("machine", 0) - ours, "everything else on the machine"))
            for seconds, part in rows:
                row = f"| {part} | {seconds:.1f} |" + (f" {seconds / n * 1000:.1f} |" if n else "")
                if self.sample:
                    where = sampled.get(part)
                    row += " " + ("; ".join(f"{fn} {share:.0%}" for fn, share in where.top(5)) if where else "") + " |"
                lines.append(row)
            lines.append("")
        return "\n".join(lines)
