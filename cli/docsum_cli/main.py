"""`docsum`: submit documents to the gateway, follow their progress, print their summaries."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from . import commands
from .client import Gateway, GatewayError, StreamDropped, task_events
from .footnotes import printable
from .shown import as_markup, as_text

# How the LLM calls are sent (the gateway's TaskOptions.mode); realtime is the usual one, and unnamed.
MODES = ("realtime", "flex", "batch")
# Which of an owner's work goes first (the gateway's TaskOptions.priority).
PRIORITIES = ("urgent", "normal", "background")
FINAL = {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED", "EXPIRED"}
DOC_FINAL = {"COMPLETED", "FAILED", "CANCELLED"}

# File names, titles, errors and summaries are written by others: each is printed through shown.as_markup
# or shown.as_text, so none is read as markup nor sends the terminal a control sequence.
err = Console(stderr=True)
out = Console(highlight=False, soft_wrap=True)


def _doc_percent(doc: dict[str, Any]) -> float:
    """A document's bar from the task view (the stream's entries carry it computed by the gateway)."""
    if doc["status"] in DOC_FINAL:
        return 100.0
    total = doc["chunks"]["total"]
    if not total:
        return 0.0
    return 10 + 85 * (doc["chunks"]["done"] + doc["chunks"]["failed"]) / total


def _state(doc: dict[str, Any]) -> str:
    chunks = doc["chunks"]
    return doc["status"] + (f" {chunks['done']}/{chunks['total']}" if chunks["total"] else "")


def wait(gateway: Gateway, task_id: str, *, quiet: bool, reconnect_s: float = 1.0) -> dict[str, Any]:
    """Follow the task's progress stream (SSE) until it ends, showing progress on stderr; the task.

    On a terminal: one live bar per document. Elsewhere (a log, CI): one line per change of state. A
    dropped connection is resumed from the last entry seen (Last-Event-ID): nothing is missed or shown twice.
    """
    live = err.is_terminal and not quiet
    with Progress(
        TextColumn("{task.description}", markup=False),  # a file name, shown as it is
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[state]}"),
        console=err,
        disable=not live,
    ) as progress:
        bars: dict[str, Any] = {}
        names: dict[str, str] = {}
        last: dict[str, str] = {}

        def show_doc(document_id: str, status: str, percent: float, chunks: dict[str, Any]) -> None:
            state = _state({"status": status, "chunks": chunks})
            if live:
                if document_id not in bars:
                    name = as_text(names.get(document_id, document_id))[:40]
                    bars[document_id] = progress.add_task(name, total=100, state="")
                progress.update(bars[document_id], completed=percent, state=state)
            elif not quiet and last.get(document_id) != status:
                err.print(f"{as_markup(names.get(document_id, document_id))}: {state}")
            last[document_id] = status

        def show_reading(document_id: str, note: str) -> None:
            """A page of a scan being read by OCR: the bar's state, or a line of its own."""
            if live and document_id in bars:
                progress.update(bars[document_id], state=note)
            elif not live:
                err.print(f"{as_markup(names.get(document_id, document_id))}: {as_markup(note)}")

        seen, drops = 0, 0
        while True:
            try:
                for kind, data in task_events(gateway, task_id, seen):
                    if kind == "snapshot":
                        if not quiet and (note := commands.batch_note(data)):
                            err.print(as_markup(note))  # then again each time the batch moves (batch-moved)
                        for doc in data["documents"]:
                            names[doc["document_id"]] = doc["filename"]
                            show_doc(doc["document_id"], doc["status"], _doc_percent(doc), doc["chunks"])
                    elif kind == "progress":
                        seen, drops = data["seq"], 0
                        for doc in data.get("documents", []):
                            show_doc(doc["document_id"], doc["status"], doc["percent"], doc["chunks"])
                        if not live and not quiet and data["kind"] in ("paused", "resumed", "cancelled", "expired"):
                            err.print(f"task {data['kind']}")
                        if not quiet and data["kind"] == "batch-moved" and (note := commands.batch_note(data)):
                            err.print(as_markup(note))
                        if not quiet and data["kind"] == "document-reading":
                            show_reading(data["document_id"], str(data.get("reading", "")))
            except StreamDropped as exc:
                drops += 1
                if not quiet:
                    err.print(f"[yellow]progress stream dropped ({as_markup(str(exc))}); reconnecting[/]")
                time.sleep(min(10.0, reconnect_s * drops))
                continue
            task = gateway.task(task_id)  # the stream ended: the task is over; its summaries
            if task["status"] in FINAL:
                return task
            time.sleep(reconnect_s)


# The result of a task, as task-finished carries it (docsum_shared.readmodel.schemas.TaskResult).
RESULT_FIELDS = ("task_id", "status", "updated_at", "summary", "error", "truncated", "llm", "usage", "recovery")
DOCUMENT_FIELDS = ("document_id", "filename", "status", "summary", "error", "truncated", "chunks")


def as_json(task: dict[str, Any]) -> dict[str, Any]:
    """The task's result: the same JSON as its task-finished message."""
    result = {k: task.get(k) for k in RESULT_FIELDS}
    result["documents"] = [{k: d.get(k) for k in DOCUMENT_FIELDS} for d in task["documents"]]
    return result


def printed_json(task: dict[str, Any]) -> dict[str, Any]:
    """What `--json` prints: the task's result, and the sentences of each summary with their sources (the
    task view's `sentences`; null when none are known), which task-finished does not carry."""
    result = as_json(task)
    result["sentences"] = task.get("sentences")
    for printed, doc in zip(result["documents"], task["documents"], strict=True):
        printed["sentences"] = doc.get("sentences")
    return result


def show(task: dict[str, Any]) -> None:
    for doc in task["documents"]:
        out.rule(f"[bold]{as_markup(doc['filename'])}[/] — {doc['status']}")
        if doc["status"] == "COMPLETED":
            commands.print_changes(doc)
            out.print(as_text(printable(doc["summary"] or "", doc.get("sentences"))), markup=False)
        else:
            out.print(f"[red]{as_markup(doc['error'] or '')}[/]")
    out.rule(f"[bold]Task {as_markup(task['task_id'])}[/] — {task['status']}{as_markup(commands.mode_note(task))}")
    if task["summary"]:
        out.print(as_text(printable(task["summary"], task.get("sentences"))), markup=False)
    else:
        out.print(as_text(task.get("error") or ""), markup=False)


def _finish(task: dict[str, Any], json_output: bool) -> int:
    if json_output:
        print(json.dumps(printed_json(task), ensure_ascii=False, indent=2))
    else:
        show(task)
    return 0 if all(d["status"] == "COMPLETED" for d in task["documents"]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docsum", description="Summarize documents with docsum.")
    parser.add_argument("--url", help="gateway URL (default: $DOCSUM_GATEWAY_URL or http://127.0.0.1:8000)")
    sub = parser.add_subparsers(dest="command", required=True)
    summarize = sub.add_parser("summarize", help="submit files as one task and print their summaries")
    summarize.add_argument("files", nargs="+", type=Path)
    summarize.add_argument("--title")
    summarize.add_argument("--json", action="store_true", help="print one JSON object")
    summarize.add_argument("--no-wait", action="store_true", help="print the task id and return at once")
    summarize.add_argument("--language", help="the summaries' language (default: each document's own)")
    summarize.add_argument("--length", choices=("brief", "standard", "detailed"), default="standard")
    summarize.add_argument("--style", choices=("prose", "bullets"), default="prose")
    summarize.add_argument(
        "--support",
        choices=("all", "strict"),
        default="all",
        help="all: every sentence, one its sources do not support marked; strict: such sentences are left out",
    )
    summarize.add_argument("--strict", action="store_true", help="fail a document when any part of it fails")
    summarize.add_argument(
        "--mode",
        choices=MODES,
        help="how the LLM calls are sent: flex and batch are about half the price; flex is slower, batch "
        "waits for the provider's batch (hours) "
        "(default: the deployment's, DOCSUM_LLM_MODE)",
    )
    summarize.add_argument(
        "--priority",
        choices=PRIORITIES,
        help="which of your work goes first: urgent (also before other owners' normal work, from your own "
        "share), normal, or background (when nothing else waits) (default: normal)",
    )
    summarize.add_argument(
        "--deadline",
        help="when the task must be finished: a duration from now (45m, 6h, 2d, 1h30m) or an ISO 8601 instant "
        "with its zone (2026-12-03T08:00:00Z), at most 7 days away",
    )
    summarize.add_argument(
        "--previous",
        metavar="TASK_ID",
        help="one of your tasks whose documents these are new versions of (matched by file name): what did not "
        "change is answered from your stored results, and each summary says what changed",
    )
    summarize.add_argument(
        "--webhook",
        help="the id of one of your webhook endpoints (POST /v1/webhooks) to tell of this task's end as well",
    )
    waiting = sub.add_parser("wait", help="wait for a task and print its summaries")
    waiting.add_argument("task_id")
    waiting.add_argument("--json", action="store_true", help="print one JSON object")
    for action, text in {
        "pause": "stop starting LLM calls for a task (work in flight finishes)",
        "resume": "resume a paused task",
        "cancel": "cancel a task for good",
        "retry": "retry the failed documents and chunks of a task",
    }.items():
        sub.add_parser(action, help=text).add_argument("task_id")
    sub.add_parser("failures", help="list what failed in a task and why").add_argument("task_id")
    sub.add_parser("reconcile", help="re-drive your unfinished tasks that nothing moved lately, from stored state")
    commands.add_commands(sub)
    args = parser.parse_args(argv)

    try:
        if args.command in commands.COMMANDS:
            return commands.run(args)
        gateway = Gateway(args.url)
        if args.command in ("pause", "resume", "cancel", "retry"):
            print(json.dumps(gateway.control(args.task_id, args.command)))
            return 0
        if args.command == "failures":
            print(json.dumps(gateway.failures(args.task_id), ensure_ascii=False, indent=2))
            return 0
        if args.command == "reconcile":
            print(json.dumps(gateway.reconcile()))
            return 0
        if args.command == "summarize":
            missing = [str(p) for p in args.files if not p.is_file()]
            if missing:
                err.print(f"[red]not a file: {as_markup(', '.join(missing))}[/]")
                return 2
            options = {"length": args.length, "style": args.style, "strict": str(args.strict).lower()}
            if args.support != "all":  # the default is the gateway's own: not sent
                options["support"] = args.support
            if args.language:
                options["language"] = args.language
            if args.mode:
                options["mode"] = args.mode
            if args.priority:
                options["priority"] = args.priority
            if args.deadline:  # sent as given: the gateway reads it, and says what it refuses
                options["deadline"] = args.deadline
            if args.webhook:  # the gateway says if it is not one of the owner's endpoints
                options["webhook"] = args.webhook
            if args.previous:  # the gateway says if it is not one of the owner's tasks
                options["previous_task"] = args.previous
            created = gateway.submit(args.files, args.title, options)
            if args.no_wait:
                print(json.dumps({"task_id": created["task_id"]}))
                return 0
            task_id = created["task_id"]
        else:
            task_id = args.task_id
        task = wait(gateway, task_id, quiet=args.json)
        return _finish(task, args.json)
    except GatewayError as exc:
        err.print(f"[red]docsum: {as_markup(str(exc))}[/]")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
