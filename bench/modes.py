"""B11 — modes: the same documents summarized once per mode (realtime, flex, batch), for what each costs
and how long each takes to complete.

Each mode's copy of the documents carries a word of its own (all of one length), so no answer of one
mode is taken from the result cache by another while every copy has the same size. The services are
restarted with the prices and the batch driver's timings, so a one-page task in each mode goes first,
untimed: the first task after a start pays for connections and group joins. The stand-in answers
a call after `CALL_S` at every tier (it has no latency of its own for flex) and runs a batch on a clock
scaled by `SCALE`: `BATCH_CLOCK` is in provider seconds.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.fake_batches import cost_by_tier
from tests.integration.helpers import calls, marked_text, new_marker

if TYPE_CHECKING:
    from bench.run import Bench

MODES = ("realtime", "flex", "batch")
CALL_S = 0.1  # every realtime or flex call
SCALE = 1 / 360  # real seconds per provider second: a provider minute lasts 1/6 s
# A small batch as a provider runs it: a minute validating, ten minutes for all its lines, a minute
# finalizing; 12 provider minutes, 2 s here.
BATCH_CLOCK = {"batch_validating_s": 60.0, "batch_in_progress_s": 600.0, "batch_finalizing_s": 60.0}
PRICES = {"stand-in-1": [2.0, 8.0]}  # USD per million prompt and completion tokens
# The services: prices to turn usage into cost, and a batch driver that looks every 0.2 s (72 provider
# seconds) and sends a task's lines 0.3 s after the last one arrived.
MODES_ENV = {
    "DOCSUM_LLM_PRICES": json.dumps(PRICES),
    "DOCSUM_LLM_BATCH_POLL_S": "0.2",
    "DOCSUM_LLM_BATCH_GATHER_S": "0.3",
    "DOCSUM_LLM_BATCH_DEADLINE_MARGIN_S": "0",
}
DOCUMENT_CHARS = (24_000, 16_000, 10_000)  # ~30 chunks in all
GOAL = 0.56  # flex and batch cost at most this share of realtime's


@dataclass(frozen=True)
class ModeRun:
    mode: str
    status: str
    documents: tuple[tuple[str, str], ...]  # (filename, status)
    chunks: int
    cost_usd: float  # the task's usage.cost_usd
    ledger_usd: float  # what the stand-in's ledger billed for the calls of this copy
    calls_by_tier: tuple[tuple[str, int], ...]
    seconds: float  # submit -> COMPLETED as `docsum` sees it
    batches: int
    batch_s: float  # real seconds from the first batch's creation to the last one's completion (nan: none)

    @property
    def statuses(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.status, self.documents


@dataclass(frozen=True)
class ModesResult:
    runs: tuple[ModeRun, ...]

    def run(self, mode: str) -> ModeRun:
        return next(r for r in self.runs if r.mode == mode)

    def ratio(self, mode: str) -> float:
        return self.run(mode).cost_usd / self.run("realtime").cost_usd

    @property
    def worst(self) -> float:
        return max(self.ratio("flex"), self.ratio("batch"))

    @property
    def same_statuses(self) -> bool:
        return len({r.statuses for r in self.runs}) == 1

    @property
    def passed(self) -> bool:
        return self.worst <= GOAL and self.same_statuses

    def shown(self) -> str:
        realtime, flex, batch = (self.run(m) for m in MODES)
        statuses = "same statuses" if self.same_statuses else "statuses differ"
        return (
            f"flex {self.ratio('flex'):.2f}×, batch {self.ratio('batch'):.2f}× realtime's cost; {statuses}"
            f" ({realtime.status}); completed in: realtime {realtime.seconds:.1f}s, flex {flex.seconds:.1f}s,"
            f" batch {batch.seconds:.1f}s (its batch {batch.batch_s:.1f}s of it = {batch.batch_s / SCALE / 60:.0f}"
            " provider min)"
        )

    def table(self) -> str:
        rows = [
            f"The same {len(DOCUMENT_CHARS)} documents ({self.run('realtime').chunks} chunks) once per mode. The"
            f" stand-in: {CALL_S * 1000:.0f} ms a call at the realtime and at the flex tier (it has no flex"
            " latency of its own: flex latency = realtime here); a batch validates"
            f" {BATCH_CLOCK['batch_validating_s']:.0f} s, runs all its lines in"
            f" {BATCH_CLOCK['batch_in_progress_s']:.0f} s and finalizes in {BATCH_CLOCK['batch_finalizing_s']:.0f} s"
            f" of provider time on a clock scaled 1/{1 / SCALE:.0f} (a provider minute lasts"
            f" {60 * SCALE:.2f} s); the batch driver looks every {MODES_ENV['DOCSUM_LLM_BATCH_POLL_S']} s and"
            f" gathers a task's lines for {MODES_ENV['DOCSUM_LLM_BATCH_GATHER_S']} s. Prices: {PRICES['stand-in-1'][0]}"
            f" / {PRICES['stand-in-1'][1]} USD per million prompt / completion tokens, flex and batch at half.",
            "",
            "| mode | final status | cost (task) | cost (stand-in's ledger) | ÷ realtime | calls by tier"
            " | time to completion |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.runs:
            tiers = ", ".join(f"{tier} {n}" for tier, n in r.calls_by_tier)
            took = f"{r.seconds:.1f} s"
            if r.batches:
                took += (
                    f" ({r.batches} batch{'es' if r.batches > 1 else ''}: {r.batch_s:.1f} s of it from created to"
                    f" completed = {r.batch_s / SCALE / 60:.1f} provider minutes)"
                )
            rows.append(
                f"| {r.mode} | {r.status} | ${r.cost_usd:.5f} | ${r.ledger_usd:.5f} | {self.ratio(r.mode):.3f}"
                f" | {tiers} | {took} |"
            )
        return "\n".join(rows)


def measure(bench: Bench) -> ModesResult:
    """Runs the documents once per mode on the stack restarted with `MODES_ENV`, then restarts it as it was."""
    provider = bench.llm.llm
    knobs: dict[str, Any] = {"latency_s": CALL_S, "jitter_s": 0.0, "prices": PRICES, "batch_time_scale": SCALE}
    knobs.update(BATCH_CLOCK)
    before = provider.config()
    provider.configure(**knobs)
    _restart_all(bench, MODES_ENV)
    try:
        for mode in MODES:
            bench.run_task([(f"warm-{mode}.txt", bench.text(1_800).encode())], options={"mode": mode})
        seed = bench.seed
        bench.seed += len(DOCUMENT_CHARS)
        return ModesResult(tuple(_run_mode(bench, mode, seed) for mode in MODES))
    finally:
        _restart_all(bench, {})
        provider.configure(**{name: before[name] for name in knobs})


def _restart_all(bench: Bench, env: dict[str, str]) -> None:
    """Every service of the bench's stack stopped side by side and started again with `env`."""
    stack = bench.stack
    names = list(stack.processes)
    stack.stop_all()
    for name in names:
        stack.start(name, **env)
    bench.wait_ready(stack)


def _run_mode(bench: Bench, mode: str, seed: int) -> ModeRun:
    provider = bench.llm.llm
    marker = new_marker()
    files = [
        (f"{mode}-{i}.txt", marked_text(chars, seed + i, marker).encode()) for i, chars in enumerate(DOCUMENT_CHARS)
    ]
    since = time.time()
    seconds, task = bench.run_task(files, options={"mode": mode})
    provider.wait_idle()
    by_tier = cost_by_tier(calls(provider, marker), PRICES)
    batches = [b for b in provider.batch_times() if b["created"] >= since]
    done = [b["completed_at"] for b in batches if b["completed_at"] is not None]
    batch_s = max(done) - min(b["created"] for b in batches) if done else math.nan
    return ModeRun(
        mode=mode,
        status=task["status"],
        # Each mode's copies are named after it: the statuses are compared by the documents' order.
        documents=tuple((f"document {i}", d["status"]) for i, d in enumerate(task["documents"])),
        chunks=bench.chunks_of(task),
        cost_usd=float(task["usage"]["cost_usd"]),
        ledger_usd=sum(t["cost_usd"] for t in by_tier.values()),
        calls_by_tier=tuple(sorted((tier, t["calls"]) for tier, t in by_tier.items())),
        seconds=seconds,
        batches=len(batches),
        batch_s=batch_s,
    )
