"""Citations on real PDFs: Debian's documentation packages, summarized by the extractive backend.

The PDFs are made by real toolchains (texinfo, DocBook, LaTeX) and come from Debian's registry:
`apt-get download` fetches a package without installing it, `dpkg-deb -x` unpacks it, and the PDF
(gunzipped when shipped as .pdf.gz) is kept under .run/eval/pdfs, never fetched again while there. A
package that `apt-cache policy` no longer offers is skipped and said so; fewer than `MIN_FOUND` found
fails the part.

The PDFs are submitted as one task to the pipeline, run in this process with the extractive backend
(eval/inprocess.py): parsed by the parser (its caps as they are: a PDF over one fails alone, with the
parser's message), chunked, summarized, each document's merge tree, and the TASK merge over all of them.
Every sentence of the extractive backend quotes its document, so every one must pass `check_sources`
against the document's text (as the gateway's text route gives it) and carry, for each source, the page
the text route gives for the source's start; a sentence that does not is a miss, listed with its source
and why.

    .run/bootstrap/bin/uv run --locked --group eval python eval/real_pdfs.py   # prints the section
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import io
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from inprocess import Pipeline, TaskSummary, running
from pypdf import PdfReader, PdfWriter

from docsum_llm.citations import check_sources
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.settings import LLMSettings

CACHE = Path(__file__).resolve().parent.parent / ".run" / "eval" / "pdfs"
MIN_FOUND = 4
APT_LISTS = Path("/var/lib/apt/lists")


@dataclass(frozen=True)
class Package:
    """A Debian package and the PDF it ships (its path inside the package)."""

    name: str
    path: str
    toolchain: str

    @property
    def pdf_name(self) -> str:
        return Path(self.path).name.removesuffix(".gz")


PACKAGES = (
    Package("libtasn1-doc", "usr/share/doc/libtasn1-doc/libtasn1.pdf", "texinfo"),
    Package("libidn2-doc", "usr/share/doc/libidn2-doc/libidn2.pdf", "texinfo"),
    Package("shared-mime-info", "usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf", "DocBook"),
    Package("flex-doc", "usr/share/doc/flex-doc/flex.pdf.gz", "texinfo"),
    Package("libgcrypt20-doc", "usr/share/doc/libgcrypt20-doc/gcrypt.pdf.gz", "texinfo"),
    Package("maxima-doc", "usr/share/doc/maxima-doc/maximabook-19-Sept-2004.pdf.gz", "LaTeX"),
    Package("gnutls-doc", "usr/share/doc/gnutls-doc/gnutls.pdf", "texinfo"),
)


# --- the checks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Miss:
    """A sentence that fails its check: the first source at fault (None: it has none) and why."""

    sentence: CitedSentence
    source: Source | None
    why: str
    quoted: str = ""  # the source's text, when its range is in the text


Pages = Mapping[tuple[str, int], int | None]  # (document, character) -> the page it is on, as the text route says


def miss_of(sentence: CitedSentence, texts: Mapping[str, str], pages: Pages) -> Miss | None:
    """Why `sentence` fails: no source, a range outside its document, quotes that do not hold it
    (`check_sources`), or a source whose page is not the one its start is on; None when it passes."""
    if not sentence.sources:
        return Miss(sentence, None, "no source")
    for source in sentence.sources:
        text = texts.get(source.document_id)
        if text is None:
            return Miss(sentence, source, "no such document")
        if not 0 <= source.start <= source.end <= len(text):
            return Miss(sentence, source, f"range outside the text ({len(text):,} characters)")
    if not check_sources(sentence, texts):
        first = sentence.sources[0]
        quoted = texts[first.document_id][first.start : first.end]
        return Miss(sentence, first, "its sources' text does not hold the sentence", quoted)
    for source in sentence.sources:
        page = pages.get((source.document_id, source.start))
        if source.page != page:
            quoted = texts[source.document_id][source.start : source.end]
            return Miss(sentence, source, f"page {source.page}, but its start is on page {page}", quoted)
    return None


def misses(sentences: Iterable[CitedSentence] | None, texts: Mapping[str, str], pages: Pages) -> list[Miss]:
    """The misses among `sentences`; a summary whose backend did not say where they come from is one."""
    if sentences is None:
        return [Miss(CitedSentence("(the whole summary)", (), "synthesis", (0, 0)), None, "no sentences mapped")]
    return [m for m in (miss_of(s, texts, pages) for s in sentences) if m is not None]


def candidate_of(policy: str) -> str | None:
    """The version `apt-cache policy` offers for one package, None when it offers none."""
    for line in policy.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate":
            version = value.strip()
            return None if version in ("", "(none)") else version
    return None


# --- the PDFs -------------------------------------------------------------------------------------


def fetch(package: Package, cache: Path = CACHE) -> Path | str:
    """The package's PDF in `cache` (downloaded and unpacked when it is not there); a string says why not."""
    pdf = cache / package.pdf_name
    if pdf.exists():
        return pdf
    debs = cache / "debs"
    deb = _deb_in(debs, package.name)
    if deb is None:
        if _candidate(package.name) is None and not any(APT_LISTS.glob("*_Packages*")):
            _update_lists()  # a fresh machine has no package lists yet
        if _candidate(package.name) is None:
            return f"{package.name}: not offered by `apt-cache policy` any more"
        debs.mkdir(parents=True, exist_ok=True)
        if not _download(package.name, debs):
            _update_lists()  # the lists name a version the mirror no longer has
            if not _download(package.name, debs):
                return f"{package.name}: `apt-get download` failed"
        deb = _deb_in(debs, package.name)
        assert deb is not None  # _download saw it
    with tempfile.TemporaryDirectory(dir=cache) as unpacked:
        subprocess.run(["dpkg-deb", "-x", str(deb), unpacked], check=True)
        shipped = Path(unpacked) / package.path
        if not shipped.exists():
            return f"{package.name}: {package.path} is not in {deb.name}"
        opener = gzip.open if shipped.suffix == ".gz" else open
        with opener(shipped, "rb") as source, (cache / f"{pdf.name}.part").open("wb") as target:
            shutil.copyfileobj(source, target)
    (cache / f"{pdf.name}.part").rename(pdf)
    return pdf


def excerpts(n: int, pages: int, cache: Path = CACHE) -> list[tuple[str, bytes]]:
    """`excerpt`s of the first `n` of `PACKAGES`' PDFs that can be had (each one that cannot is said so)."""
    out = []
    for package in PACKAGES:
        if len(out) >= n:
            break
        pdf = fetch(package, cache)
        if isinstance(pdf, str):
            print(f"  {pdf}", flush=True)
            continue
        out.append(excerpt(pdf, pages))
    return out


def excerpt(pdf: Path, pages: int) -> tuple[str, bytes]:
    """`pages` pages from the middle of `pdf` (past a manual's title pages and contents, in its prose), as a
    PDF of their own: the same page objects, fonts and text layer as the toolchain made them; and its name."""
    reader = PdfReader(pdf)
    first = max(0, len(reader.pages) // 2 - pages // 2)
    taken = reader.pages[first : first + pages]
    writer = PdfWriter()
    for page in taken:
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return f"{pdf.stem}-pages-{first + 1}-{first + len(taken)}.pdf", out.getvalue()


def _candidate(name: str) -> str | None:
    return candidate_of(subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True).stdout)


@functools.cache
def _update_lists() -> None:
    """`apt-get update`, once a run at most."""
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)


def _deb_in(debs: Path, name: str) -> Path | None:
    """The package's newest download in `debs`, if any (its file name: name_version_arch.deb)."""
    found = sorted(debs.glob(f"{name}_*.deb"), key=lambda p: p.stat().st_mtime) if debs.exists() else []
    return found[-1] if found else None


def _download(name: str, into: Path) -> bool:
    done = subprocess.run(["apt-get", "download", "-qq", name], cwd=into, capture_output=True, text=True)
    return done.returncode == 0 and _deb_in(into, name) is not None


# --- the run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """One summary level of a PDF (or of the task): its sentences and those that miss."""

    sentences: int
    misses: tuple[Miss, ...]


@dataclass(frozen=True)
class PdfRow:
    package: Package
    pages: int
    characters: int
    chunks: int
    chunk: Checked
    document: Checked


@dataclass(frozen=True)
class Outcome:
    rows: tuple[PdfRow, ...]
    task: Checked | None
    seconds: float  # the task's, from its submission to its end
    skipped: tuple[str, ...]  # packages not found, with why
    failed: tuple[str, ...]  # PDFs the parser or the summary refused, with the message

    @property
    def found(self) -> int:
        return len(self.rows) + len(self.failed)


def check(sentences: Sequence[CitedSentence] | None, texts: Mapping[str, str], pages: Pages) -> Checked:
    return Checked(0 if sentences is None else len(sentences), tuple(misses(sentences, texts, pages)))


async def pages_of(
    pipeline: Pipeline, task: TaskSummary, sentences: Iterable[CitedSentence]
) -> dict[tuple[str, int], int | None]:
    """The page each source's start is on, as the gateway's text route gives it (a range that is not in
    its document's text has none: `miss_of` says so first)."""
    documents = {d.name: d for d in task.documents}
    pages: dict[tuple[str, int], int | None] = {}
    for sentence in sentences:
        for source in sentence.sources:
            document = documents.get(source.document_id)
            at = (source.document_id, source.start)
            if at in pages or document is None or not 0 <= source.start < len(document.extracted):
                continue
            quoted = await pipeline.quote(task.task_id, document.document_id, source.start, source.start + 1)
            pages[at] = quoted["page"]
    return pages


async def run(
    packages: Sequence[Package] = PACKAGES, cache: Path = CACHE, verbose: bool = True, database_url: str | None = None
) -> Outcome:
    """The PDFs found, as one task of the pipeline run here on a database of its own on `database_url`'s
    server (None: `inprocess.server_url()`), checked."""
    skipped: list[str] = []
    found: dict[str, tuple[Package, Path]] = {}
    for package in packages:
        pdf = fetch(package, cache)
        if isinstance(pdf, str):
            skipped.append(pdf)
            if verbose:
                print(f"  skipped: {pdf}", flush=True)
            continue
        found[pdf.name] = (package, pdf)
    if not found:
        return Outcome((), None, 0.0, tuple(skipped), ())
    began = time.monotonic()
    async with running(LLMSettings(llm_backend="extractive"), database_url) as pipeline:
        task = await pipeline.summarize(
            {name: (name, pdf.read_bytes()) for name, (_, pdf) in found.items()}, title="Debian's manuals"
        )
        seconds = time.monotonic() - began
        summaries = [d for d in task.documents if d.text]
        chunk_sentences = {d.name: [s for c in d.chunks for s in (c.sentences or ())] for d in summaries}
        every = [s for d in summaries for s in (*chunk_sentences[d.name], *(d.sentences or ()))]
        pages = await pages_of(pipeline, task, [*every, *(task.sentences or ())])
        last_pages = {  # the page its text ends on
            d.name: (await pipeline.quote(task.task_id, d.document_id, len(d.extracted) - 1, len(d.extracted)))["page"]
            for d in summaries
        }
    texts = {d.name: d.extracted for d in summaries}
    failed = [f"{d.name}: {d.error}" for d in task.documents if not d.text]
    rows = []
    for d in summaries:
        row = PdfRow(
            found[d.name][0],
            last_pages[d.name] or 0,
            len(d.extracted),
            len(d.chunks),
            check(chunk_sentences[d.name], texts, pages),
            check(d.sentences, texts, pages),
        )
        rows.append(row)
        if verbose:
            print(f"  {d.name}: {row.characters:,} characters, {row.chunks} chunks", flush=True)
    checked = check(task.sentences, texts, pages) if summaries else None
    return Outcome(tuple(rows), checked, seconds, tuple(skipped), tuple(failed))


# --- the report -----------------------------------------------------------------------------------


def _passed(checked: Checked) -> str:
    if not checked.sentences:
        return "–"
    return f"{100 * (checked.sentences - len(checked.misses)) / checked.sentences:.1f}"


def _short(text: str, most: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1] + "…"


def _describe(miss: Miss) -> str:
    source = miss.source
    where = "no source" if source is None else f"{source.document_id} page {source.page} [{source.start}:{source.end}]"
    quoted = f" (it quotes “{_short(miss.quoted)}”)" if miss.quoted else ""
    return f"  - “{_short(miss.sentence.text)}” ← {where}: {miss.why}{quoted}"


def render(outcome: Outcome) -> str:
    lines = [
        "## Real PDFs: Debian's manuals",
        "",
        "Written by `make eval` (eval/real_pdfs.py). PDFs from Debian's documentation packages (`apt-get",
        "download`, cached in .run/eval/pdfs), submitted as one task to the pipeline run in this process with the",
        "extractive backend (eval/inprocess.py): chunks, the document's merge tree, and a TASK merge over all of",
        "them. *passed*: the share (%) of sentences whose sources all pass `check_sources` against the text the",
        "gateway's text route gives and carry the page that route gives for their start; 100 expected, since the",
        "extractive backend quotes. Any miss is listed below the table. *pages*: the page the text ends on.",
        "",
        "| PDF | package | made by | pages | characters | chunks | sentences (chunk) | passed (chunk) "
        "| sentences (document) | passed (document) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in outcome.rows:
        lines.append(
            f"| {r.package.pdf_name} | {r.package.name} | {r.package.toolchain} | {r.pages:,} | {r.characters:,} "
            f"| {r.chunks} | {r.chunk.sentences} | {_passed(r.chunk)} | {r.document.sentences} "
            f"| {_passed(r.document)} |"
        )
    if outcome.task is not None:
        lines.append(
            f"| task: all {len(outcome.rows)} | | | {sum(r.pages for r in outcome.rows):,} "
            f"| {sum(r.characters for r in outcome.rows):,} | | | | {outcome.task.sentences} "
            f"| {_passed(outcome.task)} |"
        )
    lines.append("")
    if outcome.rows:
        lines.append(f"- the task, from its submission to its end: {outcome.seconds:.1f} s.")
    if outcome.found < MIN_FOUND:
        lines.append(f"- **failed**: {outcome.found} PDFs found, fewer than {MIN_FOUND}.")
    lines += [f"- skipped: {s}" for s in outcome.skipped]
    lines += [f"- refused: {f}" for f in outcome.failed]
    for r in outcome.rows:
        for level, checked in (("chunk", r.chunk), ("document", r.document)):
            if checked.misses:
                lines.append(f"- misses in {r.package.pdf_name}, {level} summaries: {len(checked.misses)}")
                lines += [_describe(m) for m in checked.misses]
    if outcome.task is not None and outcome.task.misses:
        lines.append(f"- misses in the task summary: {len(outcome.task.misses)}")
        lines += [_describe(m) for m in outcome.task.misses]
    if outcome.rows and not any(_all_misses(outcome)):
        lines.append("- misses: none.")
    lines.append("")
    return "\n".join(lines)


def _all_misses(outcome: Outcome) -> list[tuple[Miss, ...]]:
    out = [c.misses for r in outcome.rows for c in (r.chunk, r.document)]
    return out + ([outcome.task.misses] if outcome.task is not None else [])


def main() -> int:
    outcome = asyncio.run(run())
    print(render(outcome))
    return 0 if outcome.found >= MIN_FOUND else 1


if __name__ == "__main__":
    sys.exit(main())
