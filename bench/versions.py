"""B17 — versions: what summarizing an edited document again costs its owner.

A 100-page text (one paragraph a page) is summarized once; then each edit of it is submitted again, under
the same file name and by the same owner, as a new version of it (`previous_task`: the chunker keeps each
chunk of the first version's it finds again), and the owner's result cache answers every request it has seen: one
sentence added to a paragraph in the middle, one paragraph inserted at the top, the last paragraph
deleted. The figure is the LLM calls the stand-in answered for each edit: the requests the edit made new.
Then the same pages printed as a PDF (a running title over every page, "Page N of 100 · printed <date>"
under it) are summarized, and printed again on another day: only the footers' dates differ, which the
parser keeps out of the text (running lines), so the reprint should cost nothing.

It runs twice: with the services as they are (no context budget: a document's chunk summaries are
merged in one call), and restarted with a context budget small enough that the chunk summaries are
merged in groups, level by level (`MERGE_BUDGET_ENV`); each run's prose carries a word of its own, so
nothing of one run is answered from the cache by the other.

Beside the calls, what the edit's owner reads of it, through the gateway as a user does: of the sentences
of the edited version's document summary (and of its chunk summaries, read from the database: the API
does not show them) whose every source is on a page the edit left as it was (`untouched_pages`, in the
new version's numbers), the share byte-identical to a sentence of the first version's summary at the same
level; and every source of the document's and the task's summary (and of the chunk summaries) resolved
through the quote route (`GET /v1/tasks/{task}/documents/{document}/text`), the passage it returns
checked to be on the cited pages of the new version (`on_pages`).
"""

from __future__ import annotations

import asyncio
import difflib
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx

from bench.modes import _restart_all
from docsum_shared.cited import from_json
from tests.documents import english_prose, printed_report
from tests.integration.helpers import calls, new_marker

if TYPE_CHECKING:
    from bench.run import Bench

PAGES = 100
PAGE_CHARS = 900  # a page's paragraph is at least this long (~60 chunks of 2,000 characters in all)
GOAL = 9  # LLM calls per edit, at most
KEPT_GOAL = 0.95  # of the sentences about untouched pages, the share byte-identical to the first version's
# Small enough that ~60 chunk summaries do not fit one merge request, large enough for a chunk's.
MERGE_BUDGET_ENV = {"DOCSUM_LLM_CONTEXT_TOKENS": "1600"}
FILENAME = "report.txt"
PRINTED = ("2026-11-30", "2026-12-06")  # the PDF's first printing, and its reprint's
TITLE = "Quarterly Operations Review"
# The same three edits' calls before docsum chose its cuts and merge groups by the content (packed greedily
# from the start, grouped by position), measured on the main of the day on a 100-page text of 61 chunks
# (62 calls the first time): the figure the goal was set against, which the code no longer has a switch for.
BEFORE = "before content-defined cuts and groups: 2, 63 and 2 calls (of 62 the first time)"


@dataclass(frozen=True)
class Kept:
    """Of a summary's sentences about untouched pages (every source on a page the edit left as it was),
    how many are byte-identical to a sentence of the first version's summary at the same level."""

    identical: int
    about: int
    changed: tuple[str, ...] = ()  # the others: each one's text and the pages it cites

    @property
    def share(self) -> float:
        return self.identical / self.about if self.about else 1.0

    def shown(self) -> str:
        return f"{self.identical}/{self.about} ({100 * self.share:.1f} %)"


@dataclass(frozen=True)
class Resolved:
    """The sources of a version's summaries, each asked of the quote route: how many returned a passage
    that is on the cited pages of the version's text, and what became of the others."""

    resolved: int
    sources: int
    failures: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edit:
    name: str
    chunks: int  # the edited document's chunks
    calls: int  # answered by the stand-in for it: the requests the edit made new
    chunk_calls: int
    status: str
    # Against the first version (the printed PDF, for its reprint); None for a first version.
    document: Kept | None = None  # the document summary's sentences
    chunk_summaries: Kept | None = None  # the chunk summaries' sentences
    untouched: int = 0  # pages the edit left as they were
    resolved: Resolved = field(default_factory=lambda: Resolved(0, 0))  # the document's and task's summaries'
    chunks_resolved: Resolved = field(default_factory=lambda: Resolved(0, 0))  # the chunk summaries'


@dataclass(frozen=True)
class VersionsRun:
    setting: str
    first: Edit  # the first version
    edits: tuple[Edit, ...]
    printed: Edit  # the pages printed as a PDF, first summarized
    reprint: Edit  # the same PDF printed on another day: its footers' dates alone differ (goal: no call)

    @property
    def compared(self) -> tuple[Edit, ...]:
        return (*self.edits, self.reprint)


@dataclass(frozen=True)
class VersionsResult:
    runs: tuple[VersionsRun, ...]

    @property
    def worst(self) -> int:
        return max(e.calls for r in self.runs for e in r.edits)

    @property
    def least_kept(self) -> float:
        """The lowest share of document-summary sentences about untouched pages kept word for word."""
        return min(e.document.share for r in self.runs for e in r.compared if e.document is not None)

    @property
    def unresolved(self) -> int:
        return sum(
            x.sources - x.resolved for r in self.runs for e in r.compared for x in (e.resolved, e.chunks_resolved)
        )

    @property
    def passed(self) -> bool:
        return (
            self.worst <= GOAL
            and all(r.reprint.calls == 0 for r in self.runs)
            and all(e.status == "COMPLETED" for r in self.runs for e in (r.first, *r.edits, r.printed, r.reprint))
            and self.least_kept >= KEPT_GOAL
            and self.unresolved == 0
        )

    def shown(self) -> str:
        def one(e: Edit) -> str:
            kept = f" ({e.document.identical}/{e.document.about} identical)" if e.document is not None else ""
            return f"{e.name} {e.calls}{kept}"

        calls = "; ".join(
            f"{r.setting}: " + ", ".join(one(e) for e in r.compared) + f" (first {r.first.calls})" for r in self.runs
        )
        sources = sum(x.sources for r in self.runs for e in r.compared for x in (e.resolved, e.chunks_resolved))
        return (
            f"{calls}; the least share identical {100 * self.least_kept:.1f} %; sources resolved through the quote"
            f" route {sources - self.unresolved} of {sources}; {BEFORE}"
        )

    def table(self) -> str:
        rows = [
            f"A {PAGES}-page text (one paragraph of ≥ {PAGE_CHARS:,} characters a page) summarized once, then each"
            " edit submitted again by the same owner under the same name: the calls the stand-in answered for it"
            " (the rest came from the owner's result cache). Against the first version (the printed PDF for its"
            " reprint): of the sentences whose every source is on a page the edit left as it was (untouched"
            " pages, in the new version's numbers), those byte-identical to a sentence of the first version's"
            " summary at the same level — the document summary as the task's view shows it, the chunk summaries"
            " as the database holds them; and every source of the task's, the document's and the chunks' summaries"
            " asked of the quote route, its passage checked to be on the cited pages of the new version's text.",
            "",
            "| setting | document | chunks | LLM calls | of them chunk summaries | merges | status | untouched pages"
            " | document summary: identical / about untouched | chunk summaries: identical / about untouched"
            " | sources resolved: summary | chunk summaries |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        notes: list[str] = []
        for r in self.runs:
            for e in (r.first, *r.edits, r.printed, r.reprint):
                kept = (
                    f" {e.untouched} | {e.document.shown()} | {e.chunk_summaries.shown()} |"
                    f" {e.resolved.resolved} of {e.resolved.sources} |"
                    f" {e.chunks_resolved.resolved} of {e.chunks_resolved.sources} |"
                    if e.document is not None and e.chunk_summaries is not None
                    else " | | | | |"
                )
                rows.append(
                    f"| {r.setting} | {e.name} | {e.chunks} | {e.calls} | {e.chunk_calls} |"
                    f" {e.calls - e.chunk_calls} | {e.status} |{kept}"
                )
                for level, k in (("document summary's", e.document), ("chunk summaries'", e.chunk_summaries)):
                    if k is not None and k.changed:
                        notes.append(
                            f"- {r.setting}, {e.name}: the {level} sentences about untouched pages that no sentence"
                            " of the first version's is: " + "; ".join(k.changed[:5])
                        )
                failures = (*e.resolved.failures, *e.chunks_resolved.failures)
                if failures:
                    notes.append(f"- {r.setting}, {e.name}: sources not resolved: " + "; ".join(failures[:5]))
        return "\n".join(rows + ([""] + notes if notes else []))


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


def untouched_pages(before: Sequence[str], after: Sequence[str]) -> frozenset[int]:
    """The pages of `after` (from 1) that an edit of `before` left as they were: those in the runs of
    pages the two share in the same order (an inserted page shifts the numbers of those after it; an
    edited, inserted or deleted one is in none)."""
    matcher = difflib.SequenceMatcher(None, list(before), list(after), autojunk=False)
    return frozenset(j + 1 + k for _, j, size in matcher.get_matching_blocks() for k in range(size))


def page_of(unit: str | None, n: int) -> int:
    """The page (one paragraph each) that unit `n` of a document made of `pages` is in: a PDF's unit is
    its page; a text's is its line, and its paragraphs have a blank line between each two (paragraph k
    is line 2k - 1)."""
    return (n + 1) // 2 if unit == "line" else n


def about_untouched(sources: Sequence[Mapping[str, Any]], unit: str | None, untouched: frozenset[int]) -> bool:
    """Whether a sentence with these `sources` (as the task's view gives them: page, last_page in `unit`)
    is about untouched pages only: it has a source, and every page each spans is untouched."""
    if not sources or any(source.get("page") is None for source in sources):
        return False
    return all(p in untouched for source in sources for p in _span(source, unit))


def kept(
    sentences: Sequence[Mapping[str, Any]], first: Sequence[Mapping[str, Any]], unit: str | None,
    untouched: frozenset[int],
) -> Kept:  # fmt: skip
    """Of `sentences` about untouched pages, those whose text is byte for byte a sentence of `first`."""
    before = {s["text"] for s in first}
    about = [s for s in sentences if about_untouched(s["sources"], unit, untouched)]
    changed = tuple(
        f"“{s['text']}” (pages {', '.join(_pages(x, unit) for x in s['sources'])})"
        for s in about
        if s["text"] not in before
    )
    return Kept(len(about) - len(changed), len(about), changed)


def _span(source: Mapping[str, Any], unit: str | None) -> range:
    """The pages a source spans (its page to its last page, in pages of one paragraph)."""
    return range(page_of(unit, source["page"]), page_of(unit, source.get("last_page") or source["page"]) + 1)


def _pages(source: Mapping[str, Any], unit: str | None) -> str:
    pages = _span(source, unit)
    return str(pages[0]) if len(pages) == 1 else f"{pages[0]}–{pages[-1]}"


def on_pages(passage: str, paragraphs: Sequence[str], first: int, last: int) -> bool:
    """Whether `passage` is part of pages `first` to `last` (from 1) of `paragraphs`, a run of white space
    as one space (a PDF's text breaks its lines where the paragraph has a space)."""
    if not 1 <= first <= last <= len(paragraphs):
        return False
    words = " ".join(passage.split())
    return bool(words) and words in " ".join(" ".join(paragraphs[first - 1 : last]).split())


@dataclass(frozen=True)
class _Version:
    """One submission: its pages, its task as the gateway shows it, and its chunks' sentences."""

    edit: Edit
    paragraphs: list[str]
    task: dict[str, Any]
    chunk_sentences: list[dict[str, Any]]

    @property
    def document(self) -> dict[str, Any]:
        return dict(self.task["documents"][0])

    @property
    def unit(self) -> str:
        return "page" if self.document["filename"].endswith(".pdf") else "line"

    @property
    def text(self) -> str | None:
        """The text as submitted (None for a PDF: its extracted text is the parser's)."""
        return None if self.unit == "page" else "\n\n".join(self.paragraphs)


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
    done = tuple(
        _compared(bench, first, _submit(bench, marker, name, edited, previous=first))
        for name, edited in edits(base, bench.seed, marker)
    )
    printed = _submit(bench, marker, "printed as a PDF", base, printed_on=PRINTED[0])
    reprinted = _submit(
        bench,
        marker,
        "the PDF reprinted: only its footers' date changed",
        base,
        printed_on=PRINTED[1],
        previous=printed,
    )
    return VersionsRun(setting, first.edit, done, printed.edit, _compared(bench, printed, reprinted))


def _submit(
    bench: Bench,
    marker: str,
    name: str,
    paragraphs: list[str],
    *,
    printed_on: str | None = None,
    previous: _Version | None = None,
) -> _Version:
    """One submission of `paragraphs` (as text, or `printed_on` a day as a PDF, a page each), as a new version
    of `previous`'s document (its task named, `previous_task`) when given: the calls the stand-in answered
    for it (a chunk's prompt holds a <text> section, a merge's does not)."""
    since = time.time()
    if printed_on is None:
        document = (FILENAME, "\n\n".join(paragraphs).encode())
    else:
        document = (FILENAME.replace(".txt", ".pdf"), printed_report(paragraphs, printed_on, TITLE))
    options = {"previous_task": previous.task["task_id"]} if previous is not None else None
    _, task = bench.run_task([document], options=options)
    bench.llm.llm.wait_idle()
    answered = calls(bench.llm.llm, marker, since=since)
    chunk_calls = sum(1 for e in answered if "<text>\n" in e.prompt)
    edit = Edit(name, bench.chunks_of(task), len(answered), chunk_calls, task["status"])
    chunk_sentences = asyncio.run(_chunk_sentences(bench.factory.infra["DATABASE_URL"], task["documents"][0]))
    return _Version(edit, paragraphs, task, chunk_sentences)


async def _chunk_sentences(url: str, document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sentences of the document's chunk summaries, in the form of the task's view (the API shows a
    document's summary, not its chunks')."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT summary_sentences::text AS s FROM chunks WHERE document_id = $1 AND summary_sentences IS NOT NULL"
            " ORDER BY chunk_index",
            document["document_id"],
        )
    finally:
        await conn.close()
    return [{"text": s.text, "sources": [x.__dict__ for x in s.sources]} for row in rows for s in from_json(row["s"])]


def _compared(bench: Bench, first: _Version, edited: _Version) -> Edit:
    """The edited version's figures against the first's: its sentences about untouched pages kept, and
    its sources resolved."""
    untouched = untouched_pages(first.paragraphs, edited.paragraphs)
    document = kept(edited.document["sentences"] or [], first.document["sentences"] or [], edited.unit, untouched)
    chunk_summaries = kept(edited.chunk_sentences, first.chunk_sentences, edited.unit, untouched)
    return replace(
        edited.edit,
        document=document,
        chunk_summaries=chunk_summaries,
        untouched=len(untouched),
        resolved=_resolve(bench, edited, [edited.task, edited.document]),
        chunks_resolved=_resolve(bench, edited, [{"sentences": edited.chunk_sentences}]),
    )


def _resolve(bench: Bench, version: _Version, holders: Sequence[Mapping[str, Any]]) -> Resolved:
    """Every source of the sentences of `holders` (the version's summaries) asked of the quote route:
    resolved when it answers with the passage the source names, on the pages it names (its last page
    where the source names one), and that passage is on those pages of the version's text (for a text,
    exactly the characters at those offsets)."""
    sources = {
        (s["document_id"], s["start"], s["end"], s["page"], s["last_page"])
        for holder in holders
        for sentence in holder["sentences"] or []
        for s in sentence["sources"]
    }
    failures: list[str] = []
    task_id = version.task["task_id"]
    with httpx.Client(
        base_url=bench.stack.gateway_url, headers={"Authorization": f"Bearer {bench.stack.keys['alice']}"}, timeout=30
    ) as client:
        for document_id, start, end, page, last_page in sorted(sources, key=lambda s: s[1]):
            where = f"[{start}, {end}) on {version.unit} {page}–{last_page}"
            if page is None:
                failures.append(f"{where}: the source names no {version.unit}")
                continue
            got = client.get(f"/v1/tasks/{task_id}/documents/{document_id}/text", params={"start": start, "end": end})
            if got.status_code != 200:
                failures.append(f"{where}: the route answered {got.status_code} {got.text[:200]}")
                continue
            quoted = got.json()
            last_page = last_page or quoted["last_page"]  # a chunk's source may leave its last page to a reader
            spanned = (page_of(version.unit, page), page_of(version.unit, last_page or page))
            if (quoted["page"], quoted["last_page"]) != (page, last_page):
                failures.append(f"{where}: the route says {version.unit} {quoted['page']}–{quoted['last_page']}")
            elif version.text is not None and version.text[start:end] != quoted["text"]:
                failures.append(f"{where}: the route's passage {quoted['text'][:80]!r} is not the text's there")
            elif not on_pages(quoted["text"], version.paragraphs, *spanned):
                failures.append(f"{where}: {quoted['text'][:80]!r} is not on those pages of the new version")
    return Resolved(len(sources) - len(failures), len(sources), tuple(failures))
