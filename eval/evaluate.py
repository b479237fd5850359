"""ROUGE of the extractive summarizer against human-written abstracts: `make eval` writes eval/results.md.

Data: the papers that the `aclsum` package (PyPI, MIT licence; ACLSum, Takeshita et al., NAACL 2024)
ships as S2ORC full-text JSON (`aclsum/dataset/paper_jsons/*.json`: 250 ACL Anthology papers, each
with its abstract and its body text as extracted from the PDF). It is installed by `uv` from the
`eval` dependency group, nothing is committed. A paper's body (its section titles on lines of their
own, paragraphs separated by blank lines, the abstract left out) is the input; its abstract, written
by the authors, is the reference. ACLSum's own split decides which papers were looked at while the
summarizer was tuned (train + val) and which were not (test); both are reported.

Systems, each over the same input:

* extractive (now): the current `ExtractiveBackend`, through the pipeline itself, run in this process
  (eval/inprocess.py: each paper's body submitted to the gateway as a text file, 3 papers a task, with
  the default settings and the extractive backend); the document summary as the task's view shows it.
* extractive (before): the summaries the summarizer gave before this rewrite (commit 061c4cd), kept
  in eval/data/before.jsonl (one JSON object a line: id, summary), scored here like the others.
* lead-3: the body's first three sentences (section titles skipped).
* lead, 1,200 characters: the body's first sentences, as many as fit the 1,200 characters a DOCUMENT
  summary may have (ROUGE F-measure depends on length: this lead is as long as the summaries).

Scores: `rouge-score` (Google's re-implementation of ROUGE-1.5.5), F-measure, Porter stemmer, mean
over the papers, times 100.

    make eval                                        # all of the above, writes eval/results.md
    .venv/bin/python eval/evaluate.py --limit 20     # quicker, prints only (after `make eval` once)
    .venv/bin/python eval/evaluate.py --save FILE    # also store the current summaries as JSON lines
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from inprocess import running, summarize_all

from docsum_shared.settings import LLMSettings
from docsum_shared.text import split_sentences

HERE = Path(__file__).resolve().parent
BEFORE = HERE / "data" / "before.jsonl"
RESULTS = HERE / "results.md"
METRICS = ("rouge1", "rouge2", "rougeL")
TASK_SIZE = 3  # papers a task (a paper's document summary does not depend on its task)
_END = tuple(".!?。！？;；")


@dataclass(frozen=True)
class Paper:
    id: str
    split: str  # ACLSum's: train, val or test
    title: str
    body: str
    abstract: str


def papers() -> Iterator[Paper]:
    """ACLSum's papers with a body and an abstract, in file-name order."""
    data = resources.files("aclsum") / "dataset"
    split_of: dict[str, str] = {}
    for split in ("train", "val", "test"):
        for line in (data / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                split_of[json.loads(line)["id"]] = split
    for entry in sorted((data / "paper_jsons").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        doc = json.loads(entry.read_text(encoding="utf-8"))
        parse = doc.get("pdf_parse") or {}
        abstract = (doc.get("abstract") or " ".join(p["text"] for p in parse.get("abstract", []))).strip()
        body = _body(parse.get("body_text", []))
        paper_id = entry.name.removesuffix(".json")  # the JSON's paper_id is only the year for some
        if abstract and body:
            yield Paper(paper_id, split_of.get(paper_id, "other"), doc.get("title") or "", body, abstract)


def _body(paragraphs: list[dict]) -> str:
    """Paragraphs separated by blank lines; a section's title on a line of its own where it starts."""
    out: list[str] = []
    section = None
    for p in paragraphs:
        heading = " ".join(x for x in (p.get("sec_num"), p.get("section")) if x)
        if heading and heading != section:
            out.append(heading)
            section = heading
        if p.get("text", "").strip():
            out.append(p["text"].strip())
    return "\n\n".join(out)


def _lead_sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in split_sentences(text) if s.rstrip("\"')]”’").endswith(_END)]


def lead3(text: str) -> str:
    return " ".join(_lead_sentences(text)[:3])


def lead_chars(text: str, limit: int = 1200) -> str:
    """The first sentences, as many as fit the summarizer's document budget (1,200 characters)."""
    out: list[str] = []
    used = 0
    for sentence in _lead_sentences(text):
        if out and used + 1 + len(sentence) > limit:
            break
        out.append(sentence)
        used += len(sentence) + (1 if used else 0)
    return " ".join(out)


def document_summaries(corpus: list[Paper]) -> dict[str, str]:
    """Each paper's document summary, by the pipeline in this process with the extractive backend."""

    async def run() -> dict[str, str]:
        groups = [corpus[i : i + TASK_SIZE] for i in range(0, len(corpus), TASK_SIZE)]
        async with running(LLMSettings(llm_backend="extractive")) as pipeline:
            tasks = await summarize_all(
                pipeline, [{p.id: (f"{p.id}.txt", p.body.encode()) for p in group} for group in groups]
            )
        failed = [f"{d.name}: {d.status} {d.error or ''}" for task in tasks for d in task.documents if not d.text]
        for failure in failed:  # scored without it: the table's paper counts show it
            print(f"no summary: {failure}", file=sys.stderr)
        return {d.name: d.text for task in tasks for d in task.documents if d.text}

    return asyncio.run(run())


def load_before() -> dict[str, str]:
    if not BEFORE.exists():
        return {}
    rows = (json.loads(line) for line in BEFORE.read_text(encoding="utf-8").splitlines() if line.strip())
    return {row["id"]: row["summary"] for row in rows}


def score(
    systems: dict[str, Callable[[Paper], str | None]], corpus: list[Paper]
) -> tuple[dict[str, dict[str, dict[str, list[float]]]], dict[str, list[int]], dict[str, str]]:
    """Per system, per split ("all" too), per metric: the F-measures; and the summaries' word counts."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    lengths: dict[str, list[int]] = {}
    outputs: dict[str, str] = {}
    for name, system in systems.items():
        for paper in corpus:
            summary = system(paper)
            if summary is None:
                continue
            if name == "extractive (now)":
                outputs[paper.id] = summary
            result = scorer.score(paper.abstract, summary)
            lengths.setdefault(name, []).append(len(summary.split()))
            for split in ("all", "test" if paper.split == "test" else "tuning"):
                cell = table.setdefault(name, {}).setdefault(split, {})
                for metric in METRICS:
                    cell.setdefault(metric, []).append(result[metric].fmeasure)
    return table, lengths, outputs


def render(table: dict, lengths: dict[str, list[int]], corpus: list[Paper], seconds: float) -> str:
    counts = {
        "all": len(corpus),
        "tuning": sum(1 for p in corpus if p.split != "test"),
        "test": sum(1 for p in corpus if p.split == "test"),
    }
    lines = [
        "# Extractive summarizer: ROUGE against the authors' abstracts",
        "",
        "Written by `make eval` (eval/evaluate.py; see its docstring for the data and the systems).",
        "Input: the body of each ACLSum paper (S2ORC text of the PDF, the abstract left out); reference: its",
        "abstract. F-measure x 100, `rouge-score` with the Porter stemmer, mean over the papers. *tuning*:",
        "ACLSum's train + val papers, looked at while the summarizer was tuned; *test*: ACLSum's test papers,",
        "not looked at.",
        "",
        "| system | papers | split | ROUGE-1 | ROUGE-2 | ROUGE-L | words (median) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for split in ("test", "tuning", "all"):
        for name, by_split in table.items():
            cell = by_split.get(split)
            if not cell:
                continue
            n = len(cell["rouge1"])
            means = [100 * statistics.fmean(cell[m]) for m in METRICS]
            words = statistics.median(lengths[name])
            lines.append(f"| {name} | {n} | {split} | {means[0]:.2f} | {means[1]:.2f} | {means[2]:.2f} | {words:.0f} |")
    reference_words = statistics.median(len(p.abstract.split()) for p in corpus)
    lines += [
        "",
        f"Papers: {counts['all']} ({counts['tuning']} tuning, {counts['test']} test); the abstracts have a median "
        f"of {reference_words:.0f} words. Words (median) is over all papers. Run time: {seconds:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N papers; prints, writes nothing")
    parser.add_argument("--save", type=Path, help="store the current summaries here (JSON lines: id, summary)")
    parser.add_argument("--only-now", action="store_true", help="score only the current summarizer")
    args = parser.parse_args(argv)

    corpus = list(papers())
    if args.limit:
        corpus = corpus[: args.limit]
    started = time.monotonic()
    summaries = document_summaries(corpus)
    before = load_before()
    systems: dict[str, Callable[[Paper], str | None]] = {}
    if before and not args.only_now:
        systems["extractive (before)"] = lambda p: before.get(p.id)
    systems["extractive (now)"] = lambda p: summaries.get(p.id)
    if not args.only_now:
        systems["lead-3"] = lambda p: lead3(p.body)
        systems["lead, 1,200 characters"] = lambda p: lead_chars(p.body)

    table, lengths, outputs = score(systems, corpus)
    report = render(table, lengths, corpus, time.monotonic() - started)
    print(report)
    if args.save:
        with args.save.open("w", encoding="utf-8") as f:
            for paper_id, summary in outputs.items():
                f.write(json.dumps({"id": paper_id, "summary": summary}, ensure_ascii=False) + "\n")
    if not args.limit:
        RESULTS.write_text(report, encoding="utf-8")
        print(f"written: {RESULTS.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
