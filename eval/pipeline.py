"""The summaries `make run` would show, computed in-process: parse, chunk, summarize, merge.

Mirrors the services' flow without Kafka or PostgreSQL: the parser's `extract_text`, the chunker's
`cut` with the default settings, one CHUNK request per chunk (in parts when the model's window is
too small for it, as the summarizer plans them), a DOCUMENT merge of a document's chunk summaries
(none for a one-chunk document), and a TASK merge of the documents' summaries labelled with their
file names, in submission order; the merges are the merger's own (`docsum_merger.tree.merge`), in
groups when the window is too small for one request. Every summary comes with its sentences and
their sources in the documents' text, mapped as the summarizer (`answer_of`) and the merger (`cited`)
map them; None when the backend does not say where its sentences come from.

    .venv/bin/python eval/pipeline.py examples/*            # prose
    .venv/bin/python eval/pipeline.py --style bullets --length brief examples/*
    .venv/bin/python eval/pipeline.py --sources examples/*  # each sentence with its pages and ranges
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from docsum_chunker.policy import cut
from docsum_chunker.settings import ChunkerSettings
from docsum_llm.base import SummarizerBackend, SummaryKind, SummaryRequest, SummaryResult
from docsum_llm.budget import TokenCalibration, plan_chunk
from docsum_llm.cache import CallContext, cache_key
from docsum_llm.extractive import ExtractiveBackend
from docsum_merger.tree import MergeNode, merge
from docsum_parser.extract import extract_text
from docsum_shared.cited import CitedSentence
from docsum_shared.errors import ContextLimitExceeded, Fail
from docsum_shared.positions import Positions
from docsum_shared.settings import LLMSettings
from docsum_shared.states import ChunkStatus, DocumentStatus, TaskStatus
from docsum_summarizer.policy import StoredChunk, answer_of, offsets_of

Cited = tuple[CitedSentence, ...] | None


@dataclass
class Port:
    """The LLM port the services summarize through, in-process: no result cache, no rate limit, and a
    fixed input budget (the model's window, None: unlimited). What `docsum_merger.tree.merge` needs."""

    backend: SummarizerBackend
    settings: LLMSettings = field(default_factory=LLMSettings)
    window: int | None = None
    calibration: TokenCalibration = field(default_factory=TokenCalibration)
    calls: int = 0

    @property
    def model(self) -> str:
        return self.backend.model

    async def budget(self) -> int | None:
        return self.window

    async def bounded(self, request: SummaryRequest) -> SummaryRequest:
        """As `Summarizing.bounded`: the answer's bound for its kind and length, within a quarter of the window."""
        wanted = self.settings.max_answer_tokens(str(request.kind), request.length)
        window = self.window
        return replace(request, max_tokens=wanted if window is None else max(16, min(wanted, window // 4)))

    async def summarize(
        self, request: SummaryRequest, context: CallContext | None = None
    ) -> tuple[SummaryResult, bool]:
        self.calls += 1
        sync = getattr(self.backend, "summarize_sync", None)
        if sync is not None:  # the extractive backend: no thread per call over hundreds of papers
            result: SummaryResult = sync(request)
            return result, False
        return await self.backend.summarize(request), False

    async def learn(self, refusal: ContextLimitExceeded, request: SummaryRequest) -> bool:
        return False  # the window is stated, not learned: a refusal fails the summary

    def describe_budget(self) -> str:
        return "no input budget" if self.window is None else f"a window of {self.window:,} tokens"

    def cache_key(self, request: SummaryRequest, context: CallContext) -> str:
        return cache_key(self.model, request, None, self.backend.sampling)


class _NoNodes:
    """A merge's intermediate nodes are not kept in-process."""

    async def store_node(self, node: MergeNode) -> None:
        return None


@dataclass(frozen=True)
class Summary:
    text: str
    sentences: Cited  # None: the backend did not say where its sentences come from


@dataclass(frozen=True)
class DocumentSummary(Summary):
    chunks: tuple[Summary, ...] = ()
    failed: tuple[str, ...] = ()  # why each chunk left out failed (`partial` only)


async def summarize_chunk(
    port: Port, request: SummaryRequest, document_id: str, start: int, positions: Positions | None
) -> Summary:
    """A chunk's summary as the summarizer makes it: in parts when the window needs it, mapped by `answer_of`."""
    request = await port.bounded(request)
    parts = plan_chunk(request, port.window, port.calibration)
    if parts is None:
        raise ValueError(f"a chunk does not fit the model's window ({port.describe_budget()})")
    results = [(await port.summarize(part))[0] for part in parts]
    row = StoredChunk(
        ChunkStatus.SUMMARIZING,
        request.texts[0],
        request.context_before,
        request.context_after,
        DocumentStatus.SUMMARIZING,
        TaskStatus.PROCESSING,
        start_char=start,
        positions=positions,
    )
    answer = answer_of(list(zip(results, offsets_of(parts, request.texts[0]), strict=True)), document_id, row)
    return Summary(answer.text, answer.sentences)


async def summarize_document(
    port: Port,
    text: str,
    *,
    document_id: str = "document",
    filename: str = "",
    positions: Positions | None = None,
    length: str = "",
    style: str = "",
    partial: bool = False,
) -> DocumentSummary:
    """The document's summary, the summaries of its chunks, and their sentences mapped to `text`.
    `partial`: a chunk whose call fails is left out, as the merger leaves out a chunk that failed for
    good, and the summary is of the others (a model's answer at temperature 0 fails again when asked
    again, so it is not)."""
    rows = cut(filename or document_id, text, ChunkerSettings())  # the chunker's own cut, caps included
    if isinstance(rows, Fail):
        raise ValueError(rows.error)
    chunks = [r.chunk for r in rows if r.chunk is not None]
    summaries: list[Summary] = []
    failed: list[str] = []
    for c in chunks:
        request = SummaryRequest(
            SummaryKind.CHUNK,
            (c.text,),
            context_before=c.context_before,
            context_after=c.context_after,
            length=length,
            style=style,
        )
        try:
            summaries.append(await summarize_chunk(port, request, document_id, c.start, positions))
        except Exception as exc:
            if not partial:
                raise
            failed.append(f"chunk {c.index}: {exc}")
    if not summaries:
        raise ValueError(f"every chunk failed; {failed[0]}")
    if len(summaries) == 1:
        return DocumentSummary(summaries[0].text, summaries[0].sentences, tuple(summaries), tuple(failed))
    request = SummaryRequest(
        SummaryKind.DOCUMENT, tuple(s.text for s in summaries), title=filename, length=length, style=style
    )
    merged = await _merge(port, request, [s.sentences for s in summaries], document_id)
    return DocumentSummary(merged.text, merged.sentences, tuple(summaries), tuple(failed))


async def summarize_task(
    port: Port,
    names: Sequence[str],
    documents: Sequence[Summary],
    *,
    title: str = "",
    length: str = "",
    style: str = "",
) -> Summary:
    """The task's summary over its documents' summaries (labelled with `names`), mapped through their sentences."""
    if len(documents) == 1:
        return Summary(documents[0].text, documents[0].sentences)
    request = SummaryRequest(
        SummaryKind.TASK, tuple(d.text for d in documents), title=title, labels=tuple(names), length=length, style=style
    )
    return await _merge(port, request, [d.sentences for d in documents], title or "task")


async def _merge(port: Port, request: SummaryRequest, children: list[Cited], scope_id: str) -> Summary:
    bounded = await port.bounded(request)
    merged = await merge(port, _NoNodes(), bounded, CallContext(), scope_id, children, parallel=1)
    return Summary(merged.text, merged.sentences)


def document_summary(
    backend: SummarizerBackend, text: str, *, filename: str = "", length: str = "", style: str = ""
) -> str:
    """The document summary's text alone, with no input budget (what `eval/evaluate.py` scores)."""
    run = summarize_document(Port(backend), text, filename=filename, length=length, style=style)
    return asyncio.run(run).text


def task_summary(
    backend: SummarizerBackend,
    names: list[str],
    summaries: list[str],
    *,
    title: str = "",
    length: str = "",
    style: str = "",
) -> str:
    documents = [Summary(s, None) for s in summaries]
    run = summarize_task(Port(backend), names, documents, title=title, length=length, style=style)
    return asyncio.run(run).text


def describe_sources(summary: Summary, units: Mapping[str, str]) -> str:
    """Each sentence of `summary` with its support and where its sources are: file, unit (a page, a
    paragraph or a line, `units` per file), range."""
    if summary.sentences is None:
        return "(the backend did not say where its sentences come from)"
    lines = []
    for s in summary.sentences:
        places = ", ".join(
            x.document_id
            + (f" {units.get(x.document_id, 'unit')} {x.page}" if x.page is not None else "")
            + f" [{x.start}:{x.end}]"
            for x in s.sources
        )
        lines.append(f"- [{s.support}] {s.text[:80]}{'…' if len(s.text) > 80 else ''}  <- {places or 'no source'}")
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> None:
    port = Port(ExtractiveBackend())
    names: list[str] = []
    documents: list[Summary] = []
    units: dict[str, str] = {}
    for path in args.files:
        extracted = extract_text(path.read_bytes(), path.name)
        summary = await summarize_document(
            port,
            extracted.text,
            document_id=path.name,
            filename=path.name,
            positions=extracted.positions,
            length=args.length,
            style=args.style,
        )
        names.append(path.name)
        documents.append(summary)
        units[path.name] = extracted.positions.unit
        print(f"== {path.name} ({len(extracted.text)} characters)\n{summary.text}\n")
        if args.sources:
            print(describe_sources(summary, units) + "\n")
    task = await summarize_task(port, names, documents, title=args.title, length=args.length, style=args.style)
    print("== task summary")
    print(task.text)
    if args.sources:
        print("\n" + describe_sources(task, units))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--length", default="", choices=["", "brief", "detailed"])
    parser.add_argument("--style", default="", choices=["", "bullets"])
    parser.add_argument("--title", default="docsum examples")
    parser.add_argument("--sources", action="store_true", help="list each sentence's sources")
    args = parser.parse_args(argv)
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
