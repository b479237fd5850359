"""make bench: docsum measured against the ideal and against the in-process alternative, in one run.

Starts its own stack (the project's broker and PostgreSQL, a database and topic prefix of its own, the
five services as processes) and its own OpenAI-compatible stand-in (tests/fake_llm.py: latency, jitter
and concurrency as parameters), measures B1–B17 (bench/README.md says what each is and why), and writes
bench/results/latest.md (each figure, its goal, pass or miss) with PNG plots beside it. Every figure
is a ratio or a rate measured within this run: absolute times on a shared 2-core machine drift.

    make bench                          # everything (under 10 minutes on 2 cores)
    .venv/bin/python bench/run.py --only B1,B9
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import baseline, fairness, modes, offline, versions  # noqa: E402
from bench.figures import Figure  # noqa: E402
from bench.profile import Profiles, children  # noqa: E402
from tests.documents import (  # noqa: E402
    character_error_rate,
    chinese_prose,
    english_prose,
    make_pdf,
    make_scanned_pdf,
)
from tests.fake_llm import FakeLLMProcess  # noqa: E402
from tests.integration.conftest import (  # noqa: E402
    SERVICES,
    AnyStack,
    Stack,
    StackFactory,
    drop_database,
    start_infra,
    start_s3,
    stop_s3,
)
from tests.integration.helpers import paid_twice  # noqa: E402
from tests.shipped import shipped_environment  # noqa: E402

RESULTS = ROOT / "bench" / "results"


class _Temp:
    """What StackFactory needs of pytest's TempPathFactory."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def mktemp(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=name, dir=self.base))
        return path


def shipped_python() -> str:
    """The services run as shipped (tests/shipped.py), not in the development environment, whose test
    tools (fpdf2's Pillow and fontTools, which pypdf then imports; OpenTelemetry) would weigh on every
    process."""
    if os.environ.get("DOCSUM_BENCH_PYTHON"):  # another interpreter, to compare environments or trees
        return os.environ["DOCSUM_BENCH_PYTHON"]
    return str(shipped_environment(Path(os.environ.get("DOCSUM_STATE_DIR", ROOT / ".run")) / "bench" / "venv"))


class Bench:
    def __init__(self, workdir: Path, *, s3: bool = False) -> None:
        # The stand-in in a process of its own, as a provider is: in this one, it would answer late
        # whenever the bench's own threads (the baseline's client, the waits) hold the interpreter.
        self.llm = FakeLLMProcess()
        self.llm.__enter__()
        # With `s3`, every stack keeps the documents' bytes in S3 (a bucket of its own on the server
        # scripts/s3.sh runs), not in PostgreSQL: `--blob-store s3`.
        self.blobs: dict[str, str] = {}
        self.s3_ran = True
        if s3:
            self.blobs, self.s3_ran = start_s3()
        infra = start_infra("docsum_bench")
        self.factory = StackFactory(infra, self.llm, _Temp(workdir), python=shipped_python())  # type: ignore[arg-type]
        self.seed = 1000
        self.chunks_done = 0  # chunks of every task run so far (CPU per chunk, in the notes)
        self.b1_seconds = float("nan")
        self.stack = self.new_stack()

    def new_stack(self, **env: str) -> Stack:
        settings = {
            "DOCSUM_MAX_FILE_BYTES": str(16 * 2**20),
            "DOCSUM_MAX_DOCUMENT_CHARS": str(8_000_000),
            "DOCSUM_MAX_CHUNKS_PER_DOCUMENT": "5000",
            "DOCSUM_LLM_MAX_INFLIGHT": "16",
            "DOCSUM_MAX_INFLIGHT": "16",
            **self.blobs,
            **env,
        }
        stack = self.factory(SERVICES, **settings)
        self.wait_ready(stack)
        return stack

    def wait_ready(self, stack: Stack, names: Iterator[str] | None = None) -> None:
        deadline = time.monotonic() + 120
        for name in list(names or stack.processes):
            url = f"http://127.0.0.1:{stack.health_ports[name]}/readyz"
            while True:
                try:
                    if httpx.get(url, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not ready:\n{stack.log_tail()}")
                time.sleep(0.2)

    def restart(self, name: str, **env: str) -> None:
        self.stack.stop(name)
        self.stack.start(name, **env)
        self.wait_ready(self.stack, iter([name]))

    def pids(self) -> dict[str, int]:
        return {"stand-in": self.llm.pid, **{name: process.pid for name, process in self.stack.processes.items()}}

    def close(self) -> None:
        self.factory.stop_all()
        self.llm.__exit__(None, None, None)
        asyncio.run(drop_database(self.factory.infra["DATABASE_URL"]))
        if not self.s3_ran:
            stop_s3()

    def text(self, chars: int) -> str:
        self.seed += 1
        return english_prose(chars, seed=self.seed)

    # --- one task, timed ----------------------------------------------------------------------

    def run_task(
        self, files: list[tuple[str, bytes]], *, stack: AnyStack | None = None, options: dict[str, str] | None = None
    ) -> tuple[float, dict]:
        """Seconds from the submit request to COMPLETED as `docsum` sees it (the CLI's own submit and
        wait: it follows the task's progress stream), and the task."""
        from docsum_cli.client import Gateway
        from docsum_cli.main import wait

        stack = stack or self.stack
        gateway = Gateway(stack.gateway_url, stack.keys["alice"])
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, data in files:
                paths.append(Path(tmp) / name)
                paths[-1].write_bytes(data)
            started = time.perf_counter()
            task_id = gateway.submit(paths, options=options)["task_id"]
            task = wait(gateway, task_id, quiet=True)
            seconds = time.perf_counter() - started
        self.chunks_done += self.chunks_of(task)
        return seconds, task

    def chunks_of(self, task: dict) -> int:
        return sum(d["chunks"]["total"] or 0 for d in task["documents"])


def _rss_mb(pid: int) -> float:
    """Resident memory of the process and its children (the parser's worker), in MB."""
    total = 0
    pids = [pid, *children(pid)]
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


# --- the measures -----------------------------------------------------------------------------------


# B1's and B2's load: 100 ms calls, 16 in flight, a 400,000-character text (~220 chunks).
B1_CALL = (0.1, 16, 400_000)
# The goals: docsum's own cost per chunk small beside a fast model's (bench/README.md).
B1_GOAL, B1_HELD = 1.35, 14  # wall ÷ ideal, and calls in flight on average while summarizing
B2_GOAL = 1.15  # wall ÷ the in-process map-reduce
B3_GOAL = 250  # chunks a second at 0 ms calls
RUNS = 3  # B1 and B3 each run this many times; the median run counts


@contextlib.contextmanager
def warmed_up(bench: Bench) -> Iterator[None]:
    """One untimed task of ~16 chunks first, outside the measure's CPU table, as B10 and B11 warm up:
    the first task after the services start pays for group joins, modules loaded on first use and the
    database connections that many calls at once open (each with its statements prepared)."""
    bench.llm.llm.configure(latency_s=B1_CALL[0], jitter_s=0.0)
    bench.run_task([("warm-up.txt", bench.text(30_000).encode())])
    yield


def b1_ideal(bench: Bench, figures: list[Figure]) -> None:
    """B1 three times, one text after another: the median run counts, and every run is shown. One run
    moves by several percent with the machine (bench/README.md), as much as the goal is from the figure."""
    latency, inflight, chars = B1_CALL
    bench.llm.llm.configure(latency_s=latency, jitter_s=0.0)
    runs: list[tuple[float, float, int, float, float, float]] = []
    for _ in range(RUNS):
        text = bench.text(chars)
        since = time.time()
        seconds, task = bench.run_task([("b1.txt", text.encode())])
        n = bench.chunks_of(task)
        calls, body = chunk_calls(bench, since)
        head = min(e.started for e in calls) - since
        runs.append((seconds / (n * latency / inflight), seconds, n, calls_in_flight(bench, since), head, body))
    ratio, seconds, n, held, head, body = median_run(runs)
    ideal, tail = n * latency / inflight, seconds - head - body
    each = ", ".join(f"{r[0]:.2f}" for r in runs)
    figures.append(Figure("B1", f"wall ÷ ideal N·L/C ({n} chunks, {latency * 1000:.0f} ms, {inflight} in flight;"
                          f" the median of {RUNS} runs)", ratio, f"{ratio:.2f} (runs {each}; the median: {seconds:.2f}s"
                          f" vs {ideal:.2f}s; {held:.1f} calls in flight on average while summarizing; to the first"
                          f" call {head:.2f}s, the calls {body:.2f}s, the merge and after {tail:.2f}s)",
                          f"≤ {B1_GOAL}, ≥ {B1_HELD} of {inflight} in flight",
                          ratio <= B1_GOAL and held >= B1_HELD))  # fmt: skip
    bench.b1_seconds = seconds


R = TypeVar("R", bound=tuple[float, ...])


def median_run(runs: list[R]) -> R:
    """The run whose figure (its first value) is the median of an odd number of runs."""
    return sorted(runs, key=lambda r: r[0])[len(runs) // 2]


def b2_baseline(bench: Bench, figures: list[Figure]) -> None:
    """B1's text size, concurrency and latency, through the in-process map-reduce."""
    latency, inflight, chars = B1_CALL
    bench.llm.llm.configure(latency_s=latency, jitter_s=0.0)
    seconds = bench.b1_seconds
    base_s, base_n = asyncio.run(baseline.timed(bench.llm.base_url, bench.text(chars), inflight))
    bench.chunks_done += base_n
    ratio = seconds / base_s
    figures.append(Figure("B2", "same ÷ in-process asyncio map-reduce (bench/baseline.py)", ratio,
                          f"{ratio:.2f} ({seconds:.2f}s vs {base_s:.2f}s, {base_n} chunks)", f"≤ {B2_GOAL}",
                          ratio <= B2_GOAL))  # fmt: skip


def concurrency_curve(bench: Bench, plots: dict[str, Any]) -> None:
    """Throughput against concurrency (the summarizer restarted with each bound), docsum and baseline."""
    bench.llm.llm.configure(latency_s=0.1, jitter_s=0.0)
    curve: list[tuple[int, float, float]] = []
    for c in (1, 4, 16, 64):
        bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT=str(c), DOCSUM_MAX_INFLIGHT=str(c))
        chars_c = 60_000 if c == 1 else 200_000
        s, t = bench.run_task([(f"conc-{c}.txt", bench.text(chars_c).encode())])
        bs, bn = asyncio.run(baseline.timed(bench.llm.base_url, bench.text(chars_c), c))
        curve.append((c, bench.chunks_of(t) / s, bn / bs))
    bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT="16", DOCSUM_MAX_INFLIGHT="16")
    plots["concurrency"] = curve


def b3_throughput(bench: Bench, figures: list[Figure]) -> None:
    """B3 three times (new documents each time): the median run counts, as in B1."""
    bench.llm.llm.configure(latency_s=0.0)
    runs: list[tuple[float, int, float]] = []
    for _ in range(RUNS):
        files = [(f"b3-{i}.txt", bench.text(50_000).encode()) for i in range(20)]
        seconds, task = bench.run_task(files)
        runs.append((bench.chunks_of(task) / seconds, bench.chunks_of(task), seconds))
    rate, n, seconds = median_run(runs)
    each = ", ".join(f"{r[0]:.0f}" for r in runs)
    figures.append(Figure("B3", f"throughput at 0 ms calls, 20 documents at once (chunks/s; the median of {RUNS} runs)",
                          rate, f"{rate:.0f} (runs {each}; the median: {n} chunks in {seconds:.1f}s)", f"≥ {B3_GOAL}",
                          rate >= B3_GOAL))  # fmt: skip


def b4_growth(bench: Bench, figures: list[Figure], plots: dict[str, Any]) -> None:
    bench.llm.llm.configure(latency_s=0.0)
    per_chunk: list[tuple[int, float]] = []
    for target in (50, 200, 800, 3200):
        seconds, task = bench.run_task([(f"b4-{target}.txt", bench.text(target * 1_800).encode())])
        n = bench.chunks_of(task)
        per_chunk.append((n, seconds / n))
    growth = per_chunk[-1][1] / per_chunk[0][1]
    shown = ", ".join(f"{n}: {s * 1000:.1f} ms" for n, s in per_chunk)
    figures.append(Figure("B4", "time per chunk, 50 → 3,200 chunks in one document", growth,
                          f"{growth:.2f}× ({shown})", "≤ 1.2×", growth <= 1.2))  # fmt: skip
    plots["growth"] = per_chunk


# What a chunk's request says (docsum_llm/openai/prompts.py): tells chunk calls from merges.
CHUNK_PROMPT = "Summarize the text between <text> tags"


def summarizing_rate(bench: Bench, since: float) -> tuple[float, int]:
    """Chunks summarized per second while the summarizers worked: the chunk calls the stand-in answered
    since `since`, over the span from the first one's arrival to the last one's answer (the task's
    reading, cutting and merging, which more summarizers do not shorten, left out)."""
    calls, span = chunk_calls(bench, since)
    return len(calls) / span, len(calls)


def calls_in_flight(bench: Bench, since: float) -> float:
    """The chunk calls the stand-in held at once on average, from the first one's arrival to the last
    one's answer (the ideal holds the limit all along)."""
    calls, span = chunk_calls(bench, since)
    return sum(e.finished - e.started for e in calls) / span


def chunk_calls(bench: Bench, since: float) -> tuple[list[Any], float]:
    """The chunk calls (not the merges) the stand-in answered since `since`, and the seconds from the
    first one's arrival to the last one's answer."""
    calls = [e for e in bench.llm.llm.entries(200) if e.started >= since and CHUNK_PROMPT in e.prompt]
    return calls, max(e.finished for e in calls) - min(e.started for e in calls)


def b5_replicas(bench: Bench, figures: list[Figure], plots: dict[str, Any]) -> None:
    latency = 0.2
    bench.llm.llm.configure(latency_s=latency)
    bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT="4", DOCSUM_MAX_INFLIGHT="4")
    since = time.time()
    one_s, _ = bench.run_task([("b5-1.txt", bench.text(300_000).encode())])
    one, n1 = summarizing_rate(bench, since)
    bench.stack.start("summarizer-2", DOCSUM_LLM_MAX_INFLIGHT="4", DOCSUM_MAX_INFLIGHT="4")
    bench.wait_ready(bench.stack, iter(["summarizer-2"]))
    time.sleep(3)  # the group rebalances over both members
    since = time.time()
    two_s, _ = bench.run_task([("b5-2.txt", bench.text(300_000).encode())])
    two, n2 = summarizing_rate(bench, since)
    bench.stack.stop("summarizer-2")
    ratio = two / one
    shown = (f"{ratio:.2f} ({one:.1f} → {two:.1f} chunks/s over {n1} and {n2} chunks; the whole task"
             f" {one_s:.1f}s → {two_s:.1f}s)")  # fmt: skip
    figures.append(Figure("B5", "2 summarizer replicas ÷ 1, LLM-bound (200 ms calls, 4 in flight each): throughput",
                          ratio, shown, "≥ 1.9", ratio >= 1.9))  # fmt: skip
    plots["replicas"] = [(1, one), (2, two)]
    bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT="16", DOCSUM_MAX_INFLIGHT="16")


def b6_kill(bench: Bench, figures: list[Figure]) -> None:
    inflight = 4
    bench.llm.llm.configure(latency_s=0.2)
    bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT=str(inflight), DOCSUM_MAX_INFLIGHT=str(inflight))
    marker = f"bench{uuid.uuid4().hex[:8]}"
    text = "\n\n".join(f"{marker} {p}" for p in bench.text(200_000).split("\n\n"))
    stack = bench.stack
    with httpx.Client(base_url=stack.gateway_url, timeout=60,
                      headers={"Authorization": f"Bearer {stack.keys['alice']}"}) as client:  # fmt: skip
        task_id = client.post("/v1/tasks", files=[("files", ("b6.txt", text.encode(), "text/plain"))]).json()["task_id"]
        answered = lambda: [e for e in bench.llm.llm.entries(200) if marker in e.prompt]  # noqa: E731
        while len(answered()) < 40:
            time.sleep(0.05)
        stack.kill("summarizer")
        stack.start("summarizer", DOCSUM_LLM_MAX_INFLIGHT=str(inflight), DOCSUM_MAX_INFLIGHT=str(inflight))
        while client.get(f"/v1/tasks/{task_id}").json()["status"] != "COMPLETED":
            time.sleep(0.2)
    repeats = paid_twice(answered())
    figures.append(Figure("B6", "LLM calls repeated after kill -9 of the summarizer ÷ calls in flight",
                          repeats / inflight, f"{repeats / inflight:.2f} ({repeats} repeated, {inflight} in flight)",
                          "≤ 1", repeats <= inflight))  # fmt: skip
    bench.restart("summarizer", DOCSUM_LLM_MAX_INFLIGHT="16", DOCSUM_MAX_INFLIGHT="16")


def _real_pdfs() -> list[Path]:
    found = sorted(ROOT.glob("examples/*.pdf"))
    for path in sorted(Path("/usr/share").rglob("*.pdf"))[:200]:
        if path.stat().st_size > 50_000 and len(found) < 6:
            found.append(path)
    return found


def b7_parser(figures: list[Figure]) -> None:
    from pypdf import PdfReader

    from docsum_parser.extract import extract_text

    def best(a: Callable[[], object], b: Callable[[], object], times: int = 5) -> tuple[float, float]:
        """The best of `times` runs of each, taken in turns: what else runs on the machine meanwhile
        (the stack finishing the task before) weighs on both alike."""
        spent: tuple[list[float], list[float]] = ([], [])
        for _ in range(times):
            for run, into in ((a, spent[0]), (b, spent[1])):
                started = time.perf_counter()
                run()
                into.append(time.perf_counter() - started)
        return min(spent[0]), min(spent[1])

    ours = raw = 0.0
    pages = 0
    for path in _real_pdfs():
        data = path.read_bytes()
        pages += len(PdfReader(io.BytesIO(data)).pages)
        docsum_s, pypdf_s = best(
            lambda data=data, name=path.name: extract_text(data, name),  # type: ignore[misc]
            lambda data=data: "\n".join(p.extract_text() or "" for p in PdfReader(io.BytesIO(data)).pages),  # type: ignore[misc]
        )
        ours, raw = ours + docsum_s, raw + pypdf_s
    ratio = ours / raw
    figures.append(Figure("B7", f"parser seconds per page ÷ raw pypdf ({len(_real_pdfs())} real PDFs, {pages} pages)",
                          ratio, f"{ratio:.2f} ({ours / pages * 1000:.1f} vs {raw / pages * 1000:.1f} ms/page)",
                          "≤ 1.10", ratio <= 1.10))  # fmt: skip


# B16's scan set: generated prose on A4 pages at 150 dpi (what an office scanner's default makes), 11 pt.
OCR_PAGES = 4  # per language
A4_IN = (8.27, 11.69)


def b16_ocr(figures: list[Figure]) -> None:
    """OCR in the parse worker's own steps (render, read), page by page as the parser does it, on
    generated English and Chinese scans; beside the same English pages read born-digital."""
    from dataclasses import replace

    from docsum_parser.extract import extract_text
    from docsum_parser.limits import Limits
    from docsum_parser.worker import Job, run_job

    def read(pages: list[str], chinese: bool) -> tuple[float, list[float]]:
        data = make_scanned_pdf(pages, chinese=chinese, size_in=A4_IN)
        job = Job(data, "scan.pdf", None, Limits(), "bench")
        run_job(replace(job, ocr_page=0))  # untimed: the worker loads the languages' data once
        started = time.perf_counter()
        texts = [run_job(replace(job, ocr_page=page)).text for page in run_job(job).scanned]
        seconds = time.perf_counter() - started
        return seconds, [character_error_rate(page, text) for page, text in zip(pages, texts, strict=True)]

    english = [english_prose(2_000, seed=n) for n in range(OCR_PAGES)]
    chinese = [chinese_prose(800, seed=n) for n in range(OCR_PAGES)]
    en_s, en_cer = read(english, False)
    zh_s, zh_cer = read(chinese, True)
    rate = 2 * OCR_PAGES / (en_s + zh_s)
    digital = make_pdf(english)
    started = time.perf_counter()
    digital_text = extract_text(digital, "digital.pdf").text
    digital_rate = OCR_PAGES / (time.perf_counter() - started)
    digital_cer = character_error_rate("\n\n".join(english), digital_text)
    worst = max(en_cer + zh_cer)
    figures.append(Figure(
        "B16", f"OCR pages/s and character error, {2 * OCR_PAGES} generated A4 scans at 150 dpi (English, Chinese)",
        worst, f"{rate:.2f} pages/s (English {OCR_PAGES / en_s:.2f}, Chinese {OCR_PAGES / zh_s:.2f}); character error"
        f" at most {max(en_cer):.1%} (English), {max(zh_cer):.1%} (Chinese); the English pages born-digital:"
        f" {digital_rate:.0f} pages/s, {digital_cer:.1%}", "≤ 3% character error", worst <= 0.03,
    ))  # fmt: skip


def b8_idle(bench: Bench, figures: list[Figure]) -> None:
    time.sleep(2)
    idle = {name: _rss_mb(p.pid) for name, p in bench.stack.processes.items()}
    worst = max(idle.values())
    shown = ", ".join(f"{n} {mb:.0f}" for n, mb in sorted(idle.items()))
    figures.append(Figure("B8a", "resident memory per service, idle (MB)", worst, f"max {worst:.0f} ({shown})",
                          "≤ 120 MB", worst <= 120))  # fmt: skip


def b8_parser_peak(bench: Bench, figures: list[Figure]) -> None:
    pdf = make_pdf([english_prose(2_000, seed=i) for i in range(500)])
    parser = bench.stack.processes["parser"]
    peak = 0.0
    with httpx.Client(base_url=bench.stack.gateway_url, timeout=120,
                      headers={"Authorization": f"Bearer {bench.stack.keys['alice']}"}) as client:  # fmt: skip
        task_id = client.post("/v1/tasks", files=[("files", ("b8.pdf", pdf, "application/pdf"))]).json()["task_id"]
        while True:
            peak = max(peak, _rss_mb(parser.pid))
            doc = client.get(f"/v1/tasks/{task_id}").json()["documents"][0]
            if doc["status"] not in ("PENDING", "PARSING"):
                break
            time.sleep(0.05)
        # Its 500 pages would still be summarized through the next measures: cancelled, and ended.
        client.post(f"/v1/tasks/{task_id}/cancel").raise_for_status()
        while client.get(f"/v1/tasks/{task_id}").json()["status"] != "CANCELLED":
            time.sleep(0.2)
    figures.append(Figure("B8b", "parser on a 500-page PDF, peak resident memory with its worker (MB)", peak,
                          f"{peak:.0f}", "≤ 300 MB", peak <= 300))  # fmt: skip


def b9_latency(bench: Bench, figures: list[Figure]) -> None:
    """B9 with the documents' bytes in PostgreSQL (the default), then in S3 (DOCSUM_BLOB_STORE, on the
    server scripts/s3.sh runs, a stack of its own): B9b."""
    p50, p95 = _b9_run(bench, bench.stack)
    figures.append(Figure("B9", "a 1-page document, submit → COMPLETED as `docsum` sees it (20 tasks)", p50,
                          f"p50 {p50:.2f}s, p95 {p95:.2f}s", "p50 ≤ 0.5 s", p50 <= 0.5))  # fmt: skip
    s3, ran = start_s3()
    stack = bench.new_stack(**s3)
    try:
        # One task first, untimed, as the main stack's ran before B9: a new bucket's first write has
        # SeaweedFS grow its volumes for it.
        _b9_run(bench, stack, tasks=1)
        p50, p95 = _b9_run(bench, stack)
    finally:
        stack.kill_all()
        if not ran:
            stop_s3()
    figures.append(Figure("B9b", "B9 with DOCSUM_BLOB_STORE=s3://… (SeaweedFS, 20 tasks)", p50,
                          f"p50 {p50:.2f}s, p95 {p95:.2f}s", "p50 ≤ 0.5 s", p50 <= 0.5))  # fmt: skip


def _b9_run(bench: Bench, stack: Stack, tasks: int = 20) -> tuple[float, float]:
    """p50 and p95 of `tasks` one-page tasks, each submitted once the one before is COMPLETED."""
    from docsum_cli.client import Gateway
    from docsum_cli.main import wait

    bench.llm.llm.configure(latency_s=0.0)
    gateway = Gateway(stack.gateway_url, stack.keys["alice"])
    spent = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(tasks):
            path = Path(tmp) / f"page-{i}.txt"
            path.write_text(bench.text(1_800))
            started = time.perf_counter()
            created = gateway.submit([path])
            wait(gateway, created["task_id"], quiet=True)
            spent.append(time.perf_counter() - started)
    return statistics.median(spent), max(spent) if tasks < 20 else statistics.quantiles(spent, n=20)[18]


def b10_offline(bench: Bench, figures: list[Figure]) -> None:
    """A real 200-page PDF through the pipeline with the extractive backend (bench/offline.py: the
    in-process runner), beside raw pypdf on the same pages."""
    run = offline.measure(bench)
    measure = f"offline extractive end to end, {offline.PAGES}-page PDF (pages/s)"
    if isinstance(run, str):  # no PDF to measure: said in the figure
        figures.append(Figure("B10", measure, float("nan"), f"not measured: {run}", "reported", True))
        return
    figures.append(Figure("B10", measure, run.rate, run.shown(), "reported", run.completed, run.detail()))


def b11_modes(bench: Bench, figures: list[Figure]) -> None:
    """The same documents once per mode (bench/modes.py): flex and batch against realtime's cost."""
    result = modes.measure(bench)
    chunks = result.run("realtime").chunks
    figures.append(Figure("B11", f"cost of flex and of batch ÷ realtime, the same {len(modes.DOCUMENT_CHARS)} documents"
                          f" ({chunks} chunks) once per mode", result.worst, result.shown(),
                          f"≤ {modes.GOAL}×, same statuses", result.passed, result.table()))  # fmt: skip


def b17_versions(bench: Bench, figures: list[Figure]) -> None:
    """A document summarized once, then edited and summarized again by its owner (bench/versions.py)."""
    result = versions.measure(bench)
    figures.append(Figure("B17", f"LLM calls to summarize again an edited {versions.PAGES}-page text (same owner):"
                          " a sentence added mid-document, a paragraph inserted at the top, the last one deleted; the"
                          " same pages printed as a PDF, then reprinted with only its footers' date changed; in"
                          " brackets, of the document summary's sentences whose sources are all on pages the edit left"
                          " as they were, those byte-identical to a sentence of the first version's; and every source"
                          " of the edits' summaries resolved through the quote route to the new version's text",
                          result.worst, result.shown(), f"≤ {versions.GOAL} calls each; the reprint 0; ≥"
                          f" {100 * versions.KEPT_GOAL:.0f} % of the document summary's sentences about untouched"
                          " pages identical to the first version's; every source resolves through the quote route",
                          result.passed, result.table()))  # fmt: skip


# --- output -----------------------------------------------------------------------------------------------


def plot(plots: dict[str, Any]) -> list[str]:
    if not plots:  # a run of measures without plots needs no matplotlib
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if "concurrency" in plots:
        c, ours, base = zip(*plots["concurrency"], strict=True)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(c, ours, "o-", label="docsum")
        ax.plot(c, base, "s--", label="in-process map-reduce")
        ax.plot(c, [x / 0.1 for x in c], ":", label="ideal (C / L)")
        ax.set(xscale="log", yscale="log", xlabel="LLM calls in flight", ylabel="chunks / s",
               title="Throughput against concurrency (100 ms calls)")  # fmt: skip
        ax.legend()
        fig.savefig(RESULTS / "concurrency.png", dpi=110, bbox_inches="tight")
        written.append("concurrency.png")
    if "replicas" in plots:
        r, rate = zip(*plots["replicas"], strict=True)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(r, rate, "o-", label="docsum")
        ax.plot(r, [rate[0] * x for x in r], ":", label="linear")
        ax.set(xlabel="summarizer replicas", ylabel="chunks / s", xticks=list(r),
               title="Scaling with replicas (200 ms calls, 4 in flight each)")  # fmt: skip
        ax.legend()
        fig.savefig(RESULTS / "replicas.png", dpi=110, bbox_inches="tight")
        written.append("replicas.png")
    if "growth" in plots:
        n, per = zip(*plots["growth"], strict=True)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(n, [p * 1000 for p in per], "o-")
        ax.set(xscale="log", xlabel="chunks in the document", ylabel="ms per chunk (end to end)",
               title="Time per chunk against document size (0 ms calls)", ylim=(0, None))  # fmt: skip
        fig.savefig(RESULTS / "growth.png", dpi=110, bbox_inches="tight")
        written.append("growth.png")
    return written


def write(figures: list[Figure], pictures: list[str], seconds: float, profiled: str, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(
        f"| {f.id} | {f.measure} | {f.shown} | {f.goal} | {'pass' if f.passed else '**miss**'} |" for f in figures
    )
    images = "\n".join(f"![{p}]({p})" for p in pictures)
    details = "".join(f"\n## {f.id}\n\n{f.detail}\n" for f in figures if f.detail)
    title = "a profiled run (py-spy on every service: slower)" if name.startswith("profiled") else "latest run"
    if name.endswith("-s3.md"):
        title += ", the documents' bytes in S3 (`--blob-store s3`)"
    text = f"""# docsum bench — {title}

{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {os.cpu_count()} cores, the whole run {seconds:.0f} s.
Every figure is a ratio or a rate measured within this run (bench/README.md: what each measures, and
why a missed goal is missed).

| # | measure | measured | goal | |
|---|---|---|---|---|
{rows}

{images}
{details}"""
    if profiled:
        text += f"\n## Where the time went: CPU seconds per part, measure by measure\n\n{profiled}\n"
    out = RESULTS / name
    out.write_text(text)
    return out


MEASURES = ("B1", "B2", "curve", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10", "B11", "B12", "B13", "B14", "B15",
            "B16", "B17")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MEASURES), help="comma-separated: " + ",".join(MEASURES))
    parser.add_argument("--profile", action="store_true",
                        help="py-spy every service during each measure (bench/results/profiles/)")  # fmt: skip
    parser.add_argument("--blob-store", choices=("postgresql", "s3"), default="postgresql",
                        help="where the stacks keep the documents' bytes (s3: results in latest-s3.md)")  # fmt: skip
    args = parser.parse_args()
    profiles = Profiles(RESULTS / "profiles", sample=args.profile)
    only = set(args.only.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    figures: list[Figure] = []
    plots: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="docsum-bench-") as workdir:
        bench = Bench(Path(workdir), s3=args.blob_store == "s3")
        try:
            steps: list[tuple[str, Callable[[], None]]] = [
                ("B8", lambda: b8_idle(bench, figures)),  # first: idle means before any work
                ("B1", lambda: b1_ideal(bench, figures)),
                ("B2", lambda: b2_baseline(bench, figures)),
                ("curve", lambda: concurrency_curve(bench, plots)),
                ("B3", lambda: b3_throughput(bench, figures)),
                ("B4", lambda: b4_growth(bench, figures, plots)),
                ("B5", lambda: b5_replicas(bench, figures, plots)),
                ("B6", lambda: b6_kill(bench, figures)),
                ("B7", lambda: b7_parser(figures)),
                ("B9", lambda: b9_latency(bench, figures)),
                ("B10", lambda: b10_offline(bench, figures)),
                ("B11", lambda: b11_modes(bench, figures)),  # it restarts every service twice
                # Fair shares (bench/fairness.py), each beside FIFO: they restart the summarizer and chunker.
                ("B12", lambda: figures.extend(fairness.b12(bench))),
                ("B13", lambda: figures.extend(fairness.b13(bench))),
                ("B14", lambda: figures.extend(fairness.b14(bench))),
                ("B15", lambda: figures.extend(fairness.b15(bench))),
                ("B16", lambda: b16_ocr(figures)),  # in this process: the worker's own steps
                ("B17", lambda: b17_versions(bench, figures)),  # it restarts every service twice
                # Last: its 500 pages are cancelled once parsed, and a cut that won the race with the
                # cancel still sends the summarizer ~500 chunks to skip, which no measure should meet.
                ("B8b", lambda: b8_parser_peak(bench, figures)),
            ]
            # The services set otherwise for a measure: restarted so (and warmed up) before its CPU is
            # counted, restarted as they were after.
            settings: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
                "B1": lambda: warmed_up(bench),
            }
            chunks: dict[str, int] = {}
            for name, step in steps:
                if name in only or (name == "B8b" and "B8" in only):
                    t0 = time.monotonic()
                    with settings.get(name, contextlib.nullcontext)():
                        c0 = bench.chunks_done
                        with profiles.during(name, bench.pids):
                            step()
                        chunks[name] = bench.chunks_done - c0
                    print(f"{name}: {time.monotonic() - t0:.0f}s — " + "; ".join(
                        f"{f.id} {f.shown}" for f in figures if f.id.startswith(name)), flush=True)  # fmt: skip
        finally:
            bench.close()
    figures.sort(key=lambda f: (int("".join(c for c in f.id if c.isdigit())), f.id))  # B8a, B9, B11
    # A profiled run is slower (py-spy takes its share of the cores): its figures go beside the latest
    # run's, not over them.
    pictures: list[str] = []
    if args.blob_store == "s3":  # beside the default run's figures and pictures, not over them
        name = "profiled-s3.md" if args.profile else "latest-s3.md"
    elif args.profile:
        name = "profiled.md"
    else:
        name, pictures = "latest.md", plot(plots)
    out = write(figures, pictures, time.monotonic() - started, profiles.summary(chunks), name)
    print(out.read_text())


if __name__ == "__main__":
    main()
