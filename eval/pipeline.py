"""The summaries `make run` would show, computed in-process: parse, chunk, summarize, merge.

Mirrors the services' flow without Kafka or PostgreSQL: the parser's `extract_text`, the chunker's
`split_into_chunks` with the default settings, one CHUNK request per chunk, a DOCUMENT merge of a
document's chunk summaries (none for a one-chunk document), and a TASK merge of the documents'
summaries labelled with their file names, in submission order.

    .venv/bin/python eval/pipeline.py examples/*            # prose
    .venv/bin/python eval/pipeline.py --style bullets --length brief examples/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from docsum_chunker.policy import cut
from docsum_chunker.settings import ChunkerSettings
from docsum_parser.extract import extract_text
from docsum_shared.errors import Fail
from docsum_shared.summarizers.base import SummarizerBackend, SummaryKind, SummaryRequest
from docsum_shared.summarizers.extractive import ExtractiveBackend


def _call(backend: SummarizerBackend, request: SummaryRequest) -> str:
    sync = getattr(backend, "summarize_sync", None)
    if sync is None:  # pragma: no cover - only the extractive backend is used here
        raise TypeError("an in-process backend is needed")
    return str(sync(request).text)


def document_summary(
    backend: SummarizerBackend, text: str, *, filename: str = "", length: str = "", style: str = ""
) -> str:
    rows = cut(filename or "document", text, ChunkerSettings())  # the chunker's own cut, caps included
    if isinstance(rows, Fail):
        raise ValueError(rows.error)
    chunks = [r.chunk for r in rows if r.chunk is not None]
    summaries = [
        _call(
            backend,
            SummaryRequest(
                SummaryKind.CHUNK,
                (c.text,),
                context_before=c.context_before,
                context_after=c.context_after,
                length=length,
                style=style,
            ),
        )
        for c in chunks
    ]
    if len(summaries) == 1:
        return summaries[0]
    request = SummaryRequest(SummaryKind.DOCUMENT, tuple(summaries), title=filename, length=length, style=style)
    return _call(backend, request)


def task_summary(
    backend: SummarizerBackend,
    names: list[str],
    summaries: list[str],
    *,
    title: str = "",
    length: str = "",
    style: str = "",
) -> str:
    if len(summaries) == 1:
        return summaries[0]
    request = SummaryRequest(
        SummaryKind.TASK, tuple(summaries), title=title, labels=tuple(names), length=length, style=style
    )
    return _call(backend, request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--length", default="", choices=["", "brief", "detailed"])
    parser.add_argument("--style", default="", choices=["", "bullets"])
    parser.add_argument("--title", default="docsum examples")
    args = parser.parse_args(argv)
    backend = ExtractiveBackend()
    names: list[str] = []
    summaries: list[str] = []
    for path in args.files:
        text = extract_text(path.read_bytes(), path.name).text
        summary = document_summary(backend, text, filename=path.name, length=args.length, style=args.style)
        names.append(path.name)
        summaries.append(summary)
        print(f"== {path.name} ({len(text)} characters)\n{summary}\n")
    print("== task summary")
    print(task_summary(backend, names, summaries, title=args.title, length=args.length, style=args.style))
    return 0


if __name__ == "__main__":
    sys.exit(main())
