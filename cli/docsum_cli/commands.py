"""`docsum tasks`, `docsum show TASK`, `docsum webhooks add|list|remove` and `docsum keys create|list|revoke`:
the owner's tasks, one task in full, the owner's webhook endpoints, and the operator's stored API keys. Each
prints a table (or text) for people, or with `--json` the gateway's own JSON."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from rich.console import Console
from rich.table import Table

from .client import KeyAdmin, OwnerClient, WebhookClient
from .footnotes import printable
from .shown import as_markup, as_text

# File names, titles, errors and summaries are written by others: each is printed through shown.as_markup
# or shown.as_text, so none is read as markup nor sends the terminal a control sequence.
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True)

COMMANDS = ("tasks", "show", "webhooks", "keys")
# What an endpoint may be told of (the gateway's WebhookEvent); by default, every way a task ends.
WEBHOOK_EVENTS = (
    "task.finished", "task.failed", "task.cancelled", "task.expired", "task.awaiting_approval", "document.failed",
)  # fmt: skip
TASK_ENDS = ["task.finished", "task.failed", "task.cancelled", "task.expired"]
_STORED_KEY = re.compile(r"dsk_([0-9a-f]{12})_.+")


def add_commands(sub: Any) -> None:
    """The subcommands, on the parser's subparsers."""
    tasks = sub.add_parser("tasks", help="list your tasks, newest first")
    tasks.add_argument("--limit", type=int, default=50, help="at most this many (1-500; default 50)")
    tasks.add_argument("--json", action="store_true", help="print JSON")
    show = sub.add_parser("show", help="one task: its status, documents and summaries")
    show.add_argument("task_id")
    show.add_argument("--json", action="store_true", help="print the task as the gateway answers it")
    hooks = sub.add_parser("webhooks", help="your webhook endpoints: told of your tasks' ends by signed POSTs")
    hook_actions = hooks.add_subparsers(dest="webhooks_command", required=True)
    add = hook_actions.add_parser("add", help="register an endpoint; its signing secret is shown this once")
    # Not `url`: that is the gateway's (--url).
    add.add_argument("endpoint_url", metavar="URL", help="where deliveries are POSTed (http:// or https://)")
    add.add_argument(
        "--events",
        nargs="+",
        choices=WEBHOOK_EVENTS,
        default=TASK_ENDS,
        metavar="EVENT",
        help=f"what it is told of: {', '.join(WEBHOOK_EVENTS)} (default: {' '.join(TASK_ENDS)})",
    )
    add.add_argument(
        "--only-named", action="store_true", help="only the tasks submitted with --webhook ID (default: all yours)"
    )
    add.add_argument("--json", action="store_true", help="print JSON")
    hook_list = hook_actions.add_parser("list", help="your endpoints: id, URL, events (never their secrets)")
    hook_list.add_argument("--json", action="store_true", help="print JSON")
    remove = hook_actions.add_parser("remove", help="stop an endpoint: nothing more is sent to it")
    remove.add_argument("webhook_id", help="the id `webhooks list` shows")
    remove.add_argument("--json", action="store_true", help="print JSON")
    keys = sub.add_parser("keys", help="stored API keys (needs the gateway's DOCSUM_ADMIN_KEY)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="make a key for OWNER; it is shown this once")
    create.add_argument("owner")
    create.add_argument("--name", help="what the key is for (ci, laptop...)")
    create.add_argument("--json", action="store_true", help="print JSON")
    listing = actions.add_parser("list", help="the keys: id, owner, name, created, last used")
    listing.add_argument("--owner", help="only this owner's keys")
    listing.add_argument("--all", action="store_true", help="revoked keys too")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = actions.add_parser("revoke", help="revoke a key: refused from the next request on")
    revoke.add_argument("key_id", help="the id `keys list` shows (or the whole key)")
    revoke.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Run one of COMMANDS (GatewayError propagates to main's handler)."""
    if args.command == "tasks":
        listed = OwnerClient(args.url).tasks(args.limit)
        return _print(listed, args.json, lambda: _tasks_table(listed))
    if args.command == "show":
        task = OwnerClient(args.url).task(args.task_id)
        return _print(task, args.json, lambda: _show_task(task))
    if args.command == "webhooks":
        return _webhooks(args)
    admin = KeyAdmin(args.url)
    if args.keys_command == "create":
        made = admin.create(args.owner, args.name)
        return _print(made, args.json, lambda: _created(made))
    if args.keys_command == "list":
        keys = admin.list(args.owner, args.all)
        return _print(keys, args.json, lambda: _keys_table(keys))
    whole = _STORED_KEY.fullmatch(args.key_id)
    revoked = admin.revoke(whole.group(1) if whole else args.key_id)
    said = f"revoked {as_markup(revoked['key_id'])} ({as_markup(revoked['owner'])})"
    return _print(revoked, args.json, lambda: out.print(said))


def _webhooks(args: argparse.Namespace) -> int:
    hooks = WebhookClient(args.url)
    if args.webhooks_command == "add":
        made = hooks.add(args.endpoint_url, sorted(set(args.events)), all_tasks=not args.only_named)
        return _print(made, args.json, lambda: _webhook_added(made))
    if args.webhooks_command == "list":
        listed = hooks.list()
        return _print(listed, args.json, lambda: _webhooks_table(listed))
    removed = hooks.remove(args.webhook_id)
    said = f"removed {as_markup(removed['id'])} ({as_markup(removed['url'])}): nothing more is sent to it"
    return _print(removed, args.json, lambda: out.print(said))


def _webhook_added(made: dict[str, Any]) -> None:
    out.print(as_text(made["secret"]), markup=False)
    err.print(
        f"webhook {as_markup(made['id'])} for {as_markup(made['url'])}: its secret (above) verifies each"
        " delivery's webhook-signature; shown this once, store it now"
    )


def _webhooks_table(hooks: list[dict[str, Any]]) -> None:
    if not hooks:
        out.print("no webhooks")
        return
    table = Table("webhook", "url", "events", "tasks", "created (UTC)", box=None)
    for h in hooks:
        table.add_row(
            as_markup(h["id"]), as_markup(h["url"]), as_markup(" ".join(h["events"])),
            "all" if h["all_tasks"] else "named", _when(h["created_at"]),
        )  # fmt: skip
    out.print(table)


def _print(value: Any, as_json: bool, human: Any) -> int:
    if as_json:
        print(json.dumps(value, ensure_ascii=False, indent=2))
    else:
        human()
    return 0


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def _tasks_table(tasks: list[dict[str, Any]]) -> None:
    if not tasks:
        out.print("no tasks")
        return
    table = Table("task", "status", "created (UTC)", "title", box=None)
    for t in tasks:
        table.add_row(as_markup(t["task_id"]), t["status"], _when(t["created_at"]), as_markup(t.get("title") or ""))
    out.print(table)


def mode_note(task: dict[str, Any]) -> str:
    """The task's mode, named when it is not realtime, and its deadline when it has one:
    " (batch, deadline 2026-12-03 08:00:00 UTC)"."""
    options = task.get("options") or {}
    mode, deadline = options.get("mode"), options.get("deadline")
    notes = [mode] if mode and mode != "realtime" else []
    if deadline:
        notes.append(f"deadline {_when(deadline)} UTC")
    return f" ({', '.join(notes)})" if notes else ""


def batch_note(task: dict[str, Any]) -> str | None:
    """What the task waits for while its lines are at the provider's batch (the view's `batch`), else None:
    "waiting for the provider's batch: 3 of 10 lines done, submitted at 08:15 UTC, deadline 2026-12-03
    08:00:00 UTC"."""
    batch = task.get("batch")
    if not batch or batch.get("state") != "waiting":
        return None
    parts = [f"waiting for the provider's batch: {batch['done']} of {batch['lines']} lines done"]
    if batch.get("sent_back"):
        parts.append(f"{batch['sent_back']} sent back to realtime calls")
    if batch.get("submitted_at"):
        parts.append(f"submitted at {batch['submitted_at'][11:16]} UTC")
    parts.append(f"deadline {_when(batch['deadline'])} UTC" if batch.get("deadline") else "no deadline")
    return ", ".join(parts)


def place_note(task: dict[str, Any]) -> str | None:
    """Where the task's chunks waiting for their turn stand (the view's `place`), else None: "waiting for
    its turn: 40 of its chunks, 1,240 of your other chunks first; about 4 min at your share (320 calls a
    minute)". Only the owner's own work is counted: nobody else's is shown."""
    place = task.get("place")
    if not place:
        return None
    note = f"waiting for its turn: {place['waiting_chunks']:,} of its chunks"
    if place["ahead_chunks"]:
        note += f", {place['ahead_chunks']:,} of your other chunks first"
    if place.get("eta_s") is None:
        return note + "; no call of yours answered in the last minute to time it by"
    return note + f"; about {_duration(place['eta_s'])} at your share ({place['calls_per_minute']:,} calls a minute)"


def _duration(seconds: float) -> str:
    """ "40 s", "4 min", "2 h 5 min"."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def reuse_note(summary: dict[str, Any]) -> str | None:
    """What of a document's (or the task's) summary was reused, for a new version or when anything was:
    "reused: 98 of 100 chunk summaries reused, 3 merges redone"; else None."""
    reuse = summary.get("reuse")
    if not reuse:
        return None
    new_version = summary.get("previous_document_id") or summary.get("previous_task")
    if not new_version and not (reuse["chunk_summaries_reused"] or reuse["merges_reused"]):
        return None
    return f"reused: {reuse['said']}"


def changes_lines(doc: dict[str, Any]) -> list[str]:
    """What changed in a new version's summary, the changes first (the view's marks: SentenceView.change):
    a count, then each changed sentence with what it was, each new one, each previous one removed; none for a
    document whose sentences are not marked."""
    sentences = doc.get("sentences") or []
    removed = doc.get("removed_sentences")
    if removed is None or not any(s.get("change") for s in sentences):
        return []
    changed = [s for s in sentences if s.get("change") == "changed"]
    new = [s for s in sentences if s.get("change") == "new"]
    unchanged = len(sentences) - len(changed) - len(new)
    lines = [
        f"since the previous version: {len(changed)} changed, {len(new)} new, {len(removed)} removed,"
        f" {unchanged} unchanged"
    ]
    lines += [line for s in changed for line in (f"  changed: {s['text']}", f"      was: {s.get('was') or ''}")]
    lines += [f"  new: {s['text']}" for s in new]
    lines += [f"  removed: {text}" for text in removed]
    return lines


def print_changes(doc: dict[str, Any]) -> None:
    """A document's reuse and what changed in its summary, before the summary."""
    if note := reuse_note(doc):
        out.print(as_markup(note))
    for line in changes_lines(doc):
        out.print(as_text(line), markup=False)


def _show_task(task: dict[str, Any]) -> None:
    out.print(
        f"[bold]Task {as_markup(task['task_id'])}[/] — {task['status']}{as_markup(mode_note(task))}"
        + (f"  {as_markup(task['title'])}" if task.get("title") else "")
    )
    out.print(f"created {_when(task['created_at'])}, updated {_when(task['updated_at'])}")
    if task.get("hold_reason"):
        out.print(f"held: {as_markup(task['hold_reason'])}")
    if note := batch_note(task):
        out.print(as_markup(note))
    if note := place_note(task):
        out.print(as_markup(note))
    if task.get("previous_task"):
        out.print(f"a new version of task {as_markup(task['previous_task'])}")
    if note := reuse_note(task):
        out.print(as_markup(note))
    table = Table("document", "status", "chunks", "", box=None)
    for d in task["documents"]:
        c = d["chunks"]
        chunks = (
            f"{c['done']}/{c['total']}" + (f" ({c['failed']} failed)" if c["failed"] else "") if c["total"] else "-"
        )
        # While a scan is read by OCR, the page being read ("reading page 41 of 300 (OCR)").
        table.add_row(
            as_markup(d["filename"]), d["status"], chunks, as_markup(d.get("error") or d.get("reading") or "")
        )
    out.print(table)
    for d in task["documents"]:
        if d.get("summary"):
            out.rule(f"[bold]{as_markup(d['filename'])}[/]")
            print_changes(d)
            out.print(as_text(printable(d["summary"], d.get("sentences"))), markup=False)
    if task.get("summary"):
        out.rule("[bold]Task summary[/]")
        out.print(as_text(printable(task["summary"], task.get("sentences"))), markup=False)
    elif task.get("error"):
        out.rule("[bold]Task summary[/]")
        out.print(f"[red]{as_markup(task['error'])}[/]")


def _created(made: dict[str, Any]) -> None:
    out.print(as_text(made["key"]), markup=False)
    err.print(f"key {as_markup(made['key_id'])} for {as_markup(made['owner'])}: shown this once, store it now")


def _keys_table(keys: list[dict[str, Any]]) -> None:
    if not keys:
        out.print("no keys")
        return
    table = Table("key id", "owner", "name", "created (UTC)", "last used", "revoked", box=None)
    for k in keys:
        table.add_row(
            as_markup(k["key_id"]), as_markup(k["owner"]), as_markup(k.get("name") or ""), _when(k["created_at"]),
            _when(k["last_used_at"]),
            _when(k["revoked_at"]),
        )  # fmt: skip
    out.print(table)
