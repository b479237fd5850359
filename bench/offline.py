"""B10 — the offline default end to end: a real 200-page PDF through the whole pipeline with the
extractive backend (no LLM), beside raw pypdf extracting the text of the same pages.

The PDF is GnuTLS's manual (texinfo), which eval/real_pdfs.py fetches from Debian's gnutls-doc
(`apt-get download`, cached in .run/eval/pdfs), cut to its first 200 pages in memory. The pipeline runs
in the bench's process for the measure, every stage of the plan set to the extractive backend (the
in-process runner, on the bench's PostgreSQL: what `python -m docsum_pipeline` runs), while the
stack of processes the other measures use stays as it is; a one-page PDF goes through it untimed first.
"""

from __future__ import annotations

import functools
import io
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pypdf import PdfReader, PdfWriter

from tests.documents import make_pdf

if TYPE_CHECKING:
    from bench.run import Bench

EVAL = Path(__file__).resolve().parents[1] / "eval"
PACKAGE = "gnutls-doc"  # its manual has ~790 pages
PAGES = 200
RAW_RUNS = 3  # raw pypdf's figure is the best of these


@dataclass(frozen=True)
class Sample:
    """The first `PAGES` pages of a real PDF."""

    name: str
    data: bytes
    pages_in_whole: int


@dataclass(frozen=True)
class OfflineRun:
    sample: Sample
    seconds: float  # submit -> the task's end as `docsum` sees it
    status: str
    chunks: int
    raw_seconds: tuple[float, ...]  # raw pypdf over every page, each run

    @property
    def completed(self) -> bool:
        return self.status == "COMPLETED"

    @property
    def rate(self) -> float:
        return PAGES / self.seconds

    @property
    def raw_rate(self) -> float:
        return PAGES / min(self.raw_seconds)

    @property
    def ratio(self) -> float:
        return self.rate / self.raw_rate

    def shown(self) -> str:
        shown = (
            f"{self.rate:.1f} pages/s ({self.seconds:.1f} s) vs raw pypdf {self.raw_rate:.1f} pages/s:"
            f" ratio {self.ratio:.2f}"
        )
        return shown if self.completed else f"{shown}; the task ended {self.status}"

    def detail(self) -> str:
        raw = ", ".join(f"{s:.2f}" for s in self.raw_seconds)
        return (
            f"{self.sample.name} from Debian's {PACKAGE} ({self.sample.pages_in_whole} pages), its first {PAGES}"
            f" pages ({len(self.sample.data) / 2**20:.2f} MB), submitted as one task to the whole pipeline in the"
            f" bench's process (the in-process runner) with `DOCSUM_LLM_BACKEND=extractive`: {self.chunks} chunks,"
            f" {self.status} in {self.seconds:.1f} s. Raw pypdf, `PdfReader(...).pages[i].extract_text()` over"
            f" the same {PAGES} pages in the bench's process: {raw} s (the best counts). The CPU table's"
            ' "bench (the client)" holds these runs, the pipeline\'s included.'
        )


@functools.cache
def sample() -> Sample | str:
    """The first `PAGES` pages of the package's PDF (fetched once); a string says why there are none."""
    sys.path.insert(0, str(EVAL))  # real_pdfs imports its neighbour inprocess.py by name
    from real_pdfs import PACKAGES, fetch

    package = next(p for p in PACKAGES if p.name == PACKAGE)
    try:
        fetched = fetch(package)
    except (OSError, subprocess.CalledProcessError) as exc:  # no apt, dpkg-deb refused the download
        return f"{PACKAGE}: {exc}"
    if isinstance(fetched, str):
        return fetched
    reader = PdfReader(fetched)
    if len(reader.pages) < PAGES:
        return f"{fetched.name} has {len(reader.pages)} pages, fewer than {PAGES}"
    return Sample(fetched.name, first_pages(reader, PAGES), len(reader.pages))


def first_pages(reader: PdfReader, pages: int) -> bytes:
    """A PDF of the reader's first `pages` pages."""
    writer = PdfWriter()
    for page in reader.pages[:pages]:
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def raw_pypdf_seconds(data: bytes, runs: int = RAW_RUNS) -> tuple[float, ...]:
    """Seconds pypdf alone takes to read the PDF and extract every page's text, once per run."""
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        reader = PdfReader(io.BytesIO(data))
        for i in range(len(reader.pages)):
            reader.pages[i].extract_text()
        spent.append(time.perf_counter() - started)
    return tuple(spent)


def measure(bench: Bench) -> OfflineRun | str:
    """The sample through the pipeline in this process with the extractive backend (a one-page PDF
    first, untimed: the first task pays for connections and the parser's worker), then through raw
    pypdf; a string says why there is no sample."""
    found = sample()
    if isinstance(found, str):
        return found
    pipeline = bench.factory.in_process(DOCSUM_LLM_BACKEND="extractive")
    try:
        bench.run_task([("warm-up.pdf", make_pdf([bench.text(1_800)]))], stack=pipeline)
        seconds, task = bench.run_task([(found.name, found.data)], stack=pipeline)
    finally:
        pipeline.stop_all()
    return OfflineRun(found, seconds, task["status"], bench.chunks_of(task), raw_pypdf_seconds(found.data))
