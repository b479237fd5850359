"""B17 — versions: what summarizing an edited document again costs its owner.

A 100-page text (one paragraph a page) is summarized once; then each edit of it is submitted again, under
the same file name and by the same owner, whose result cache answers every request it has seen: one
sentence added to a paragraph in the middle, one paragraph inserted at the top, the last paragraph
deleted. The figure is the LLM calls the stand-in answered for each edit: the requests the edit made new.
Then the same pages printed as a PDF (a running title over every page, "Page N of 100 · printed <date>"
under it) are summarized, and printed again on another day: only the footers' dates differ, which the
parser keeps out of the text (running lines), so the reprint should cost nothing.

It runs twice: with the services as they are (no context budget: a document's chunk summaries are
merged in one call), and restarted with a context budget small enough that the chunk summaries are
merged in groups, level by level (`MERGE_BUDGET_ENV`); each run's prose carries a word of its own, so
nothing of one run is answered from the cache by the other.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.modes import _restart_all
from tests.documents import english_prose, printed_report
from tests.integration.helpers import calls, new_marker

if TYPE_CHECKING:
    from bench.run import Bench

PAGES = 100
PAGE_CHARS = 900  # a page's paragraph is at least this long (~60 chunks of 2,000 characters in all)
GOAL = 9  # LLM calls per edit, at most
# Small enough that ~60 chunk summaries do not fit one merge request, large enough for a chunk's.
MERGE_BUDGET_ENV = {"DOCSUM_LLM_CONTEXT_TOKENS": "1600"}
FILENAME = "report.txt"
PRINTED = ("2026-11-30", "2026-12-06")  # the PDF's first printing, and its reprint's
TITLE = "Quarterly Operations Review"


@dataclass(frozen=True)
class Edit:
    name: str
    chunks: int  # the edited document's chunks
    calls: int  # answered by the stand-in for it: the requests the edit made new
    chunk_calls: int
    status: str


@dataclass(frozen=True)
class VersionsRun:
    setting: str
    first: Edit  # the first version
    edits: tuple[Edit, ...]
    printed: Edit  # the pages printed as a PDF, first summarized
    reprint: Edit  # the same PDF printed on another day: its footers' dates alone differ (goal: no call)


@dataclass(frozen=True)
class VersionsResult:
    runs: tuple[VersionsRun, ...]

    @property
    def worst(self) -> int:
        return max(e.calls for r in self.runs for e in r.edits)

    @property
    def passed(self) -> bool:
        return (
            self.worst <= GOAL
            and all(r.reprint.calls == 0 for r in self.runs)
            and all(e.status == "COMPLETED" for r in self.runs for e in (r.first, *r.edits, r.printed, r.reprint))
        )

    def shown(self) -> str:
        return "; ".join(
            f"{r.setting}: "
            + ", ".join(f"{e.name} {e.calls}" for e in (*r.edits, r.reprint))
            + f" (first {r.first.calls})"
            for r in self.runs
        )

    def table(self) -> str:
        rows = [
            f"A {PAGES}-page text (one paragraph of ≥ {PAGE_CHARS:,} characters a page) summarized once, then each"
            " edit submitted again by the same owner under the same name: the calls the stand-in answered for it"
            " (the rest came from the owner's result cache).",
            "",
            "| setting | document | chunks | LLM calls | of them chunk summaries | merges | status |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.runs:
            for e in (r.first, *r.edits, r.printed, r.reprint):
                rows.append(
                    f"| {r.setting} | {e.name} | {e.chunks} | {e.calls} | {e.chunk_calls} |"
                    f" {e.calls - e.chunk_calls} | {e.status} |"
                )
        return "\n".join(rows)


def pages(seed: int, marker: str) -> list[str]:
    """`PAGES` paragraphs of English prose, each sentence carrying `marker` (every prompt made from them,
    chunk or merge, then carries it too)."""
    sentences = re.split(r"(?<=[.!?]) ", english_prose(PAGES * (PAGE_CHARS + 200), seed=seed).replace("\n\n", " "))
    out: list[str] = []
    page: list[str] = []
    for s in sentences:
        page.append(f"{marker} {s[:-1]} {marker}{s[-1]}")
        if sum(len(p) + 1 for p in page) >= PAGE_CHARS:
            out.append(" ".join(page))
            page = []
            if len(out) == PAGES:
                break
    return out


def edits(base: list[str], seed: int, marker: str) -> list[tuple[str, list[str]]]:
    """The edits of `base`: (name, pages)."""
    rng = random.Random(seed)
    extra = [
        f"{marker} {s[:-1]} {marker}{s[-1]}"
        for s in re.split(r"(?<=[.!?]) ", english_prose(PAGE_CHARS * 2, seed=seed + 1).replace("\n\n", " "))
    ]
    middle = PAGES // 2
    sentences = base[middle].split(f"{marker}. ")
    at = rng.randrange(1, len(sentences))
    added = f"{marker}. ".join([*sentences[:at], extra[0].removesuffix("."), *sentences[at:]])
    top = extra[1]  # a new page: one paragraph as long as the others
    for sentence in extra[2:]:
        if len(top) >= PAGE_CHARS:
            break
        top += " " + sentence
    return [
        ("one sentence added mid-document", [*base[:middle], added, *base[middle + 1 :]]),
        ("one paragraph inserted at the top", [top, *base]),
        ("the last paragraph deleted", base[:-1]),
    ]


def measure(bench: Bench) -> VersionsResult:
    runs = [_run(bench, "no context budget")]
    _restart_all(bench, MERGE_BUDGET_ENV)
    try:
        runs.append(_run(bench, f"context {MERGE_BUDGET_ENV['DOCSUM_LLM_CONTEXT_TOKENS']} tokens"))
    finally:
        _restart_all(bench, {})
    return VersionsResult(tuple(runs))


def _run(bench: Bench, setting: str) -> VersionsRun:
    bench.llm.llm.configure(latency_s=0.0, jitter_s=0.0)
    marker = new_marker()
    bench.seed += 2
    base = pages(bench.seed, marker)
    first = _submit(bench, marker, "first version", base)
    done = tuple(_submit(bench, marker, name, edited) for name, edited in edits(base, bench.seed, marker))
    printed = _submit(bench, marker, "printed as a PDF", base, printed_on=PRINTED[0])
    reprinted = _submit(bench, marker, "the PDF reprinted: only its footers' date changed", base, printed_on=PRINTED[1])
    return VersionsRun(setting, first, done, printed, reprinted)


def _submit(bench: Bench, marker: str, name: str, paragraphs: list[str], *, printed_on: str | None = None) -> Edit:
    """One submission of `paragraphs` (as text, or `printed_on` a day as a PDF, a page each): the calls the
    stand-in answered for it (a chunk's prompt holds a <text> section, a merge's does not)."""
    since = time.time()
    if printed_on is None:
        document = (FILENAME, "\n\n".join(paragraphs).encode())
    else:
        document = (FILENAME.replace(".txt", ".pdf"), printed_report(paragraphs, printed_on, TITLE))
    _, task = bench.run_task([document])
    bench.llm.llm.wait_idle()
    answered = calls(bench.llm.llm, marker, since=since)
    chunk_calls = sum(1 for e in answered if "<text>\n" in e.prompt)
    return Edit(name, bench.chunks_of(task), len(answered), chunk_calls, task["status"])
