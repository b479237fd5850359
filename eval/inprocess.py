"""The summaries `make run` would show, made by the pipeline itself, run in the evaluation's process.

Every stage of the plan (docsum_pipeline.plan) runs in this process and event loop, as `python -m
docsum_pipeline` runs them: the in-process runner, on a database of its own (created here, dropped at
the end) on the PostgreSQL server that `scripts/postgres.sh` runs, with no broker. Each stage's settings
are read from the environment as its service reads them, then given the evaluation's own (the database,
a key, and the backend's settings: the extractive backend, or a model's endpoint). Files are submitted
to the gateway's real routes as a client submits them; what is scored is what a client reads back: the
task's view (its summary, its documents' summaries, their sentences and sources), each document's
extracted text through the gateway's text route, and the chunk summaries from the database (no route
shows them).

A sentence's sources name their document by its id in the pipeline; here they are renamed to the name the
caller gave the file, so that the caller's own tables (texts, gold spans) stay keyed by its names.

    async with running(LLMSettings()) as pipeline:          # the extractive backend
        task = await pipeline.summarize({"a": ("a.txt", data)}, title="...")
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from docsum_pipeline import plan
from docsum_pipeline.inprocess import run_in_process

from docsum_shared.cited import CitedSentence, Source, from_json
from docsum_shared.settings import LLMSettings, Settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.integration.conftest: how the tests and the bench make a database
from tests.integration.conftest import create_database, drop_database  # noqa: E402

OWNER = "eval"
ENDED = {"COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED", "EXPIRED"}
POLL_S = 0.2  # between two reads of a task's view while it runs
# A task that has not moved for this long is given up on (a provider that stopped answering): a local
# model on a CPU answers a chunk or a merge in a minute or two, never in ten. A merge tree's nodes and
# its failed attempts count as moves: the view shows none while a document's chunk summaries are merged,
# a 1.5B model took over ten minutes to merge the 74 of python-language-reference.docx (a node every
# ~100 s), and a merge it fails is asked again after a back-off.
STALL_S = 600.0
QUOTE_CHARS = 20_000  # the most the text route answers at once (the gateway's MAX_QUOTE_CHARS)

Cited = tuple[CitedSentence, ...] | None


@dataclass(frozen=True)
class Summary:
    text: str
    sentences: Cited  # None: the backend did not say where its sentences come from


@dataclass(frozen=True)
class DocumentSummary(Summary):
    name: str = ""  # the caller's name for the file (what its sources are renamed to)
    document_id: str = ""  # the pipeline's
    status: str = ""
    error: str | None = None
    extracted: str = ""  # the document's extracted text, read through the text route
    chunks: tuple[Summary, ...] = ()  # the summaries of its chunks, in order
    failed: tuple[str, ...] = ()  # why each chunk left out failed
    view: Mapping[str, Any] | None = None  # the document's part of the task's view


@dataclass(frozen=True)
class TaskSummary(Summary):
    task_id: str = ""
    status: str = ""
    error: str | None = None
    documents: tuple[DocumentSummary, ...] = ()
    view: Mapping[str, Any] | None = None  # the task's view as the gateway answered it


def settings_of(database_url: str, api_keys: str, llm: Mapping[str, Any]) -> dict[str, Settings]:
    """Each stage's settings, read from the environment as its service reads them, with the evaluation's:
    its database, its owner's key, no task rate, and `llm` on every stage that talks to the backend."""
    out: dict[str, Settings] = {}
    for stage in plan.stages():
        settings = stage.settings()
        update: dict[str, Any] = {"database_url": database_url}
        if stage.name == plan.GATEWAY.name:
            update |= {"api_keys": api_keys, "tasks_per_minute": 0}
        if isinstance(settings, LLMSettings):
            update |= llm
        out[stage.name] = settings.model_copy(update=update)
    return out


class Pipeline:
    """The plan running in this process, and a client of its gateway."""

    def __init__(self, client: httpx.AsyncClient, pool: asyncpg.Pool, stall_s: float = STALL_S) -> None:
        self.client = client
        self.pool = pool
        self.stall_s = stall_s

    async def summarize(
        self, files: Mapping[str, tuple[str, bytes]], *, title: str = "", length: str = "", style: str = ""
    ) -> TaskSummary:
        """One task of `files` (the caller's name -> the file's name and bytes, in submission order), run to
        its end; its summaries, each document's text and chunk summaries, sources renamed to the caller's names."""
        upload = [
            ("files", (filename, data, mimetypes.guess_type(filename)[0] or "application/octet-stream"))
            for filename, data in files.values()
        ]
        form = {k: v for k, v in (("title", title), ("length", length), ("style", style)) if v}
        created = await self.client.post("/v1/tasks", files=upload, data=form)
        created.raise_for_status()
        task_id = created.json()["task_id"]
        names = {d["document_id"]: name for d, name in zip(created.json()["documents"], files, strict=True)}
        view = await self._ended(task_id)
        documents = [await self._document(task_id, d, names) for d in view["documents"]]
        return TaskSummary(
            view["summary"] or "",
            _sentences(view["sentences"], names),
            task_id,
            view["status"],
            view["error"],
            tuple(documents),
            view,
        )

    async def _ended(self, task_id: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        seen, moved = None, loop.time()
        while True:
            answer = await self.client.get(f"/v1/tasks/{task_id}")
            answer.raise_for_status()
            view: dict[str, Any] = answer.json()
            if view["status"] in ENDED:
                return view
            scopes = [task_id, *(d["document_id"] for d in view["documents"])]
            merged = await self.pool.fetchrow(  # nodes made, and failed attempts: the provider answers
                "SELECT (SELECT count(*) FROM merge_nodes WHERE scope_id = ANY($1::text[])) AS nodes,"
                " (SELECT coalesce(sum(merge_failures), 0) FROM documents WHERE id = ANY($1::text[]))"
                " + (SELECT merge_failures FROM tasks WHERE id = $2) AS failures",
                scopes,
                task_id,
            )
            progress = (view["status"], [(d["status"], d["chunks"]) for d in view["documents"]], tuple(merged))
            if progress != seen:
                seen, moved = progress, loop.time()
            elif loop.time() - moved > self.stall_s:
                raise TimeoutError(f"task {task_id} has not moved for {self.stall_s:.0f} s: {progress}")
            await asyncio.sleep(POLL_S)  # the task runs in this loop meanwhile

    async def _document(self, task_id: str, view: Mapping[str, Any], names: Mapping[str, str]) -> DocumentSummary:
        document_id = view["document_id"]
        extracted = await self.text(task_id, document_id, view["text_chars"] or 0)
        rows = await self.pool.fetch(
            "SELECT chunk_index, status, summary, summary_sentences::text AS sentences, error FROM chunks"
            " WHERE document_id = $1 ORDER BY chunk_index",
            document_id,
        )
        chunks = tuple(
            Summary(r["summary"], _renamed(from_json(r["sentences"]), names) if r["sentences"] else None)
            for r in rows
            if r["summary"] is not None
        )
        failed = tuple(f"chunk {r['chunk_index']}: {r['error']}" for r in rows if r["summary"] is None)
        return DocumentSummary(
            view["summary"] or "",
            _sentences(view["sentences"], names),
            names[document_id],
            document_id,
            view["status"],
            view["error"],
            extracted,
            chunks,
            failed,
            view,
        )

    async def text(self, task_id: str, document_id: str, chars: int) -> str:
        """The document's whole extracted text, through the text route (at most QUOTE_CHARS a request)."""
        parts = []
        for start in range(0, chars, QUOTE_CHARS):
            parts.append((await self.quote(task_id, document_id, start, min(chars, start + QUOTE_CHARS)))["text"])
        return "".join(parts)

    async def quote(self, task_id: str, document_id: str, start: int, end: int) -> dict[str, Any]:
        """The text route's answer for `[start, end)`: the text, and the page (unit) each end is in."""
        answer = await self.client.get(
            f"/v1/tasks/{task_id}/documents/{document_id}/text", params={"start": start, "end": end}
        )
        answer.raise_for_status()
        quoted: dict[str, Any] = answer.json()
        return quoted


def _sentences(views: list[dict[str, Any]] | None, names: Mapping[str, str]) -> Cited:
    """A view's sentences (SentenceView) as CitedSentences, their sources renamed."""
    if views is None:
        return None
    return tuple(
        CitedSentence(
            s["text"],
            tuple(
                Source(names.get(x["document_id"], x["document_id"]), x["page"], x["start"], x["end"], x["last_page"])
                for x in s["sources"]
            ),
            s["support"],
            (s["at"][0], s["at"][1]),
        )
        for s in views
    )


def _renamed(sentences: tuple[CitedSentence, ...], names: Mapping[str, str]) -> tuple[CitedSentence, ...]:
    return tuple(
        replace(s, sources=tuple(replace(x, document_id=names.get(x.document_id, x.document_id)) for x in s.sources))
        for s in sentences
    )


def server_url() -> str:
    """The PostgreSQL server's URL (DATABASE_URL, else the one `scripts/postgres.sh` runs, started unless it
    runs; DOCSUM_STATE_DIR says whose)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    script = str(ROOT / "scripts" / "postgres.sh")
    subprocess.run([script, "start"], check=True, stdout=subprocess.DEVNULL)
    return subprocess.run([script, "url"], check=True, capture_output=True, text=True).stdout.strip()


@asynccontextmanager
async def running(llm: LLMSettings, database_url: str | None = None) -> AsyncIterator[Pipeline]:
    """The whole pipeline in this event loop, on a new database (dropped at the end) of the PostgreSQL
    server (`database_url`, else `server_url()`), every stage with `llm`'s backend settings."""
    server: str = database_url if database_url is not None else await asyncio.to_thread(server_url)
    url = await create_database(server, "docsum_eval")
    key = secrets.token_urlsafe(24)
    fields = {name: getattr(llm, name) for name in LLMSettings.model_fields if name not in Settings.model_fields}
    settings = settings_of(url, f"{OWNER}={key}", fields)
    try:
        async with run_in_process(lambda stage: settings[stage.name]) as pipeline:
            assert pipeline.url is not None
            headers = {"Authorization": f"Bearer {key}"}
            pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
            try:
                async with httpx.AsyncClient(base_url=pipeline.url, headers=headers, timeout=120) as client:
                    yield Pipeline(client, pool)
            finally:
                await pool.close()
    finally:
        await drop_database(url)


async def summarize_all(
    pipeline: Pipeline,
    tasks: Sequence[Mapping[str, tuple[str, bytes]]],
    *,
    title: str = "",
    in_flight: int = 4,
) -> list[TaskSummary]:
    """Every one of `tasks` (see `Pipeline.summarize`), at most `in_flight` at once, in the order given."""
    gate = asyncio.Semaphore(in_flight)

    async def one(files: Mapping[str, tuple[str, bytes]]) -> TaskSummary:
        async with gate:
            return await pipeline.summarize(files, title=title)

    return list(await asyncio.gather(*(one(files) for files in tasks)))
