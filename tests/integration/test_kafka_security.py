"""docsum on a broker that authenticates every client (SASL/SCRAM-SHA-512) and authorizes every request
(ACLs, nothing allowed without one).

The broker is a second one, started by the project's own script (`DOCSUM_KAFKA_SASL=1 scripts/kafka.sh
start`) in a state dir of its own, on the first broker's jars; its principals get the ACLs the README's
"Kafka security and ACLs" lists, from scripts/kafka_acls.py: `ingest` is the principal of the producer
`crm`, which may write its own topic, intake.crm, and not document-submitted, the pipeline's own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from docsum_shared.events import Topic, intake_topic
from docsum_shared.kafka import ensure_topics
from tests.documents import english_prose
from tests.fake_llm import free_port
from tests.integration.conftest import ROOT, SERVICES, StackFactory
from tests.integration.helpers import kafka_options, kafka_settings, submit, txt, wait_for_task

pytestmark = pytest.mark.integration

KAFKA_SH = str(ROOT / "scripts" / "kafka.sh")
USERS = ("docsum", "ingest", "results")  # the services, an outside producer, an outside consumer
PRODUCERS = json.dumps({"crm": ["alice"]})  # DOCSUM_INTAKE_PRODUCERS: crm (principal ingest) acts for alice


@dataclass
class SecuredBroker:
    bootstrap: str
    prefix: str
    passwords: dict[str, str]

    def env(self, user: str, password: str | None = None) -> dict[str, str]:
        """The environment of a client that connects as `user`."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "DOCSUM_TOPIC_PREFIX": self.prefix,
            "DOCSUM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "DOCSUM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "DOCSUM_KAFKA_SASL_USERNAME": user,
            "DOCSUM_KAFKA_SASL_PASSWORD": password or self.passwords[user],
        }


def _run(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    passwords = {user: secrets.token_urlsafe(18) for user in ("admin", *USERS)}
    # KAFKA_BOOTSTRAP_SERVERS (an external broker for the rest of the suite) would make `start` a no-op.
    script_env = {name: value for name, value in os.environ.items() if name != "KAFKA_BOOTSTRAP_SERVERS"}
    # The jars the first broker runs on: nothing is downloaded again.
    libs = os.environ.get("DOCSUM_KAFKA_LIBS_DIR") or _run([KAFKA_SH, "libs"], script_env).strip()
    port = free_port()
    script_env |= {
        "DOCSUM_STATE_DIR": str(tmp_path_factory.mktemp("secured-kafka")),
        "DOCSUM_KAFKA_LIBS_DIR": libs,
        "DOCSUM_KAFKA_PORT": str(port),
        "DOCSUM_KAFKA_CONTROLLER_PORT": str(free_port()),
        "DOCSUM_KAFKA_SASL": "1",
        "DOCSUM_KAFKA_ADMIN_PASSWORD": passwords["admin"],
        "DOCSUM_KAFKA_SCRAM_USERS": ",".join(f"{user}={passwords[user]}" for user in USERS),
    }
    broker = SecuredBroker(f"127.0.0.1:{port}", f"sec-{uuid.uuid4().hex[:8]}.", passwords)
    try:
        _run([KAFKA_SH, "start"], script_env)
        _run(
            [sys.executable, str(ROOT / "scripts" / "kafka_acls.py"), "--intake", "crm=ingest"],
            {**os.environ, **broker.env("admin"), "DOCSUM_INTAKE_PRODUCERS": PRODUCERS},
        )
        yield broker
    finally:
        _run([KAFKA_SH, "stop"], script_env)


async def test_the_pipeline_runs_as_the_services_principal(secured: SecuredBroker, make_stack: StackFactory) -> None:
    stack = make_stack(
        SERVICES, **secured.env("docsum"), DOCSUM_LLM_BACKEND="extractive", DOCSUM_INTAKE_PRODUCERS=PRODUCERS
    )
    async with stack.client() as client:
        task_id = await submit(client, [txt("secured.txt", english_prose(1_500, seed=41))])
        task = await wait_for_task(client, task_id, stack, timeout=90)
    # crm's document, published by its own principal on its own topic.
    foreign = f"crm.sec:{uuid.uuid4().hex}"
    content = base64.b64encode(english_prose(800, seed=7).encode()).decode()
    document_id = f"{foreign}:1"
    note = {"task_id": foreign, "document_id": document_id, "owner": "alice", "filename": "note.txt",
            "task_documents": 1, "content_base64": content}  # fmt: skip
    producer = AIOKafkaProducer(**kafka_options(secured.env("ingest")), acks="all", request_timeout_ms=10_000)
    await producer.start()
    try:
        await producer.send_and_wait(
            secured.prefix + intake_topic("crm"), json.dumps(note).encode(), key=document_id.encode()
        )
    finally:
        await producer.stop()

    assert task["status"] == "COMPLETED", task
    assert task["documents"][0]["summary"]
    # No request of any service was refused (the gateway's progress consumer would only log it), and
    # no log shows the password.
    logs = "".join(path.read_text(errors="replace") for path in stack.logs.glob("*.log"))
    assert f"parser consuming {secured.prefix}{Topic.DOCUMENT_SUBMITTED}, {secured.prefix}intake.crm" in logs
    assert "AuthorizationFailed" not in logs and "progress consumer" not in logs
    assert secured.passwords["docsum"] not in logs

    # The outside consumer of results reads the task's result with its own principal and group.
    consumer = AIOKafkaConsumer(
        secured.prefix + Topic.TASK_FINISHED,
        **kafka_options(secured.env("results")),
        group_id=secured.prefix + "results",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    finished: dict[bytes, dict] = {}
    try:
        async with asyncio.timeout(90):
            async for record in consumer:
                if record.key in (task_id.encode(), foreign.encode()):
                    finished[record.key] = json.loads(record.value)
                if len(finished) == 2:
                    break
    finally:
        await consumer.stop()
    assert finished[task_id.encode()]["documents"][0]["summary"] == task["documents"][0]["summary"]
    assert finished[foreign.encode()]["status"] == "COMPLETED", finished[foreign.encode()]


async def test_only_the_pipeline_writes_document_submitted_and_a_producer_only_its_own_topic(
    secured: SecuredBroker,
) -> None:
    services = kafka_settings(secured.env("docsum")).model_copy(update={"intake_producers": json.loads(PRODUCERS)})
    await ensure_topics(services, wait_s=30)  # the services' principal creates them, crm's intake topic too
    internal, own = secured.prefix + Topic.DOCUMENT_SUBMITTED, secured.prefix + intake_topic("crm")
    for user in ("ingest", "results"):
        producer = AIOKafkaProducer(**kafka_options(secured.env(user)), acks="all", request_timeout_ms=10_000)
        await producer.start()
        try:
            # document-submitted is the pipeline's own: no other principal writes it
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(internal, b"{}", key=b"acl-check")
            if user == "ingest":  # crm's principal may publish on crm's topic (not an event: dead-lettered)
                await producer.send_and_wait(own, b"{}", key=b"acl-check")
            else:  # may read task-finished, and write nothing
                with pytest.raises(TopicAuthorizationFailedError):
                    await producer.send_and_wait(own, b"{}", key=b"acl-check")
        finally:
            await producer.stop()


async def test_a_wrong_password_does_not_authenticate(secured: SecuredBroker, caplog: pytest.LogCaptureFixture) -> None:
    wrong = secured.env("docsum", password="wrong-" + secured.passwords["docsum"])
    producer = AIOKafkaProducer(**kafka_options(wrong), request_timeout_ms=10_000)
    try:
        with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
            await producer.start()
    finally:
        await producer.stop()
    assert "SaslAuthenticationFailed" in caplog.text
