"""The read model's SQL: a task as its owner (or, inside the pipeline, its result) sees it.

Every read for a caller names its `Scope` (deployment and owner): a task of another owner, or one taken
in by another deployment sharing the database, is no task at all."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import get_args

import asyncpg

from ..options import TaskPriority
from ..scope import Scope
from ..states import DOCUMENT_FINAL, TASK_TAKES_WORK, ChunkStatus, DocumentStatus


async def load_task(pool: asyncpg.Pool, task_id: str) -> tuple[asyncpg.Record, list[asyncpg.Record]] | None:
    """The task and its documents, whoever owns it: for the pipeline's own use (its published result)."""
    task = await pool.fetchrow("SELECT * FROM tasks WHERE id = $1", task_id)
    return None if task is None else (task, await _documents(pool, task_id))


async def get_task(
    pool: asyncpg.Pool, scope: Scope, task_id: str
) -> tuple[asyncpg.Record, list[asyncpg.Record]] | None:
    """The task and its documents if it is in `scope`."""
    task = await pool.fetchrow(f"SELECT * FROM tasks WHERE id = $1 AND {_scoped(2)}", task_id, *_of(scope))
    return None if task is None else (task, await _documents(pool, task_id))


async def _documents(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT d.id, d.filename, d.status, d.size_level, d.text_chars, d.chunk_total, d.summary,"
        " d.summary_model, d.error, d.coverage, d.failed_chunks, d.truncated_parts,"
        " d.chunks_completed AS chunks_done, d.chunks_failed, d.reading"
        " FROM documents d WHERE d.task_id = $1 ORDER BY d.position",
        task_id,
    )


async def sentences(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """The stored sentences of the task's summary (`holder` null) and of its documents' (`holder` the
    document), where known, with `places`: for each source of each sentence in order, the filename of
    its document, the unit its text counts and the unit the range ends in (JSON [filename, unit, last],
    nulls for a source outside the task). One query, for the views that show sentences only.

    The filename and unit are read once per document of the task. The unit a range ends in is stored
    with it (citations.to_json's fifth item); only a source stored before that is looked up in its
    document's positions, one lookup each."""
    async with _transaction(pool) as conn:
        # PostgreSQL guesses 100 rows for each jsonb_array_elements, which puts the lookups' estimate over
        # jit_above_cost: compiling the query (~50 ms) would cost more than running it (~2 ms).
        await conn.execute("SET LOCAL jit = off")
        return await conn.fetch(_SENTENCES, task_id)


@contextlib.asynccontextmanager
async def _transaction(db: asyncpg.Pool | asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """A transaction on `db`: on a connection of the pool, or within the transaction a connection is in
    (a task's result is read in the transaction that ends the task, for the webhooks' outbox)."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn, conn.transaction():
            yield conn
    else:
        async with db.transaction():
            yield db


_SENTENCES = (
    "WITH docs AS MATERIALIZED (SELECT d.id, d.filename, x.position_unit AS unit FROM documents d"
    "  LEFT JOIN document_texts x ON x.document_id = d.id WHERE d.task_id = $1)"
    " SELECT h.holder, h.sentences::text AS sentences, ("
    "  SELECT coalesce(jsonb_agg(jsonb_build_array(d.filename, d.unit,"
    "    CASE WHEN jsonb_array_length(r.src) > 4 THEN r.src->4"
    "     ELSE to_jsonb((SELECT width_bucket(greatest((r.src->>2)::int, (r.src->>3)::int - 1), x.position_starts)"
    "                    FROM document_texts x WHERE x.document_id = d.id)) END) ORDER BY s.i, r.j),"
    "   '[]')"
    "  FROM jsonb_array_elements(h.sentences) WITH ORDINALITY s(sentence, i)"
    "  CROSS JOIN LATERAL jsonb_array_elements(s.sentence->'sources') WITH ORDINALITY r(src, j)"
    "  LEFT JOIN docs d ON d.id = r.src->>0"
    " )::text AS places"
    " FROM (SELECT NULL::text AS holder, summary_sentences AS sentences FROM tasks WHERE id = $1"
    "       UNION ALL SELECT id, summary_sentences FROM documents WHERE task_id = $1) h"
    " WHERE h.sentences IS NOT NULL"
)


async def quote(
    pool: asyncpg.Pool, scope: Scope, task_id: str, document_id: str, start: int, end: int, max_chars: int
) -> asyncpg.Record | None:
    """The characters [start, end) of a document's extracted text (as many as it has; none unless the
    range is non-empty and at most `max_chars` long), its length, and the units the range starts and ends
    in; None unless `owner` owns the task and the document is in it (`has_text` false: the document has
    no extracted text yet).

    The length is the one the parser stored with the text (documents.text_chars, same transaction), not
    length(x.text): that would decompress the whole text (48 ms for 19 MB) where substr decompresses only
    up to the range's end. The unit starts are read whole (width_bucket): 0.1 ms for 280,000 lines.
    `ocr`: a page the range is on was read by OCR (document_ocr_pages counts pages from 0)."""
    return await pool.fetchrow(
        "SELECT q.*, q.unit = 'page' AND EXISTS (SELECT 1 FROM document_ocr_pages o WHERE o.document_id = $2"
        "  AND o.page + 1 BETWEEN q.page AND q.last_page) AS ocr FROM ("
        " SELECT d.filename, x.document_id IS NOT NULL AND d.text_chars IS NOT NULL AS has_text, d.text_chars,"
        " CASE WHEN $4::int < $5::int AND $5::int - $4::int <= $6::int"
        "  THEN substr(x.text, $4::int + 1, $5::int - $4::int) END AS text,"
        " x.position_unit AS unit, width_bucket($4::int, x.position_starts) AS page,"
        " width_bucket(greatest($4::int, $5::int - 1), x.position_starts) AS last_page"
        " FROM documents d JOIN tasks t ON t.id = d.task_id AND t.owner = $3 AND t.deployment = $7"
        " LEFT JOIN document_texts x ON x.document_id = d.id"
        " WHERE d.id = $2 AND d.task_id = $1) q",
        task_id,
        document_id,
        scope.owner,
        start,
        end,
        max_chars,
        scope.deployment,
    )


async def usage_rows(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """Usage per document (None: the task-level merge), model and tier (what it is priced at), from the
    calls ledger."""
    return await pool.fetch(
        "SELECT document_id, model, tier, coalesce(sum(prompt_tokens), 0) AS prompt_tokens,"
        " coalesce(sum(completion_tokens), 0) AS completion_tokens,"
        " coalesce(sum(requests) FILTER (WHERE NOT cached), 0) AS llm_calls,"
        " count(*) FILTER (WHERE cached) AS cached_calls"
        " FROM llm_calls WHERE task_id = $1 GROUP BY document_id, model, tier",
        task_id,
    )


async def reuse_rows(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """Per document (None: the task's own merge) and kind of request (chunk, document, task): how many items
    were made and how many of them were answered from stored results only. An item is a chunk (all the requests
    it took) or a merge request (its cache key); one a crash made ask twice, paid then answered from the cache,
    counts as paid."""
    return await pool.fetch(
        "SELECT document_id, kind, count(*)::int AS made, count(*) FILTER (WHERE reused)::int AS reused FROM ("
        "  SELECT document_id, kind, bool_and(cached) AS reused FROM llm_calls WHERE task_id = $1"
        "  GROUP BY document_id, kind, coalesce(chunk_id, cache_key)) items"
        " GROUP BY document_id, kind",
        task_id,
    )


async def previous_documents(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """Each document of the task that is a new version of one of its previous task's (`previous_task`, of the
    same owner and deployment), with that document's id (`previous`) and its summary's stored sentences
    (`previous_sentences`, null when none are known): matched by key, the document key, else the filename;
    the n-th document of a key to the n-th of the previous task's, in their order."""
    return await pool.fetch(
        _PAIRED + " SELECT paired.id, paired.previous, pd.summary_sentences::text AS previous_sentences"
        " FROM paired JOIN documents pd ON pd.id = paired.previous",
        task_id,
    )


async def previous_document(pool: asyncpg.Pool, task_id: str, document_id: str) -> str | None:
    """The id of the document that `document_id` (of `task_id`) is a new version of, paired as
    `previous_documents` pairs them; None when it is none's."""
    found: str | None = await pool.fetchval(
        _PAIRED + " SELECT previous FROM paired WHERE id = $2", task_id, document_id
    )
    return found


# `paired`: each document of task $1 (`id`) with the document of its previous task (of the same owner and
# deployment) it is a new version of (`previous`): the same key (the document key, else the filename), and
# the same place among the task's documents of that key.
_PAIRED = (
    "WITH linked AS (SELECT p.id FROM tasks t JOIN tasks p ON p.id = t.previous_task AND p.owner = t.owner"
    "  AND p.deployment = t.deployment WHERE t.id = $1),"
    " keyed AS (SELECT d.id, d.task_id, coalesce(d.document_key, d.filename) AS k,"
    "  row_number() OVER (PARTITION BY d.task_id, coalesce(d.document_key, d.filename) ORDER BY d.position, d.id) AS n"
    "  FROM documents d WHERE d.task_id = $1 OR d.task_id = (SELECT id FROM linked)),"
    " paired AS (SELECT d.id, p.id AS previous FROM keyed d JOIN keyed p ON p.k = d.k AND p.n = d.n"
    "  AND p.task_id <> d.task_id WHERE d.task_id = $1)"
)


async def remaining_work(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record:
    """Chunks still to summarize and their estimated prompt tokens (counted on each document as its chunks
    finish, see migration 0006: a sum over the task's documents, not its chunks), and the recent call rate."""
    return await pool.fetchrow(
        "SELECT coalesce(sum(d.chunk_total - d.chunks_completed - d.chunks_failed), 0)::bigint AS chunks,"
        "  coalesce(sum(d.pending_token_estimate), 0)::bigint AS prompt_tokens,"
        "  (SELECT count(*) FROM llm_calls WHERE task_id = $1 AND NOT cached"
        "   AND created_at > now() - interval '60 seconds') AS calls_last_minute"
        " FROM documents d WHERE d.task_id = $1",
        task_id,
    )


# An owner's own order, by a task's stored option: its place in TaskPriority (urgent, normal, background), $5.
_TIER = "array_position($5::text[], coalesce(t.options->>'priority', 'normal'))"


async def place(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record | None:
    """The task's chunks waiting for their turn, its owner's other waiting chunks that go first, and the
    owner's calls answered over the last minute; None when the task takes no work. Its owner's rows only,
    in its deployment: nothing of another owner's is read."""
    return await pool.fetchrow(
        f"WITH me AS (SELECT t.id, t.owner, t.deployment, {_TIER} AS tier FROM tasks t"
        "   WHERE t.id = $1 AND t.status = ANY($2::text[])),"
        f" mine AS (SELECT d.task_id, c.ready_at, {_TIER} AS tier"
        "   FROM me JOIN tasks t ON t.owner = me.owner AND t.deployment = me.deployment"
        "   JOIN documents d ON d.task_id = t.id JOIN chunks c ON c.document_id = d.id"
        "   WHERE t.status = ANY($2::text[]) AND d.status <> ALL($3::text[])"
        "   AND c.admitted_at IS NULL AND c.status = $4),"
        " first AS (SELECT min(ready_at) AS ready_at FROM mine WHERE task_id = $1)"
        " SELECT (SELECT count(*) FROM mine WHERE task_id = $1) AS waiting,"
        "  (SELECT count(*) FROM mine, me, first WHERE mine.task_id <> $1"
        "   AND (mine.tier < me.tier OR (mine.tier = me.tier AND mine.ready_at < first.ready_at))) AS ahead,"
        "  (SELECT count(*) FROM llm_calls l JOIN tasks t ON t.id = l.task_id"
        "   WHERE t.owner = me.owner AND t.deployment = me.deployment"
        "   AND t.last_active_at > now() - interval '90 seconds'"  # a call of the last minute touched its task
        "   AND NOT l.cached AND l.created_at > now() - interval '60 seconds') AS calls_last_minute"
        " FROM me",
        task_id, list(TASK_TAKES_WORK), sorted(DOCUMENT_FINAL), ChunkStatus.PENDING, list(get_args(TaskPriority)),
    )  # fmt: skip


async def batch_lines(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    """The task's batch lines counted by status and open batch (batch columns null: in none, or in one
    that ended), with what the provider last said of that batch."""
    return await pool.fetch(
        "SELECT l.status, b.id AS batch_id, b.state AS batch_state, b.lines AS batch_lines,"
        " b.lines_done AS batch_done, b.lines_failed AS batch_failed, b.submitted_at, count(*)::int AS lines"
        " FROM batch_lines l LEFT JOIN llm_batches b ON b.id = l.batch_id AND b.state <> 'ended'"
        " WHERE l.task_id = $1 GROUP BY l.status, b.id",
        task_id,
    )


async def learned_budget(pool: asyncpg.Pool, key: str) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT context_tokens, learned_from FROM llm_endpoints WHERE key = $1", key)


async def recovery(pool: asyncpg.Pool, task_id: str) -> asyncpg.Record:
    return await pool.fetchrow(
        "SELECT coalesce(sum(c.attempts), 0) AS attempts, coalesce(sum(c.interruptions), 0) AS interruptions"
        " FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.task_id = $1",
        task_id,
    )


async def failures(pool: asyncpg.Pool, task_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT d.id AS document_id, d.filename, c.chunk_index, coalesce(c.error, d.error) AS error, c.attempts"
        " FROM documents d LEFT JOIN chunks c ON c.document_id = d.id AND c.status = $2"
        " WHERE d.task_id = $1 AND (d.status = $3 OR c.id IS NOT NULL) ORDER BY d.position, c.chunk_index",
        task_id,
        ChunkStatus.FAILED,
        DocumentStatus.FAILED,
    )


async def owns(pool: asyncpg.Pool, scope: Scope, task_id: str) -> bool:
    """The task is in `scope`."""
    return bool(await pool.fetchval(f"SELECT 1 FROM tasks WHERE id = $1 AND {_scoped(2)}", task_id, *_of(scope)))


async def list_tasks(pool: asyncpg.Pool, scope: Scope, limit: int) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT t.id, t.title, t.status, t.created_at,"
        " ARRAY(SELECT d.filename FROM documents d WHERE d.task_id = t.id ORDER BY d.position, d.id LIMIT 2)"
        "   AS first_files,"
        " (SELECT count(*) FROM documents d WHERE d.task_id = t.id) AS files"
        f" FROM tasks t WHERE {_scoped(2, 't.')} ORDER BY t.created_at DESC LIMIT $1",
        limit,
        *_of(scope),
    )


def _scoped(n: int, alias: str = "") -> str:
    """The scope's tasks, its deployment and owner the parameters $n and $n+1 (`alias`: "t." when the
    tasks' table is named so)."""
    return f"{alias}deployment = ${n} AND {alias}owner = ${n + 1}"


def _of(scope: Scope) -> tuple[str, str]:
    """The parameters `_scoped` names, in its order."""
    return scope.deployment, scope.owner
