"""Documents in S3-compatible storage, on the real server that scripts/s3.sh runs. With
DOCSUM_BLOB_STORE=s3://bucket/prefix uploads complete from their objects and PostgreSQL keeps only
references; an object no row names (what a writer killed between its object and its row leaves) is swept
once past the grace period, and never one a row names. Another system's document published as s3://...
on Kafka is read from the owner's bucket, and one in another owner's bucket is refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
import mimetypes
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from docsum_shared.blobs import BlobStore, NewBlob, ObjectStore, parse_blob_store, sweep_orphans
from docsum_shared.db import migrate
from tests.fake_llm import free_port
from tests.integration.conftest import ROOT, SERVICES, StackFactory, create_bucket, create_database, drop_database
from tests.integration.helpers import eventually, submit, txt, wait_for_task
from tests.integration.test_foreign_producers import producers, publish, read_finished

pytestmark = pytest.mark.integration

EXAMPLES = sorted((ROOT / "examples").iterdir())


@pytest_asyncio.fixture
async def own_db(infra: dict[str, str]) -> AsyncIterator[tuple[str, asyncpg.Pool]]:
    """A database of the test's own: the session's holds other tests' uploads of the same example files,
    which a store shares by hash."""
    url = await create_database(infra["DATABASE_URL"], "docsum_blobs")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    await migrate(pool)
    try:
        yield url, pool
    finally:
        await pool.close()
        await drop_database(url)


@pytest_asyncio.fixture
async def objects(s3_server: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ObjectStore]:
    """The session bucket's blobs, through the client the services use (the AWS variables, as they read them)."""
    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    place = parse_blob_store(s3_server["DOCSUM_BLOB_STORE"])
    assert place is not None
    store = ObjectStore(place)
    try:
        yield store
    finally:
        await store.close()


def _example(path: Path) -> tuple[str, tuple[str, bytes, str]]:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return ("files", (path.name, path.read_bytes(), kind))


@pytest.mark.asyncio
async def test_the_examples_complete_from_objects_and_postgresql_holds_no_upload_bytes(
    make_stack: StackFactory,
    s3_server: dict[str, str],
    own_db: tuple[str, asyncpg.Pool],
    objects: ObjectStore,
) -> None:
    url, db = own_db
    stack = make_stack(SERVICES, DATABASE_URL=url, DOCSUM_LLM_BACKEND="extractive", **s3_server)
    async with stack.client() as client:
        task_id = await submit(client, [_example(p) for p in EXAMPLES], title="the examples")
        task = await wait_for_task(client, task_id, stack)

    assert task["status"] == "COMPLETED", task
    assert [d["status"] for d in task["documents"]] == ["COMPLETED"] * len(EXAMPLES)
    rows = await db.fetch("SELECT sha256, data, location, size_bytes FROM blobs")
    assert sorted(r["sha256"] for r in rows) == sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in EXAMPLES)
    # Not a byte of the uploads in PostgreSQL: each row names its object, which holds the file itself.
    assert await db.fetchval("SELECT count(*) FROM blobs WHERE data IS NOT NULL") == 0
    for row in rows:
        assert row["location"] == objects.location(row["sha256"])
        data = await objects.get(row["location"])
        assert hashlib.sha256(data).hexdigest() == row["sha256"] and len(data) == row["size_bytes"]


@pytest.mark.asyncio
async def test_the_sweep_removes_only_old_objects_no_row_names(
    make_stack: StackFactory,
    s3_server: dict[str, str],
    own_db: tuple[str, asyncpg.Pool],
    objects: ObjectStore,
) -> None:
    url, db = own_db
    # What a writer killed between its object and its row leaves: the object, and no row.
    orphan = NewBlob.of(b"bytes whose row was never written " + url.encode())
    await objects.put(orphan)
    stack = make_stack(("gateway",), DATABASE_URL=url, **s3_server)
    async with stack.client() as client:
        await submit(client, [txt("kept.txt", "A document whose row names its object. " + url)])
    (kept,) = [r["sha256"] for r in await db.fetch("SELECT sha256 FROM blobs")]

    # Within the grace period nothing goes, orphan or not.
    assert await sweep_orphans(db, objects, grace_s=3600) == 0
    assert await objects.modified(orphan.sha256) is not None

    # Past it (the server's clock counts whole seconds: the objects are a second old soon enough), the
    # orphan goes and the object a row names stays.
    async def swept() -> bool:
        await sweep_orphans(db, objects, grace_s=0.001)
        return await objects.modified(orphan.sha256) is None

    await eventually(swept, timeout=30, interval=0.5, message="the orphan to be swept")
    assert await objects.modified(kept) is not None
    location = await db.fetchval("SELECT location FROM blobs WHERE sha256 = $1", kept)
    assert hashlib.sha256(await objects.get(location)).hexdigest() == kept


@pytest.mark.asyncio
async def test_a_document_published_as_an_s3_uri_is_read_from_its_owners_bucket_only(
    make_stack: StackFactory, s3_server: dict[str, str], objects: ObjectStore, own_db: tuple[str, asyncpg.Pool]
) -> None:
    # A database of its own: the example's bytes stored in the object store are no blob the session's
    # stacks (PostgreSQL's store) can read, and they would find them by their hash.
    url, db = own_db
    alice_bucket, bob_bucket = objects.place.bucket, f"docsum-bob-{uuid.uuid4().hex[:12]}"
    await create_bucket(s3_server, bob_bucket)
    client = await objects.client()
    pdf = (ROOT / "examples" / "kafka-overview.pdf").read_bytes()
    await client.put_object(Bucket=alice_bucket, Key="intake/alice/q3/kafka-overview.pdf", Body=pdf)
    await client.put_object(Bucket=bob_bucket, Key="ledger.txt", Body=b"Bob's ledger, for bob alone. " * 20)
    stack = make_stack(
        SERVICES,
        DATABASE_URL=url,
        DOCSUM_LLM_BACKEND="extractive",
        DOCSUM_INTAKE_PRODUCERS=producers(crm=["alice"]),
        DOCSUM_INTAKE_OWNERS=json.dumps({
            "alice": {"s3_places": [f"s3://{alice_bucket}/intake/alice"]},
            "bob": {"s3_places": [f"s3://{bob_bucket}"]},
        }),
        **s3_server,
    )  # fmt: skip
    task = f"crm.s3:{uuid.uuid4().hex}"
    uris = {
        "kafka-overview.pdf": f"s3://{alice_bucket}/intake/alice/q3/kafka-overview.pdf",
        "ledger.txt": f"s3://{bob_bucket}/ledger.txt",  # bob's bucket: not alice's to read
        "gone.pdf": f"s3://{alice_bucket}/intake/alice/q3/gone.pdf",  # allowed, but no such object
    }
    await asyncio.to_thread(publish, stack, [
        {"task_id": task, "owner": "alice", "task_documents": len(uris), "document_id": f"{task}.{n}",
         "filename": name, "source_uri": uri}
        for n, (name, uri) in enumerate(uris.items())
    ])  # fmt: skip
    result = (await asyncio.to_thread(read_finished, stack, {task}, 120))[task]

    documents = {d["filename"]: d for d in result["documents"]}
    assert result["status"] == "COMPLETED_WITH_ERRORS", result
    assert documents["kafka-overview.pdf"]["status"] == "COMPLETED", documents
    stored = await db.fetchval(
        "SELECT d.blob_sha256 FROM documents d WHERE d.task_id = $1 AND d.filename = 'kafka-overview.pdf'", task
    )
    assert stored == hashlib.sha256(pdf).hexdigest()  # the object's own bytes, taken in
    assert documents["ledger.txt"]["status"] == "FAILED"
    assert (
        "is not under a bucket and prefix DOCSUM_INTAKE_OWNERS (alice: s3_places) allows"
        in (documents["ledger.txt"]["error"])
    )
    assert documents["gone.pdf"]["status"] == "FAILED"
    assert "gone.pdf does not exist" in documents["gone.pdf"]["error"]


@pytest.mark.asyncio
async def test_a_row_is_written_only_once_its_object_is_there(
    s3_server: dict[str, str], own_db: tuple[str, asyncpg.Pool], objects: ObjectStore
) -> None:
    """The sweep may remove an object between its upload and its row (a slow writer past the grace period):
    the writer, holding the hash's lock, finds it gone and writes it again before the row."""
    _, db = own_db
    store = BlobStore(objects)
    blob = NewBlob.of(b"written, swept, then referenced " + uuid.uuid4().bytes)
    await store.upload(db, [blob])
    await objects.delete(blob.sha256)  # what the sweep does to an old object no row names
    async with db.acquire() as conn, conn.transaction():
        await store.store(conn, [blob])
    location = await db.fetchval("SELECT location FROM blobs WHERE sha256 = $1", blob.sha256)
    assert await store.read(db, blob.sha256) == b"".join([b async for b in blob.blocks()])
    assert location == objects.location(blob.sha256)


@pytest.mark.asyncio
async def test_the_mergers_maintenance_sweeps_orphans(
    make_stack: StackFactory,
    s3_server: dict[str, str],
    own_db: tuple[str, asyncpg.Pool],
    objects: ObjectStore,
) -> None:
    url, db = own_db
    orphan = NewBlob.of(b"an orphan for the maintenance " + url.encode())
    await objects.put(orphan)
    kept = NewBlob.of(b"a blob a row names " + url.encode())
    store = BlobStore(objects)
    await store.upload(db, [kept])
    async with db.acquire() as conn, conn.transaction():
        await store.store(conn, [kept])
    stack = make_stack(
        ("merger",),
        DATABASE_URL=url,
        DOCSUM_BLOB_ORPHAN_GRACE_S="1",
        DOCSUM_BLOB_SWEEP_INTERVAL_S="0.5",
        **s3_server,
    )

    async def swept() -> bool:
        return await objects.modified(orphan.sha256) is None

    await eventually(swept, timeout=60, interval=0.5, message="the merger to sweep the orphan", stack=stack)
    assert await objects.modified(kept.sha256) is not None


@pytest.mark.asyncio
async def test_an_upload_while_the_object_store_is_away_is_a_503_and_stores_nothing(
    make_stack: StackFactory, own_db: tuple[str, asyncpg.Pool]
) -> None:
    url, db = own_db
    port = free_port()  # nothing listens there: the object store away, as its clients see it
    stack = make_stack(
        ("gateway",),
        DATABASE_URL=url,
        DOCSUM_BLOB_STORE="s3://docsum-away/blobs",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="docsum",
        AWS_SECRET_ACCESS_KEY="docsum-secret",
        AWS_MAX_ATTEMPTS="1",
    )
    async with stack.client() as client:
        response = await client.post("/v1/tasks", files=[txt("note.txt", "A note for a store that is away.")])
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "5"
    assert "the document store (DOCSUM_BLOB_STORE) is not answering now" in response.json()["detail"]
    assert await db.fetchval("SELECT count(*) FROM tasks") == 0
    assert await db.fetchval("SELECT count(*) FROM blobs") == 0
