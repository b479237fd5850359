"""Documents from a producer that is not ours: confluent-kafka (librdkafka, not aiokafka) publishes raw
JSON onto its own topic, intake.crm, as another system would, and the pipeline takes it from there.
The producer `crm` may act for alice only (DOCSUM_INTAKE_PRODUCERS), and alice's URIs may lead only
under her own root (DOCSUM_INTAKE_OWNERS).

One stack, two tasks:
- a task of three documents: a Chinese text inline (base64), the example PDF by a file:// URI under
  alice's root, and one whose base64 is broken: two COMPLETED, one FAILED with its reason, the task
  COMPLETED_WITH_ERRORS (read through the gateway's API: the task id is a uuid, its owner has a key);
- a task of four documents that may not be had: file:// out of the root by .. and by a symlink, a file
  under bob's root (not alice's), and http://127.0.0.1/ (every host allowed, but never a loopback
  address): each FAILED with the reason, the task FAILED (its id is not one the gateway's API answers
  for: read from PostgreSQL).
Both results are read back from task-finished by a confluent-kafka consumer, as the other system would.
Then every message again: no new row, no document, no LLM call; and messages that do not add up (crm
naming bob, a count that disagrees, an id outside the charset, a document id of another task) are
dead-lettered, never joined; so is alice's document published on document-submitted, the pipeline's own
topic. Last, `retry` and the broken document published again with its bytes: taken in, and the task
COMPLETED.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, KafkaException, Producer

from tests.integration.conftest import ROOT, Stack, StackFactory
from tests.integration.helpers import CONSUMED, eventually, read_topics, wait_for_task

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples"


PRODUCER = "crm"  # the stacks' producer of documents, on its topic intake.crm


def publish(stack: Stack, messages: list[dict[str, Any]], topic: str = f"intake.{PRODUCER}") -> None:
    """Each message as JSON, keyed by its document_id, onto the stack's `topic` (crm's own, by default)."""
    producer = Producer({"bootstrap.servers": stack.env["KAFKA_BOOTSTRAP_SERVERS"], "acks": "all"})
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    topic = stack.env["DOCSUM_TOPIC_PREFIX"] + topic
    for message in messages:
        producer.produce(topic, key=message["document_id"], value=json.dumps(message), on_delivery=delivered)
    if producer.flush(30) != 0:
        raise KafkaException("messages still unsent after 30 s")
    assert not failed, failed


def read_finished(stack: Stack, task_ids: set[str], timeout: float = 90.0) -> dict[str, dict[str, Any]]:
    """The task-finished message of each task, read as another system would (its own consumer group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": stack.env["KAFKA_BOOTSTRAP_SERVERS"],
            "group.id": f"crm-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([stack.env["DOCSUM_TOPIC_PREFIX"] + "task-finished"])
    found: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while set(found) != task_ids and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value, key = message.value(), message.key()
            assert value is not None  # every task-finished carries its result
            result = json.loads(value)
            if result["task_id"] in task_ids:
                assert key is not None and key.decode() == result["task_id"]  # keyed by task
                found[result["task_id"]] = result
    finally:
        consumer.close()
    assert set(found) == task_ids, f"task-finished of {task_ids - set(found)} not read within {timeout:g}s"
    return found


async def drained(env: dict[str, str]) -> bool:
    """Every service has handled every message on the topics it consumes (crm's intake topic too), in
    pipeline order (a handler publishes before it commits: a group at the end of its topic has published
    all it will)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"])
    consumer = AIOKafkaConsumer(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"], enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        for topic, service in [(f"intake.{PRODUCER}", "parser"), *CONSUMED.items()]:
            name = env["DOCSUM_TOPIC_PREFIX"] + topic
            partitions = [TopicPartition(name, p) for p in consumer.partitions_for_topic(name) or ()]
            ends = await consumer.end_offsets(partitions)
            group = await admin.list_consumer_group_offsets(f"{env['DOCSUM_TOPIC_PREFIX']}docsum-{service}")
            done = {tp: meta.offset for tp, meta in group.items()}
            if any(done.get(tp, 0) < end for tp, end in ends.items() if end > 0):
                return False
        return True
    finally:
        await consumer.stop()
        await admin.close()


async def snapshot(db: asyncpg.Pool, task_ids: list[str]) -> dict[str, Any]:
    """What a replay must not change: the tasks' rows, their documents and chunks, their LLM calls
    (every summary request is recorded there, answered by the backend or by the cache), and the blobs."""
    return {
        "tasks": [dict(r) for r in await db.fetch("SELECT * FROM tasks WHERE id = ANY($1) ORDER BY id", task_ids)],
        "documents": [
            dict(r) for r in await db.fetch("SELECT * FROM documents WHERE task_id = ANY($1) ORDER BY id", task_ids)
        ],
        "chunks": await db.fetchval(
            "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.task_id = ANY($1)",
            task_ids,
        ),
        "llm_calls": await db.fetchval("SELECT count(*) FROM llm_calls WHERE task_id = ANY($1)", task_ids),
        "blobs": await db.fetchval("SELECT count(*) FROM blobs"),
    }


async def dead_letters(env: dict[str, str], topic: str) -> list[tuple[str, str]]:
    """(key, the error header) of every dead letter of `topic` (its name without the prefix)."""
    partitions = [TopicPartition(env["DOCSUM_TOPIC_PREFIX"] + topic + ".dlq", 0)]  # a DLQ has one partition
    consumer = AIOKafkaConsumer(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"], enable_auto_commit=False)
    await consumer.start()
    try:
        return [(r.key.decode(), dict(r.headers)["error"].decode()) for r in await _records(consumer, partitions)]
    finally:
        await consumer.stop()


async def _records(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> list[Any]:
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    ends = await consumer.end_offsets(partitions)
    found: list[Any] = []
    while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            found += records
    return found


def producers(**owners: list[str]) -> str:
    """DOCSUM_INTAKE_PRODUCERS for the stack: crm may act for `owners["crm"]`."""
    return json.dumps(owners)


@pytest.fixture
def bob_root(tmp_path: Path) -> Path:
    root = tmp_path / "bob-docs"
    root.mkdir()
    (root / "ledger.txt").write_text("Bob's ledger, for bob alone. " * 20)
    return root


@pytest.fixture
def file_root(tmp_path: Path) -> Path:
    root = tmp_path / "shared-docs"
    root.mkdir()
    shutil.copy(EXAMPLES / "kafka-overview.pdf", root / "kafka-overview.pdf")
    (tmp_path / "private.txt").write_text("Not to be read by docsum. " * 20)
    (root / "escape.txt").symlink_to(tmp_path / "private.txt")
    return root


async def test_documents_published_by_another_kafka_client(
    make_stack: StackFactory, db: asyncpg.Pool, file_root: Path, bob_root: Path
) -> None:
    stack = make_stack(
        DOCSUM_LLM_BACKEND="extractive",
        DOCSUM_INTAKE_PRODUCERS=producers(crm=["alice"]),
        DOCSUM_INTAKE_OWNERS=json.dumps({
            # any host: the address check still refuses loopback; its port, to reach the address check
            "alice": {"file_roots": [str(file_root)], "http_hosts": ["*"], "http_ports": [80, 443, 9]},
            "bob": {"file_roots": [str(bob_root)]},
        }),
        DOCSUM_INTAKE_FILE_ROOTS=json.dumps([str(bob_root)]),  # everyone else's: not alice's either
    )  # fmt: skip
    essay = (EXAMPLES / "chinese-essay.txt").read_bytes()
    task = str(uuid.uuid4())  # a uuid, so that its owner can follow it through the gateway's API too
    # Whichever message of the task comes first creates it: each carries the task's title and options.
    common: dict[str, Any] = {"task_id": task, "owner": "alice", "task_documents": 3, "title": "From the CRM",
                              "options": {"length": "brief"}}  # fmt: skip
    good = [
        {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "论文.txt",
         "content_type": "text/plain", "content_base64": base64.b64encode(essay).decode()},
        {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "kafka-overview.pdf",
         "source_uri": (file_root / "kafka-overview.pdf").as_uri(), "event_id": "e-1", "trace_id": "trace-1"},
    ]  # fmt: skip
    bad = {**common, "document_id": f"crm:{uuid.uuid4().hex}", "filename": "broken.txt", "content_base64": "%%%="}
    refused_task = f"crm.batch:{uuid.uuid4().hex}"
    refused = [
        {"task_id": refused_task, "owner": "alice", "task_documents": 4, "document_id": f"{refused_task}.{name}",
         "filename": name, "source_uri": uri}
        for name, uri in [
            ("outside.txt", (file_root / ".." / "private.txt").as_uri()),  # .. out of the root
            ("escape.txt", (file_root / "escape.txt").as_uri()),  # a symlink out of the root
            ("ledger.txt", (bob_root / "ledger.txt").as_uri()),  # bob's root, and the global one: not alice's
            ("loopback.txt", "http://127.0.0.1:9/loopback.txt"),
        ]
    ]  # fmt: skip
    await asyncio.to_thread(publish, stack, [*good, bad, *refused])

    async with stack.client("alice") as client:
        view = await wait_for_task(client, task, stack, timeout=120, published=True)
    assert view["status"] == "COMPLETED_WITH_ERRORS", view
    assert view["title"] == "From the CRM"
    docs = {d["filename"]: d for d in view["documents"]}
    assert set(docs) == {"论文.txt", "kafka-overview.pdf", "broken.txt"}
    for name in ("论文.txt", "kafka-overview.pdf"):
        assert docs[name]["status"] == "COMPLETED" and docs[name]["summary"], docs[name]
    assert any("\u4e00" <= ch <= "\u9fff" for ch in docs["论文.txt"]["summary"])  # summarized in Chinese
    pdf_text = await db.fetchval("SELECT text FROM document_texts WHERE document_id = $1", good[1]["document_id"])
    assert "Kafka" in pdf_text  # the PDF read from the file:// URI, parsed like an upload
    assert docs["broken.txt"]["status"] == "FAILED"
    assert "content_base64 is not valid base64" in docs["broken.txt"]["error"]
    stored = await db.fetchrow("SELECT options, expected_documents, owner, deployment FROM tasks WHERE id = $1", task)
    assert json.loads(stored["options"])["length"] == "brief" and stored["expected_documents"] == 3
    assert stored["deployment"] == stack.env["DOCSUM_TOPIC_PREFIX"]  # its chunks are this deployment's to admit
    blob = await db.fetchval(
        "SELECT b.data FROM blobs b JOIN documents d ON d.blob_sha256 = b.sha256 WHERE d.id = $1",
        good[0]["document_id"],
    )
    assert blob == essay  # stored once by sha256, exactly the bytes published

    # What other systems read back: the result of each task on task-finished.
    results = await asyncio.to_thread(read_finished, stack, {task, refused_task})
    assert results[task]["status"] == "COMPLETED_WITH_ERRORS" and results[task]["summary"]
    assert {d["filename"]: d["status"] for d in results[task]["documents"]} == {
        "论文.txt": "COMPLETED", "kafka-overview.pdf": "COMPLETED", "broken.txt": "FAILED"
    }  # fmt: skip
    assert results[refused_task]["status"] == "FAILED"
    rows = {
        r["filename"]: r
        for r in await db.fetch("SELECT filename, status, error, blob_sha256 FROM documents WHERE task_id = $1",
                                refused_task)
    }  # fmt: skip
    assert {d["error"] for d in results[refused_task]["documents"]} == {r["error"] for r in rows.values()}
    assert {r["status"] for r in rows.values()} == {"FAILED"} and all(r["blob_sha256"] is None for r in rows.values())
    for name in ("outside.txt", "escape.txt", "ledger.txt"):
        assert "is not under a directory DOCSUM_INTAKE_OWNERS (alice: file_roots) allows" in rows[name]["error"]
    assert "resolves to 127.0.0.1, a loopback address" in rows["loopback.txt"]["error"]
    assert not await db.fetchval(
        "SELECT count(*) FROM document_texts t JOIN documents d ON d.id = t.document_id WHERE d.task_id = $1",
        refused_task,
    )  # nothing of bob's ledger read

    # --- the same messages again, and messages that do not add up ------------------------------------
    await eventually(lambda: drained(stack.env), timeout=60, message="the pipeline to settle")
    before = await snapshot(db, [task, refused_task])
    intruder = {**good[0], "owner": "bob", "document_id": f"crm:{uuid.uuid4().hex}"}  # crm acts for alice only
    elsewhere = {**good[0], "task_id": str(uuid.uuid4()), "document_id": f"crm:{uuid.uuid4().hex}"}
    recount = {**good[0], "task_documents": 4, "document_id": f"crm:{uuid.uuid4().hex}"}
    bad_id = {**good[0], "task_id": "crm task with spaces", "document_id": f"crm:{uuid.uuid4().hex}"}
    hijack = {**good[1], "task_id": str(uuid.uuid4()), "task_documents": 1}  # a document of task A, elsewhere
    # a new task whose deadline the gateway would refuse (in year 1, minus any margin, it is no date)
    year_one = {**good[0], "task_id": str(uuid.uuid4()), "task_documents": 1, "document_id": f"crm:{uuid.uuid4().hex}",
                "options": {"mode": "batch", "deadline": "0001-01-01T00:00:00Z"}}  # fmt: skip
    poison = {m["document_id"]: m for m in (intruder, recount, bad_id, hijack, year_one)}
    await asyncio.to_thread(publish, stack, [*good, bad, *refused, *poison.values()])
    # alice's own document, on the pipeline's topic instead of crm's: refused, whoever wrote it
    await asyncio.to_thread(publish, stack, [elsewhere], "document-submitted")

    async def dead_lettered(topic: str, wanted: set[str]) -> dict[str, str] | None:
        found = {key: error for key, error in await dead_letters(stack.env, topic) if key in wanted}
        return found if len(found) == len(wanted) else None

    reasons = await eventually(
        lambda: dead_lettered(f"intake.{PRODUCER}", set(poison)), timeout=60, message="the DLQ", stack=stack
    )
    assert "producer crm may not submit documents for owner 'bob'" in reasons[intruder["document_id"]]
    assert "task_documents is 4, but" in reasons[recount["document_id"]]
    assert "task_id 'crm task with spaces' is not 1-64 characters" in reasons[bad_id["document_id"]]
    assert "already exists under another task or owner" in reasons[hijack["document_id"]]
    assert "options.deadline 0001-01-01T00:00:00+00:00 is not in the future" in reasons[year_one["document_id"]]
    [internal] = (
        await eventually(
            lambda: dead_lettered("document-submitted", {elsewhere["document_id"]}), timeout=60, message="its DLQ"
        )
    ).values()
    assert "takes only the stored form" in internal and "intake.<producer>" in internal, internal
    assert not await db.fetchval("SELECT count(*) FROM tasks WHERE id = $1", elsewhere["task_id"])
    await eventually(lambda: drained(stack.env), timeout=60, message="the pipeline to settle again")
    after = await snapshot(db, [task, refused_task])
    assert after == before  # nothing joined, nothing written, nothing summarized again
    for message in poison.values():
        assert await db.fetchval("SELECT count(*) FROM tasks WHERE id = $1", message["task_id"]) == (
            1 if message["task_id"] == task else 0
        )
    assert await db.fetchval("SELECT owner FROM tasks WHERE id = $1", task) == "alice"

    # --- a document that failed at intake, retried: published again with its bytes, it is taken in -----
    async with stack.client("alice") as client:
        retried = await client.post(f"/v1/tasks/{task}/retry")
        assert retried.status_code == 200, retried.text
        fixed = {**bad, "content_base64": base64.b64encode(b"A note that arrives intact at last.").decode()}
        await asyncio.to_thread(publish, stack, [fixed])
        view = await wait_for_task(client, task, stack, timeout=120)
    assert view["status"] == "COMPLETED", view
    assert {d["filename"]: d["status"] for d in view["documents"]}["broken.txt"] == "COMPLETED"
    assert await db.fetchval("SELECT count(*) FROM documents WHERE task_id = $1", task) == 3


async def test_the_stored_form_reads_only_its_own_documents_bytes(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    """Blobs are stored once by sha256 for every owner. An owner who publishes the stored form naming the
    hash of another owner's upload must not get its text, and must not learn whether such bytes exist:
    the real hash and a made-up one are refused alike (same error, same dead letter, same document).
    (With the broker's ACLs only the pipeline may write document-submitted at all: this is the parser's
    own defence, for a deployment without them.)"""
    stack = make_stack(DOCSUM_INTAKE_PRODUCERS=producers(crm=["bob"]))
    memo = f"Private memo {uuid.uuid4().hex}: the merger plans of alice, not for bob's eyes.".encode()
    async with stack.client("alice") as alice:
        response = await alice.post("/v1/tasks", files=[("files", ("memo.txt", memo, "text/plain"))])
        assert response.status_code == 201, response.text
    real = hashlib.sha256(memo).hexdigest()
    assert await db.fetchval("SELECT count(*) FROM blobs WHERE sha256 = $1", real) == 1

    # bob's own task and document, by a URI that fails; `retry` puts the document back to PENDING.
    task = str(uuid.uuid4())
    document = f"{task}:1"
    await asyncio.to_thread(publish, stack, [
        {"task_id": task, "document_id": document, "owner": "bob", "filename": "memo.txt", "task_documents": 1,
         "source_uri": "s3://x"},
    ])  # fmt: skip
    async with stack.client("bob") as bob:
        assert (await wait_for_task(bob, task, stack, timeout=90, published=True))["status"] == "FAILED"
        assert (await bob.post(f"/v1/tasks/{task}/retry")).status_code == 200
    assert await db.fetchval("SELECT status FROM documents WHERE id = $1", document) == "PENDING"

    dlq = stack.env["DOCSUM_TOPIC_PREFIX"] + "document-submitted.dlq"

    async def dead_letters() -> list[str]:
        return [
            dict(r.headers)["error"].decode() for r in await read_topics(stack.env, [dlq]) if r.key == document.encode()
        ]

    async def observed() -> dict[str, Any]:
        """Everything bob can see of his document, and what the database holds for it."""
        async with stack.client("bob") as bob:
            view = await bob.get(f"/v1/tasks/{task}")
        doc = view.json()["documents"][0]
        return {
            "status": doc["status"], "error": doc["error"], "summary": doc.get("summary"),
            "blob": await db.fetchval("SELECT blob_sha256 FROM documents WHERE id = $1", document),
            "text": await db.fetchval("SELECT text FROM document_texts WHERE document_id = $1", document),
            "chunks": [r["text"] for r in await db.fetch("SELECT text FROM chunks WHERE document_id = $1", document)],
        }  # fmt: skip

    outcomes = []
    for guess in (hashlib.sha256(b"nothing stored has this hash").hexdigest(), real):
        seen = len(await dead_letters())
        stored_form = {"task_id": task, "document_id": document, "owner": "bob", "filename": "memo.txt",
                       "content_type": "text/plain", "blob_sha256": guess, "size_bytes": len(memo)}  # fmt: skip
        await asyncio.to_thread(publish, stack, [stored_form], "document-submitted")

        async def handled(seen: int = seen) -> dict[str, Any] | None:
            state = await observed()
            letters = await dead_letters()
            if len(letters) > seen or state["status"] != "PENDING" or state["text"] is not None:
                return {**state, "dead_letter": letters[seen:]}
            return None

        outcomes.append(await eventually(handled, timeout=60, message="the stored form to be handled", stack=stack))
    refused_random, refused_real = outcomes
    for outcome in outcomes:
        assert outcome["status"] == "PENDING" and outcome["blob"] is None, outcome
        assert outcome["text"] is None and outcome["chunks"] == [], outcome
        assert len(outcome["dead_letter"]) == 1, outcome
        assert real not in outcome["dead_letter"][0]
    assert refused_real == refused_random  # the same words, the same state: nothing tells the two apart
    assert "blob_sha256 is not the hash of this document's stored bytes" in refused_real["dead_letter"][0]
    owned_by_bob = await db.fetch(
        "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id JOIN tasks t ON t.id = d.task_id"
        " WHERE t.owner = 'bob'"
    )
    assert not [r for r in owned_by_bob if memo.decode()[:40] in r["text"]]


async def test_uris_no_request_can_be_made_for_fail_their_documents(make_stack: StackFactory, db: asyncpg.Pool) -> None:
    """A control character in the URI (httpx's InvalidURL) and a name IDNA cannot encode (UnicodeError)
    used to escape as unexpected errors: dead-lettered, no row, the producer never told. Each now fails
    its document with the reason, and task-finished says so."""
    # The parser fails the documents and the merger finishes the task: no other service has a part in it.
    stack = make_stack(
        ("parser", "merger"),
        DOCSUM_INTAKE_HTTP_HOSTS=json.dumps(["*"]),
        DOCSUM_INTAKE_PRODUCERS=producers(crm=["alice"]),
    )
    task = f"crm.uris:{uuid.uuid4().hex}"
    uris = {"control.pdf": "http://93.184.216.34/a\x01b.pdf", "dots.pdf": "http://a..example.com/a.pdf"}
    await asyncio.to_thread(publish, stack, [
        {"task_id": task, "owner": "alice", "task_documents": len(uris), "document_id": f"{task}.{n}",
         "filename": name, "source_uri": uri}
        for n, (name, uri) in enumerate(uris.items())
    ])  # fmt: skip
    result = (await asyncio.to_thread(read_finished, stack, {task}, 60))[task]
    assert result["status"] == "FAILED"
    errors = {d["filename"]: d["error"] for d in result["documents"]}
    assert "contains the control character or space '\\x01'" in errors["control.pdf"], errors
    assert "host a..example.com is not a valid host name" in errors["dots.pdf"], errors
    assert await db.fetchval("SELECT count(*) FROM documents WHERE task_id = $1 AND status = 'FAILED'", task) == 2
