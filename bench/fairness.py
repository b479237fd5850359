"""B12–B15 — fair shares between owners, each beside first in, first out (DOCSUM_ADMISSION_ORDER=fifo).

Every measure runs twice in one bench run on the bench's stack: with the summarizer's admission in its
fair order (the default), then restarted with `DOCSUM_ADMISSION_ORDER=fifo` (the oldest ready chunk
first, whoever's: the order of the broker alone), and restarted as it was after. The stand-in answers
every call after `CALL_S` (no jitter), 16 calls in flight (the bench's stack). Each owner's text carries a
word of its own in every sentence (`marked_text`), so the stand-in's ledger tells whose each call was;
a chunk's ready time (`chunks.ready_at`, the chunker's transaction) is read from the bench's database.

- B12: owner A's backlog is cut and being served; B submits a one-page task, then another once it is
  done, seven in all (`NEWCOMERS`), each a random fraction of a call after the one before, at 300 ms a
  call (`NEWCOMER_CALL_S`). How long after its chunk was ready B's first call starts (in calls' time,
  and in call completions meanwhile), and B's task's time (submit → COMPLETED as `docsum` sees it)
  against (its depth + 1) calls' time, split into its hops: to its chunk ready, to its first call, its
  calls, and from its last answer to done. The median of the seven against the goal, the worst beside it.
- B13: three owners whose chunks differ 10× in size (the chunker restarted with 200, 630 and 2,000
  characters a chunk for each one's task), backlogged together: the summarizer stopped while the three
  are cut, then started. Tokens served per owner in each window (by the call's answer), the widest
  difference in a window against twice the largest request, and Jain's index over the span.
- B14: one owner alone, the same text with each order in turns: throughput fair ÷ FIFO.
B12 and B14 also run the fair order with the admission's window at the calls in flight (`NARROW`).
- B15: with DOCSUM_OWNER_WEIGHTS alice=3: alice (one task) against bob (one task), alice's share of the
  two; carol (one task) against dave (the same chunks over 100 tasks), dave's gain; all four backlogged
  together as in B13. Then alice's urgent one-page tasks behind her own normal backlog: their first
  calls after their chunks were ready, as in B12.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg

from bench.figures import Figure
from docsum_llm.shares import served_tokens
from docsum_shared.states import TASK_FINAL
from docsum_summarizer.schedule import jain_index
from tests.integration.helpers import marked_text, new_marker

if TYPE_CHECKING:
    from bench.run import Bench
    from tests.fake_llm import LedgerEntry

CALL_S = 0.1  # every call's answer, fixed
# A newcomer's time (B12, B15's urgent task) is measured against the issue's own provider: 300 ms a call,
# 16 in flight. Its hops (upload, parse, cut, three events after the answer, the stream) take ~0.1 s on 2
# cores whatever the call's time; at 100 ms calls (160 a second) they take more than a call.
NEWCOMER_CALL_S = 0.3
NEWCOMERS = 7  # one-page tasks one after another behind the same backlog: a median and a worst
CHUNK_PROMPT = "Summarize the text between <text> tags"  # a chunk's request (docsum_llm/openai/prompts.py)
ORDERS = ("fair", "fifo")
# B12 and B14 also run the fair order with the admission's window at the calls in flight (16), not its
# default 4 × that: what a newcomer waits for is the admitted work ahead of it.
NARROW = {"DOCSUM_ADMISSION_WINDOW": "16"}
# B12's backlog: the issue's 10,000 chunks scaled down to 1,500 (chunks of ~1,800 new characters), so
# that FIFO's wait behind it (the whole backlog) stays ~15 s on 2 cores; the fair wait does not grow with it.
B12_CHUNKS = 1_500
B13_CHUNK_CHARS = {"carol": 200, "bob": 630, "alice": 2_000}  # submitted (FIFO's order) in this order
B13_CALLS = {"carol": 2_600, "bob": 1_600, "alice": 1_000}  # backlogs long enough for the span
B13_SPAN_S, WINDOW_S = 30.0, 10.0  # the 60 s in six windows, scaled to 30 s in three
FIFO_SPAN_S = 10.0  # FIFO's span: one window shows whose backlog it serves
WARM_S = 2.0  # after the summarizer's start, before a span: group join, first connections
B14_CHARS, B14_GOAL, B14_TURNS = 800_000, 0.95, 3
B15_WEIGHTS = {"alice": 3.0}
B15_CHUNKS = {"alice": 1_900, "bob": 700, "carol": 700, "dave": 700}
B15_SPLIT = 100  # dave's tasks
B15_SPAN_S = 20.0
B15_URGENT_BACKLOG = 1_000
NEW_CHARS = 1_800  # a default chunk's characters beyond its overlap


# --- pure: what the ledger says ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One answered call, whose it was, and the tokens it cost its owner's counter."""

    owner: str
    started: float
    finished: float
    tokens: int
    chunk: bool = True  # a chunk's call (the admission's), not a merge (the merger's own slots)


def attribute(entries: Iterable[LedgerEntry], markers: Mapping[str, str]) -> list[Served]:
    """The answered calls whose prompt carries one of `markers` (marker → owner); tokens as the counters
    charge them (prompt + 2 × completion)."""
    out = []
    for e in entries:
        if e.status != 200:
            continue
        owner = next((o for m, o in markers.items() if m in e.prompt), None)
        if owner is not None:
            tokens = served_tokens(e.prompt_tokens, e.completion_tokens)
            out.append(Served(owner, e.started, e.finished, tokens, CHUNK_PROMPT in e.prompt))
    return out


def tallies(calls: Iterable[Served], owners: Sequence[str], start: float, width: float, n: int) -> list[dict[str, int]]:
    """Tokens served per owner in each of `n` windows of `width` seconds from `start`, each call in the
    window in which it was answered."""
    out: list[dict[str, int]] = [dict.fromkeys(owners, 0) for _ in range(n)]
    for c in calls:
        i = int((c.finished - start) // width)
        if 0 <= i < n and c.owner in out[i]:
            out[i][c.owner] += c.tokens
    return out


def widest_gap(windows: Iterable[Mapping[str, int]], weights: Mapping[str, float] | None = None) -> float:
    """The largest difference, in any window, between two owners' tokens served (each ÷ its weight)."""
    gaps = [0.0]
    for w in windows:
        scaled = [t / (weights or {}).get(o, 1.0) for o, t in w.items()]
        gaps.append(max(scaled) - min(scaled))
    return max(gaps)


def completions_between(entries: Iterable[LedgerEntry], start: float, end: float) -> int:
    """Calls answered after `start` and by `end`."""
    return sum(1 for e in entries if start < e.finished <= end)


def shares(
    calls: Iterable[Served], owners: Sequence[str], start: float, end: float, *, chunks_only: bool = False
) -> dict[str, int]:
    """Tokens served per owner by calls answered within [start, end) (only chunks' calls: not merges)."""
    out = dict.fromkeys(owners, 0)
    for c in calls:
        if start <= c.finished < end and c.owner in out and (c.chunk or not chunks_only):
            out[c.owner] += c.tokens
    return out


def backlogged_until(calls: Iterable[Served], owners: Sequence[str]) -> float:
    """Until when every owner still had work: the earliest of their last calls' starts."""
    last: dict[str, float] = {}
    for c in calls:
        last[c.owner] = max(last.get(c.owner, 0.0), c.started)
    return min(last.get(o, 0.0) for o in owners)


# --- the stack --------------------------------------------------------------------------------------------


# Each run has owners of its own: a counter keeps what its owner was served in an earlier run (B14's lone
# owner, FIFO's backlog), and with no one served at a run's start nothing lifts the others to it.
NAMES = ("alice", "bob", "carol", "dave")
RUNS = tuple(f"{m}-{o}" for m in ("b12", "b12narrow", "b13", "b15", "b15urgent") for o in ORDERS)


def owner(name: str, run: str) -> str:
    """The owner `name` stands for in `run`: its key's."""
    return f"{name}-{run}"


class Owners:
    """Submitting, following and cancelling tasks as the bench's owners, and reading chunks' ready times."""

    def __init__(self, bench: Bench, names: Sequence[str], run: str) -> None:
        from docsum_cli.client import Gateway

        self.bench = bench
        stack = bench.stack
        missing = [owner(n, r) for r in RUNS for n in NAMES if owner(n, r) not in stack.keys]
        if missing:  # the gateway restarted once with every run's keys (kept for any later restart)
            stack.keys.update({n: secrets.token_urlsafe(24) for n in missing})
            stack.env["DOCSUM_API_KEYS"] = ",".join(f"{o}={k}" for o, k in stack.keys.items())
            bench.restart("gateway")
        self.gateways = {n: Gateway(stack.gateway_url, stack.keys[owner(n, run)]) for n in names}
        self.database_url = bench.factory.infra["DATABASE_URL"]
        self.tasks: list[tuple[str, str]] = []  # (owner, task_id), every one submitted
        self._tmp = tempfile.TemporaryDirectory(prefix="fairness-")

    def submit(self, owner: str, texts: Sequence[str], *, options: dict[str, str] | None = None) -> str:
        paths = []
        for text in texts:
            paths.append(Path(self._tmp.name) / f"{owner}-{secrets.token_hex(4)}.txt")
            paths[-1].write_text(text)
        task_id: str = self.gateways[owner].submit(paths, options=options)["task_id"]
        self.tasks.append((owner, task_id))
        for p in paths:
            p.unlink()
        return task_id

    def wait(self, owner: str, task_id: str) -> dict[str, Any]:
        from docsum_cli.main import wait

        task: dict[str, Any] = wait(self.gateways[owner], task_id, quiet=True)
        return task

    def cut(self, task_ids: Sequence[str], timeout_s: float = 180.0) -> int:
        """Once every document of the tasks is cut (its chunks stored): how many chunks."""
        deadline = time.monotonic() + timeout_s
        while True:
            uncut, chunks = self._query(
                "SELECT count(*) FILTER (WHERE d.status = ANY($2::text[])),"
                " coalesce(sum((SELECT count(*) FROM chunks c WHERE c.document_id = d.id)), 0)"
                " FROM documents d WHERE d.task_id = ANY($1::text[])",
                list(task_ids), ["PENDING", "PARSING", "CHUNKING"],
            )  # fmt: skip
            if uncut == 0 and chunks > 0:
                return int(chunks)
            if time.monotonic() > deadline:
                raise RuntimeError(f"tasks not cut within {timeout_s:.0f}s:\n{self.bench.stack.log_tail()}")
            time.sleep(0.2)

    def ready_at(self, task_id: str) -> float:
        """When the task's first chunk was ready (the chunker's transaction that stored it), epoch seconds."""
        (ready,) = self._query(
            "SELECT extract(epoch FROM min(c.ready_at))::float8 FROM chunks c"
            " JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1",
            task_id,
        )
        return float(ready)

    def cancel_all(self) -> None:
        """Every task still running cancelled, and the stand-in quiet again."""
        from docsum_cli.client import GatewayError

        for owner, task_id in self.tasks:
            if self.gateways[owner].task(task_id)["status"] not in TASK_FINAL:
                with contextlib.suppress(GatewayError):  # it ended meanwhile
                    self.gateways[owner].control(task_id, "cancel")
        for owner, task_id in self.tasks:
            while self.gateways[owner].task(task_id)["status"] not in TASK_FINAL:
                time.sleep(0.2)
        self.tasks.clear()
        quiet(self.bench)

    def _query(self, sql: str, *args: Any) -> tuple[Any, ...]:
        async def run() -> tuple[Any, ...]:
            conn = await asyncpg.connect(self.database_url)
            try:
                return tuple(await conn.fetchrow(sql, *args))
            finally:
                await conn.close()

        for _ in range(50):  # the server shared with the services: its connections may all be taken a while
            try:
                return asyncio.run(run())
            except asyncpg.TooManyConnectionsError:
                time.sleep(0.2)
        return asyncio.run(run())

    def close(self) -> None:
        self._tmp.cleanup()


def quiet(bench: Bench, still_s: float = 5 * CALL_S) -> None:
    """Until the stand-in has answered nothing new for `still_s` (the calls of cancelled work ended)."""
    seen, since = -1, time.monotonic()
    while time.monotonic() - since < still_s:
        n = len(bench.llm.llm.entries())
        if n != seen:
            seen, since = n, time.monotonic()
        time.sleep(0.05)


def ordered(bench: Bench, order: str, *, start: bool = True, env: Mapping[str, str] | None = None) -> None:
    """The summarizer restarted in `order` (with `env`); stopped only, when not `start`."""
    settings = {"DOCSUM_ADMISSION_ORDER": order, **(env or {})}
    if "summarizer" in bench.stack.processes:
        bench.stack.stop("summarizer")
    if start:
        bench.stack.start("summarizer", **settings)
        bench.wait_ready(bench.stack, iter(["summarizer"]))


def restored(bench: Bench) -> None:
    """The summarizer as the bench's stack has it."""
    bench.restart("summarizer")


def text_of(bench: Bench, chunks: int, marker: str, chunk_chars: int = 2_000) -> str:
    """A text cut into about `chunks` chunks of `chunk_chars` (its overlap a tenth), every sentence
    carrying `marker`."""
    bench.seed += 1
    # marked_text adds the marker twice a sentence: ~25% more characters than asked for.
    return marked_text(int(chunks * chunk_chars * 0.9 / 1.25), bench.seed, marker)


# --- B12: a one-page task behind another owner's backlog ---------------------------------------------------


@dataclass(frozen=True)
class Behind:
    """A one-page task submitted behind a backlog: its first call against its chunk's ready time."""

    backlog: int  # the backlog's chunks not yet answered when the task's chunk was ready
    wait_s: float  # from its chunk ready to its first call's start
    completions: int  # calls answered meanwhile
    task_s: float  # submit -> COMPLETED as `docsum` sees it
    depth: int  # its calls, one after another
    to_ready_s: float  # submit -> its chunk ready (upload, parse, cut)
    after_s: float  # its last call's answer -> COMPLETED as `docsum` sees it (store, merge, finish, stream)
    call_s: float  # the stand-in's time for every call

    @property
    def calls_s(self) -> float:
        return self.task_s - self.to_ready_s - self.wait_s - self.after_s

    def shown(self) -> str:
        c = self.call_s
        return (f"first call {self.wait_s / c:.1f} calls' time ({self.completions} completions) after its"
                f" chunk was ready, behind {self.backlog:,} chunks; done in {self.task_s / c:.1f} calls' time"
                f" (depth {self.depth}: to its chunk ready {self.to_ready_s / c:.1f}, to its first call"
                f" {self.wait_s / c:.1f}, its calls {self.calls_s / c:.1f}, from the last answer to done"
                f" {self.after_s / c:.1f})")  # fmt: skip


@dataclass(frozen=True)
class Newcomers:
    """Several one-page tasks, one after another, behind the same backlog: each met the calls in flight at
    another point of their round (a fixed-time stand-in answers the calls started together together), so
    the wait for a slot is a draw between none and one call; the median and the worst of them."""

    each: list[Behind]

    @property
    def call_s(self) -> float:
        return self.each[0].call_s

    def median(self, value: Callable[[Behind], float]) -> float:
        return statistics.median(value(b) for b in self.each)

    def worst(self, value: Callable[[Behind], float]) -> float:
        return max(value(b) for b in self.each)

    @property
    def first_call(self) -> float:
        """The median newcomer's first call after its chunk was ready, in calls' time."""
        return self.median(lambda b: b.wait_s) / self.call_s

    @property
    def passed(self) -> bool:
        """The median newcomer's first call within one call's time of its chunk ready, and its task done
        within (its depth + 1) calls' time."""
        return (self.first_call <= 1
                and self.median(lambda b: b.task_s - (b.depth + 1) * b.call_s) <= 0)  # fmt: skip

    def shown(self) -> str:
        if len(self.each) == 1:
            return self.each[0].shown()
        c = self.call_s
        wait, done = (lambda b: b.wait_s), (lambda b: b.task_s)
        hops = {"to its chunk ready": lambda b: b.to_ready_s, "to its first call": wait,
                "its calls": lambda b: b.calls_s, "from the last answer to done": lambda b: b.after_s}  # fmt: skip
        return (f"{len(self.each)} newcomers, median (worst): first call {self.median(wait) / c:.1f}"
                f" ({self.worst(wait) / c:.1f}) calls' time after its chunk was ready, done in"
                f" {self.median(done) / c:.1f} ({self.worst(done) / c:.1f}) calls' time at depth"
                f" {max(b.depth for b in self.each)}; the hops' medians: "
                + ", ".join(f"{name} {self.median(value) / c:.1f}" for name, value in hops.items())
                + "; each one done in " + ", ".join(f"{b.task_s / c:.1f}" for b in self.each))  # fmt: skip


def behind_backlog(
    bench: Bench,
    order: str,
    *,
    newcomer: str,
    run: str,
    tasks: int = 1,
    options: dict[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Newcomers:
    """alice's backlog cut and being served, then `tasks` one-page tasks of `newcomer`'s (with `options`),
    each submitted once the one before is done, a random fraction of a call later."""
    owners = Owners(bench, ["alice", newcomer], run)
    ordered(bench, order, env=env)
    backlog_mark = new_marker()
    chunks = B12_CHUNKS if newcomer != "alice" else B15_URGENT_BACKLOG
    backlog = owners.submit("alice", [text_of(bench, chunks, backlog_mark)])
    total = owners.cut([backlog])
    while len(attribute(bench.llm.llm.entries(200), {backlog_mark: "alice"})) < 48:  # served for 3 rounds
        time.sleep(0.05)
    each = []
    draw = random.Random(bench.seed)
    for _ in range(tasks):
        time.sleep(draw.random() * NEWCOMER_CALL_S)
        mark = new_marker()
        started = time.time()  # the stand-in's ledger and the database's clocks are the wall's too
        task_id = owners.submit(newcomer, [text_of(bench, 1, mark)], options=options)
        owners.wait(newcomer, task_id)
        seen = time.time()
        ready = owners.ready_at(task_id)
        ledger = bench.llm.llm.entries()
        own = sorted(attribute(ledger, {mark: newcomer}), key=lambda c: c.started)
        served_before = sum(1 for c in attribute(ledger, {backlog_mark: "alice"}) if c.finished <= ready)
        first, answered = own[0].started, max(c.finished for c in own)
        each.append(Behind(
            total - served_before, first - ready, completions_between(ledger, ready, first), seen - started,
            len(own), ready - started, seen - answered, NEWCOMER_CALL_S,
        ))  # fmt: skip
    owners.cancel_all()
    owners.close()
    return Newcomers(each)


def b12(bench: Bench) -> list[Figure]:
    bench.llm.llm.configure(latency_s=NEWCOMER_CALL_S, jitter_s=0.0)
    runs = {order: behind_backlog(bench, order, newcomer="bob", run=f"b12-{order}",
                                  tasks=NEWCOMERS if order == "fair" else 1) for order in ORDERS}  # fmt: skip
    narrow = behind_backlog(bench, "fair", newcomer="bob", run="b12narrow-fair", tasks=NEWCOMERS, env=NARROW)
    restored(bench)
    fair = runs["fair"]
    return [Figure(
        "B12", f"owner B's one-page task behind A's backlog ({B12_CHUNKS:,} chunks, scaled from 10,000;"
        f" {NEWCOMER_CALL_S * 1000:.0f} ms calls, 16 in flight)", fair.first_call,
        f"fair: {fair.shown()}; FIFO: {runs['fifo'].shown()}; fair with DOCSUM_ADMISSION_WINDOW=16: {narrow.shown()}",
        "median newcomer: first call ≤ 1 call's time after ready; done ≤ (depth + 1) calls' time", fair.passed,
    )]  # fmt: skip


# --- B13 and B15: owners backlogged together ------------------------------------------------------------


@dataclass(frozen=True)
class Together:
    calls: list[Served]
    start: float  # the span's
    end: float
    largest: int  # the largest request's tokens
    per_call: dict[str, float]  # tokens of an owner's average call


def backlogged(
    bench: Bench,
    order: str,
    backlogs: Mapping[str, tuple[int, int, int]],
    span_s: float,
    run: str,
    weights: Mapping[str, float] | None = None,
) -> Together:
    """Each owner's backlog ({owner: (chunks, chunk characters, tasks)}) cut while the summarizer is
    stopped, in this order; then the summarizer started in `order` (with the owners' `weights`), and the
    calls answered over `span_s` while every owner still has work."""
    owners = Owners(bench, list(backlogs), run)
    env = {"DOCSUM_OWNER_WEIGHTS": ",".join(f"{owner(o, run)}={w:g}" for o, w in (weights or {}).items())}
    ordered(bench, order, start=False)
    markers: dict[str, str] = {}
    submitted: list[str] = []
    chunk_chars = 2_000
    for name, (chunks, chars, tasks) in backlogs.items():
        if chars != chunk_chars:
            bench.restart("chunker", DOCSUM_CHUNK_CHARS=str(chars), DOCSUM_OVERLAP_CHARS=str(chars // 10))
            chunk_chars = chars
        marker = new_marker()
        markers[marker] = name
        per_task = max(1, chunks // tasks)
        for _ in range(tasks):
            submitted.append(owners.submit(name, [text_of(bench, per_task, marker, chars)]))
        owners.cut(submitted)  # in turn: each owner's chunks ready after the one before's
    if chunk_chars != 2_000:
        bench.restart("chunker")
    if weights:  # the merger charges its calls at the owners' weights too
        bench.restart("merger", **env)
    begun = time.time()
    ordered(bench, order, env=env)
    while not [c for c in attribute(bench.llm.llm.entries(200), markers) if c.started >= begun]:
        time.sleep(0.1)
    time.sleep(WARM_S + span_s + 2 * CALL_S)  # from about the first call's answer
    calls = attribute(bench.llm.llm.entries(), markers)
    owners.cancel_all()
    owners.close()
    calls = [c for c in calls if c.started >= begun]
    first = min(c.started for c in calls)
    start = first + WARM_S
    end = min(start + span_s, backlogged_until(calls, list(backlogs)) if order == "fair" else start + span_s)
    inside = [c for c in calls if start <= c.finished < end]
    per_call = {o: sum(c.tokens for c in inside if c.owner == o) / max(1, sum(c.owner == o for c in inside))
                for o in backlogs}  # fmt: skip
    return Together(calls, start, end, max((c.tokens for c in inside), default=0), per_call)


def b13(bench: Bench) -> list[Figure]:
    bench.llm.llm.configure(latency_s=CALL_S, jitter_s=0.0)
    owners = list(B13_CHUNK_CHARS)
    backlogs = {o: (B13_CALLS[o], B13_CHUNK_CHARS[o], 1) for o in owners}
    runs = {order: backlogged(bench, order, backlogs, B13_SPAN_S if order == "fair" else FIFO_SPAN_S, f"b13-{order}")
            for order in ORDERS}  # fmt: skip
    restored(bench)
    figures = {}
    for order, run in runs.items():
        n = int((run.end - run.start) // WINDOW_S)
        windows = tallies(run.calls, owners, run.start, WINDOW_S, n)
        total = shares(run.calls, owners, run.start, run.start + n * WINDOW_S)
        figures[order] = (jain_index(total.values()), widest_gap(windows), run, windows, n)
    jain, gap, fair, windows, n = figures["fair"]
    fifo_jain, fifo_gap, fifo, _, fifo_n = figures["fifo"]
    sizes = ", ".join(f"{o} {B13_CHUNK_CHARS[o]} chars ({fair.per_call[o]:.0f} tokens a call)" for o in owners)
    table = "| window | " + " | ".join(owners) + " |\n|---|" + "---|" * len(owners) + "\n" + "\n".join(
        f"| {i * WINDOW_S:.0f}–{(i + 1) * WINDOW_S:.0f} s | " + " | ".join(f"{w[o]:,}" for o in owners) + " |"
        for i, w in enumerate(windows)
    )  # fmt: skip
    passed = n >= 1 and jain >= 0.99 and gap <= 2 * fair.largest
    return [Figure(
        "B13", f"3 owners, chunks of {sizes}, backlogged together; {n} windows of {WINDOW_S:.0f} s"
        f" (the issue's 60 s scaled to {B13_SPAN_S:.0f})", jain,
        f"fair: Jain's index {jain:.3f}, widest difference in a window {gap:,.0f} tokens = "
        f"{gap / max(1, fair.largest):.1f}× the largest request ({fair.largest:,}); FIFO: Jain's index"
        f" {fifo_jain:.3f}, widest difference {fifo_gap:,.0f} = {fifo_gap / max(1, fifo.largest):.1f}× ({fifo_n}"
        f" window{'s' if fifo_n != 1 else ''})", "Jain ≥ 0.99; difference ≤ 2× the largest request", passed,
        f"Tokens served per owner and window (fair order, by the call's answer):\n\n{table}",
    )]  # fmt: skip


# --- B14: a lone owner -----------------------------------------------------------------------------------


def b14(bench: Bench) -> list[Figure]:
    """The same text with each order in turns, three times, then once in the fair order with a window
    of 16; chunks per second of each task, submit → COMPLETED, the best of each."""
    bench.llm.llm.configure(latency_s=CALL_S, jitter_s=0.0)
    runs: list[tuple[str, str, Mapping[str, str]]] = [("FIFO", "fifo", {}), ("fair", "fair", {})] * B14_TURNS
    runs.append(("fair, window 16", "fair", NARROW))
    rates: dict[str, list[float]] = {}
    for name, order, env in runs:
        ordered(bench, order, env=env)
        bench.run_task([("warm-up.txt", bench.text(30_000).encode())])
        seconds, task = bench.run_task([("b14.txt", bench.text(B14_CHARS).encode())])
        rates.setdefault(name, []).append(bench.chunks_of(task) / seconds)
    restored(bench)
    fair, fifo = max(rates["fair"]), max(rates["FIFO"])
    ratio = fair / fifo
    shown = "; ".join(f"{name} {', '.join(f'{r:.0f}' for r in rates[name])} chunks/s" for name in rates)
    shown += f"; fair with window 16 ÷ FIFO {max(rates['fair, window 16']) / fifo:.2f}"
    return [Figure(
        "B14", f"a lone owner's throughput, fair ÷ FIFO ({B14_CHARS:,} characters, {CALL_S * 1000:.0f} ms calls,"
        f" 16 in flight; in turns, best of {B14_TURNS})", ratio, f"{ratio:.2f} ({shown})", f"≥ {B14_GOAL}",
        ratio >= B14_GOAL,
    )]  # fmt: skip


# --- B15: weights, splitting, urgent ---------------------------------------------------------------------


def _percent(gain: float, chunks: float) -> str:
    """A gain over all calls and over chunks' calls, as shown."""
    if math.isnan(gain):
        return "none (neither carol nor dave served in the span)"
    return f"{gain:+.1%} ({chunks:+.1%})"


def b15(bench: Bench) -> list[Figure]:
    bench.llm.llm.configure(latency_s=CALL_S, jitter_s=0.0)
    backlogs = {o: (n, 2_000, B15_SPLIT if o == "dave" else 1) for o, n in B15_CHUNKS.items()}
    owners = list(backlogs)
    split: dict[str, tuple[float, float, float]] = {}
    for order in ORDERS:
        run = backlogged(bench, order, backlogs, B15_SPAN_S if order == "fair" else FIFO_SPAN_S, f"b15-{order}",
                         B15_WEIGHTS)  # fmt: skip
        served = shares(run.calls, owners, run.start, run.end)
        alice = served["alice"] / max(1, served["alice"] + served["bob"])
        gain = served["dave"] / served["carol"] - 1 if served["carol"] else float("nan")
        chunks = shares(run.calls, owners, run.start, run.end, chunks_only=True)
        chunk_gain = chunks["dave"] / chunks["carol"] - 1 if chunks["carol"] else float("nan")
        split[order] = (alice, gain, chunk_gain)
    bench.llm.llm.configure(latency_s=NEWCOMER_CALL_S, jitter_s=0.0)  # a newcomer's time: as B12's
    urgent = {order: behind_backlog(bench, order, newcomer="alice", run=f"b15urgent-{order}",
                                    options={"priority": "urgent"}, tasks=NEWCOMERS if order == "fair" else 1)
              for order in ORDERS}  # fmt: skip
    restored(bench)
    bench.restart("merger")
    (alice, gain, chunk_gain), (fifo_alice, fifo_gain, fifo_chunk_gain) = split["fair"], split["fifo"]
    u, fifo_u = urgent["fair"], urgent["fifo"]
    passed = abs(alice - 0.75) <= 0.05 and gain < 0.05 and u.first_call <= 1
    return [Figure(
        "B15", f"weights alice=3 (75/25 of alice and bob); dave's backlog over {B15_SPLIT} tasks against carol's"
        f" one; urgent one-page tasks behind their owner's normal backlog ({B15_URGENT_BACKLOG:,} chunks,"
        f" {NEWCOMER_CALL_S * 1000:.0f} ms calls)", alice,
        f"fair: alice {alice:.1%} of alice and bob, dave's gain {gain:+.1%} (chunks' calls only: {chunk_gain:+.1%};"
        f" the rest his 100 tasks' merges), urgent tasks: {u.shown()}; FIFO: alice {fifo_alice:.1%}, dave's gain"
        f" {_percent(fifo_gain, fifo_chunk_gain)}, urgent task: {fifo_u.shown()}",
        "75% ± 5; gain < 5%; the median urgent task's first call ≤ 1 call's time after ready", passed,
    )]  # fmt: skip
