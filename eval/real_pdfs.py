"""Citations on real PDFs: Debian's documentation packages, summarized by the extractive backend.

The PDFs are made by real toolchains (texinfo, DocBook, LaTeX) and come from Debian's registry:
`apt-get download` fetches a package without installing it, `dpkg-deb -x` unpacks it, and the PDF
(gunzipped when shipped as .pdf.gz) is kept under .run/eval/pdfs, never fetched again while there. A
package that `apt-cache policy` no longer offers is skipped and said so; fewer than `MIN_FOUND` found
fails the part.

Each PDF is parsed by the parser (`extract_text`, its caps as they are: a PDF over one fails with the
parser's message) and summarized as the services do (eval/pipeline.py: chunks, the document's merge
tree), then a TASK merge over all of them. Every sentence of the extractive backend quotes its
document, so every one must pass `check_sources` and carry, for each source, the page that
`position_of` gives for the source's start; a sentence that does not is a miss, listed with its source
and why.

    .run/bootstrap/bin/uv run --locked --group eval python eval/real_pdfs.py   # prints the section
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from docsum_llm.citations import check_sources
from docsum_llm.extractive import ExtractiveBackend
from docsum_parser.extract import extract_text
from docsum_parser.parse_error import ParseError
from docsum_shared.cited import CitedSentence, Source
from docsum_shared.positions import Positions, position_of
from pipeline import DocumentSummary, Port, Summary, summarize_document, summarize_task

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


def miss_of(sentence: CitedSentence, texts: Mapping[str, str], positions: Mapping[str, Positions]) -> Miss | None:
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
        page = position_of(positions[source.document_id], source.start)
        if source.page != page:
            quoted = texts[source.document_id][source.start : source.end]
            return Miss(sentence, source, f"page {source.page}, but its start is on page {page}", quoted)
    return None


def misses(
    sentences: Iterable[CitedSentence] | None, texts: Mapping[str, str], positions: Mapping[str, Positions]
) -> list[Miss]:
    """The misses among `sentences`; a summary whose backend did not say where they come from is one."""
    if sentences is None:
        return [Miss(CitedSentence("(the whole summary)", (), "synthesis", (0, 0)), None, "no sentences mapped")]
    return [m for m in (miss_of(s, texts, positions) for s in sentences) if m is not None]


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
    seconds: float


@dataclass(frozen=True)
class Outcome:
    rows: tuple[PdfRow, ...]
    task: Checked | None
    task_seconds: float
    skipped: tuple[str, ...]  # packages not found, with why
    failed: tuple[str, ...]  # PDFs the parser or the summary refused, with the message

    @property
    def found(self) -> int:
        return len(self.rows) + len(self.failed)


def check(
    sentences: Sequence[CitedSentence] | None, texts: Mapping[str, str], positions: Mapping[str, Positions]
) -> Checked:
    return Checked(0 if sentences is None else len(sentences), tuple(misses(sentences, texts, positions)))


async def run(packages: Sequence[Package] = PACKAGES, cache: Path = CACHE, verbose: bool = True) -> Outcome:
    port = Port(ExtractiveBackend())
    rows: list[PdfRow] = []
    skipped: list[str] = []
    failed: list[str] = []
    texts: dict[str, str] = {}
    positions: dict[str, Positions] = {}
    documents: list[DocumentSummary] = []
    for package in packages:
        pdf = fetch(package, cache)
        if isinstance(pdf, str):
            skipped.append(pdf)
            if verbose:
                print(f"  skipped: {pdf}", flush=True)
            continue
        began = time.monotonic()
        try:
            extracted = extract_text(pdf.read_bytes(), pdf.name)
            summary = await summarize_document(
                port, extracted.text, document_id=pdf.name, filename=pdf.name, positions=extracted.positions
            )
        except (ParseError, ValueError) as exc:
            failed.append(f"{pdf.name}: {exc}")
            continue
        texts[pdf.name] = extracted.text
        positions[pdf.name] = extracted.positions
        documents.append(summary)
        chunk_sentences = [s for c in summary.chunks for s in (c.sentences or ())]
        row = PdfRow(
            package,
            extracted.pages or 0,
            len(extracted.text),
            len(summary.chunks),
            check(chunk_sentences, texts, positions),
            check(summary.sentences, texts, positions),
            time.monotonic() - began,
        )
        rows.append(row)
        if verbose:
            print(f"  {pdf.name}: {row.pages} pages, {row.chunks} chunks, {row.seconds:.1f} s", flush=True)
    task, task_seconds = None, 0.0
    if documents:
        began = time.monotonic()
        merged: Summary = await summarize_task(port, list(texts), documents, title="Debian's manuals")
        task = check(merged.sentences, texts, positions)
        task_seconds = time.monotonic() - began
    return Outcome(tuple(rows), task, task_seconds, tuple(skipped), tuple(failed))


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
        "download`, cached in .run/eval/pdfs), parsed by the parser and summarized by the extractive backend as",
        "the services do: chunks, the document's merge tree, and a TASK merge over all of them. *passed*: the",
        "share (%) of sentences whose sources all pass `check_sources` and carry the page `position_of` gives",
        "for their start; 100 expected, since the extractive backend quotes. Any miss is listed below the table.",
        "",
        "| PDF | package | made by | pages | characters | chunks | sentences (chunk) | passed (chunk) "
        "| sentences (document) | passed (document) | seconds |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in outcome.rows:
        lines.append(
            f"| {r.package.pdf_name} | {r.package.name} | {r.package.toolchain} | {r.pages:,} | {r.characters:,} "
            f"| {r.chunks} | {r.chunk.sentences} | {_passed(r.chunk)} | {r.document.sentences} "
            f"| {_passed(r.document)} | {r.seconds:.1f} |"
        )
    if outcome.task is not None:
        lines.append(
            f"| task: all {len(outcome.rows)} | | | {sum(r.pages for r in outcome.rows):,} "
            f"| {sum(r.characters for r in outcome.rows):,} | | | | {outcome.task.sentences} "
            f"| {_passed(outcome.task)} | {outcome.task_seconds:.1f} |"
        )
    lines.append("")
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
