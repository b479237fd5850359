"""Webhooks against the real gateway, pipeline, Kafka and PostgreSQL, delivered to a real HTTP server: each
delivery is signed (verified with the `standardwebhooks` package), tried again after failures and after the
sending gateway is killed (-9), with the same webhook-id, and none is lost; endpoints and their deliveries
are their owner's; a URL the intake's rules refuse is refused."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from standardwebhooks import Webhook

from tests.inprocess import InProcessStack
from tests.integration.conftest import SERVICES, StackFactory
from tests.integration.helpers import eventually, new_marker, submit, txt, wait_for_task
from tests.webhook_receiver import Receiver, serving

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving() as state:
        yield state


def _webhook_env(receiver: Receiver) -> dict[str, str]:
    """alice may send to the receiver (127.0.0.1 listed for her); bob has the global lists: any host by a
    wildcard, so a private address only where it is listed."""
    return {
        "DOCSUM_INTAKE_OWNERS": json.dumps({"alice": {"http_hosts": ["127.0.0.1"], "http_ports": [receiver.port]}}),
        "DOCSUM_INTAKE_HTTP_HOSTS": json.dumps(["*"]),
        "DOCSUM_INTAKE_HTTP_PORTS": json.dumps([receiver.port]),
        "DOCSUM_WEBHOOK_POLL_S": "0.2",
        "DOCSUM_WEBHOOK_BACKOFF_FIRST_S": "0.3",
        "DOCSUM_WEBHOOK_BACKOFF_MAX_S": "2",
        "DOCSUM_WEBHOOK_TIMEOUT_S": "1",
    }


async def test_endpoints_are_their_owners_and_a_private_address_is_refused(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = make_stack.in_process(("gateway",), twice=False, **_webhook_env(receiver))
    url = f"http://127.0.0.1:{receiver.port}/hook"
    async with stack.client("alice") as alice, stack.client("bob") as bob:
        made = await alice.post("/v1/webhooks", json={"url": url, "events": ["task.finished", "task.failed"]})
        assert made.status_code == 201, made.text
        endpoint = made.json()
        secret = endpoint["secret"]
        assert secret.startswith("whsec_") and len(base64.b64decode(secret.removeprefix("whsec_"))) == 24
        listed = (await alice.get("/v1/webhooks")).json()
        assert [e["id"] for e in listed] == [endpoint["id"]] and "secret" not in listed[0]

        # bob sees none of it, and may change none of it: as if it did not exist.
        assert (await bob.get("/v1/webhooks")).json() == []
        hook = f"/v1/webhooks/{endpoint['id']}"
        for method, path in [
            ("GET", f"{hook}/deliveries"),
            ("DELETE", hook),
            ("POST", f"{hook}/rotate"),
            ("POST", f"{hook}/deliveries/msg_x/resend"),
        ]:
            answer = await bob.request(method, path)
            assert answer.status_code == 404, (method, path, answer.text)

        # bob's hosts are any host by a wildcard: a loopback address is reached only if listed.
        refused = await bob.post("/v1/webhooks", json={"url": url, "events": ["task.finished"]})
        assert refused.status_code == 422, refused.text
        message = refused.json()["detail"][0]["msg"]
        assert "resolves to 127.0.0.1, a loopback address" in message and "DOCSUM_INTAKE_HTTP_HOSTS" in message
        other_port = await alice.post(
            "/v1/webhooks", json={"url": f"http://127.0.0.1:{receiver.port + 1}/", "events": ["task.failed"]}
        )
        assert other_port.status_code == 422 and "port" in other_port.json()["detail"][0]["msg"], other_port.text

        rotated = await alice.post(f"{hook}/rotate")
        assert rotated.status_code == 200 and rotated.json()["secret"] not in (secret, None)
        assert (await alice.get(f"{hook}/deliveries")).json() == []
        assert (await alice.delete(hook)).status_code == 200
        assert (await alice.get("/v1/webhooks")).json() == []
        assert (await alice.get(f"{hook}/deliveries")).status_code == 404


async def test_deliveries_survive_failures_and_a_killed_gateway(
    make_stack: StackFactory, receiver: Receiver, db: asyncpg.Pool
) -> None:
    """Three tasks end; the receiver fails the first three tries and holds the first one while the gateway
    that sent it is killed (-9). Every task's delivery arrives, verified, under one webhook-id each."""
    receiver.hold = 1
    stack = make_stack(SERVICES, **_webhook_env(receiver))
    url = f"http://127.0.0.1:{receiver.port}/hook"
    async with stack.client("alice") as alice:
        made = await alice.post("/v1/webhooks", json={"url": url, "events": ["task.finished"]})
        assert made.status_code == 201, made.text
        endpoint_id, secret = made.json()["id"], made.json()["secret"]
        marker = new_marker()
        tasks = [
            await submit(alice, [txt(f"{marker}-{i}.txt", f"{marker} The ferry left at {i} and came back.")])
            for i in range(3)
        ]
        for task_id in tasks:
            await wait_for_task(alice, task_id, stack)

        await eventually(lambda: receiver.held.is_set(), timeout=60, message="the first delivery", stack=stack)
        stack.kill("gateway")  # mid-request: the attempt is claimed, its outcome never recorded
        receiver.release.set()
        stack.start("gateway")
        stack.wait_ready()

        await eventually(lambda: len(receiver.delivered()) == 3, timeout=90, message="3 deliveries", stack=stack)

    rows = await db.fetch(
        "SELECT id, task_id, delivered_at, attempts FROM webhook_deliveries WHERE endpoint_id = $1", endpoint_id
    )
    assert sorted(r["task_id"] for r in rows) == sorted(tasks)
    ids = {r["id"] for r in rows}
    delivered = receiver.delivered()
    assert set(delivered) == ids  # one webhook-id per task, every one delivered
    assert {r.headers["webhook-id"] for r in receiver.received} == ids  # no attempt under another id
    first = receiver.received[0].headers["webhook-id"]
    assert sum(r.headers["webhook-id"] == first for r in receiver.received) >= 2  # the killed attempt, sent again
    verifier = Webhook(secret)
    for request in receiver.received:
        body = verifier.verify(request.body, request.headers)
        assert body["type"] == "task.finished" and body["data"]["task_id"] in tasks
        assert body["data"]["status"] == "COMPLETED"
        assert body["data"]["event_id"]  # what task-finished carries: its envelope with the result
    by_task = {json.loads(d.body)["data"]["task_id"]: webhook_id for webhook_id, d in delivered.items()}
    assert by_task == {r["task_id"]: r["id"] for r in rows}
    await eventually(
        lambda: _all_delivered(db, endpoint_id), timeout=30, message="every delivery recorded", stack=stack
    )


async def _all_delivered(db: asyncpg.Pool, endpoint_id: str) -> bool:
    undelivered = await db.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND delivered_at IS NULL", endpoint_id
    )
    return int(undelivered) == 0


async def test_a_task_names_an_endpoint_of_its_owner_for_itself(
    make_stack: StackFactory, receiver: Receiver, db: asyncpg.Pool
) -> None:
    """An endpoint for the tasks that name it is told of those only; another owner's cannot be named."""
    receiver.fail_first = 0
    stack = make_stack.in_process(None, twice=False, **_webhook_env(receiver))
    url = f"http://127.0.0.1:{receiver.port}/hook"
    marker = new_marker()
    async with stack.client("alice") as alice, stack.client("bob") as bob:
        made = await alice.post("/v1/webhooks", json={"url": url, "events": ["task.finished"], "all_tasks": False})
        assert made.status_code == 201, made.text
        endpoint_id = made.json()["id"]
        named = await submit(alice, [txt(f"{marker}-a.txt", f"{marker} The lock opened at noon.")], webhook=endpoint_id)
        unnamed = await submit(alice, [txt(f"{marker}-b.txt", f"{marker} The lock closed at six.")])
        refused = await bob.post(
            "/v1/tasks", files=[txt(f"{marker}-c.txt", f"{marker} Not bob's.")], data={"webhook": endpoint_id}
        )
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "webhook"], refused.text
        for task_id in (named, unnamed):
            await wait_for_task(alice, task_id, stack)
        await eventually(lambda: len(receiver.delivered()) == 1, timeout=60, message="the delivery", stack=stack)

    # The deliveries are written with the task's end: the unnamed task, ended, has none.
    rows = await db.fetch("SELECT task_id FROM webhook_deliveries WHERE endpoint_id = $1", endpoint_id)
    assert [r["task_id"] for r in rows] == [named]
    (delivered,) = receiver.delivered().values()
    assert json.loads(delivered.body)["data"]["task_id"] == named


async def test_a_cancelled_and_an_expired_task_are_told_as_the_other_ends(
    make_stack: StackFactory, receiver: Receiver, db: asyncpg.Pool
) -> None:
    """Every final status is told: a task its owner cancels (`task.cancelled`) and one idle beyond the TTL,
    given up by the maintenance (`task.expired`), each reach the endpoint once, signed, with the task's
    result, as a finished one does. No parser runs in this deployment, so neither task moves on its own."""
    receiver.fail_first = 0
    stack = make_stack.in_process(
        ("gateway", "merger"),
        twice=False,
        **_webhook_env(receiver),
        DOCSUM_TASK_TTL_S="4",
        DOCSUM_MAINTENANCE_INTERVAL_S="1",
    )
    url = f"http://127.0.0.1:{receiver.port}/hook"
    marker = new_marker()
    async with stack.client("alice") as alice:
        made = await alice.post("/v1/webhooks", json={"url": url, "events": ["task.cancelled", "task.expired"]})
        assert made.status_code == 201, made.text
        endpoint_id, secret = made.json()["id"], made.json()["secret"]
        cancelled = await submit(alice, [txt(f"{marker}-a.txt", f"{marker} The bridge was closed.")])
        expired = await submit(alice, [txt(f"{marker}-b.txt", f"{marker} The bridge was opened.")])
        answer = await alice.post(f"/v1/tasks/{cancelled}/cancel")
        assert answer.status_code == 200 and answer.json()["status"] == "CANCELLED", answer.text
        await eventually(lambda: len(receiver.delivered()) == 2, timeout=90, message="2 deliveries", stack=stack)
        assert (await alice.post(f"/v1/tasks/{cancelled}/cancel")).status_code == 409  # told once, not again

    bodies = {}
    for request in receiver.received:
        body = Webhook(secret).verify(request.body, request.headers)
        bodies[body["data"]["task_id"]] = body
    assert {t: (b["type"], b["data"]["status"]) for t, b in bodies.items()} == {
        cancelled: ("task.cancelled", "CANCELLED"),
        expired: ("task.expired", "EXPIRED"),
    }
    assert all(b["data"]["event_id"] and b["data"]["documents"] for b in bodies.values())
    rows = await db.fetch("SELECT task_id, event_type FROM webhook_deliveries WHERE endpoint_id = $1", endpoint_id)
    assert sorted((r["task_id"], r["event_type"]) for r in rows) == sorted(
        [(cancelled, "task.cancelled"), (expired, "task.expired")]
    )


def _docsum(stack: InProcessStack, owner: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `docsum` command, as the owner (its key in DOCSUM_API_KEY), against the stack's gateway."""
    clean = {k: v for k, v in os.environ.items() if k not in ("DOCSUM_API_KEY", "DOCSUM_ADMIN_KEY")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("docsum")), "--url", stack.gateway_url, "webhooks", *args],
        env={**clean, "DOCSUM_API_KEY": stack.keys[owner], "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_cli_manages_an_owners_webhooks(make_stack: StackFactory, receiver: Receiver) -> None:
    """`docsum webhooks add|list|remove` on the real gateway: the secret `add` prints once verifies the
    deliveries; another owner cannot remove the endpoint; the gateway's refusal of a URL is told."""
    receiver.fail_first = 0
    stack = make_stack.in_process(None, twice=False, **_webhook_env(receiver))
    url = f"http://127.0.0.1:{receiver.port}/hook"
    added = _docsum(stack, "alice", "add", url, "--events", "task.finished", "--json")
    assert added.returncode == 0, added.stderr
    kept = json.loads(added.stdout)
    plain = _docsum(stack, "alice", "add", f"{url}/2")  # the secret alone on stdout, what it is on stderr
    assert plain.returncode == 0 and plain.stdout.strip().startswith("whsec_") and "once" in plain.stderr
    listed = _docsum(stack, "alice", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    endpoints = {e["id"]: e for e in json.loads(listed.stdout)}
    assert kept["id"] in endpoints and len(endpoints) == 2 and "whsec_" not in listed.stdout
    (other,) = set(endpoints) - {kept["id"]}
    assert endpoints[other]["events"] == sorted(["task.finished", "task.failed", "task.cancelled", "task.expired"])
    table = _docsum(stack, "alice", "list")
    assert table.returncode == 0 and kept["id"] in table.stdout and f"{url}/2" in table.stdout

    theirs = _docsum(stack, "bob", "remove", other)
    assert theirs.returncode == 2 and "404" in theirs.stderr
    refused = _docsum(stack, "bob", "add", url)
    assert refused.returncode == 2 and "DOCSUM_INTAKE_HTTP_HOSTS" in refused.stderr, refused.stderr
    assert json.loads(_docsum(stack, "bob", "list", "--json").stdout) == []
    removed = _docsum(stack, "alice", "remove", other)
    assert removed.returncode == 0 and f"removed {other}" in removed.stdout, removed.stderr
    assert [e["id"] for e in json.loads(_docsum(stack, "alice", "list", "--json").stdout)] == [kept["id"]]

    marker = new_marker()
    async with stack.client("alice") as alice:
        task_id = await submit(alice, [txt(f"{marker}.txt", f"{marker} The gate opened at nine.")])
        await wait_for_task(alice, task_id, stack)
    await eventually(lambda: len(receiver.delivered()) == 1, timeout=60, message="the delivery", stack=stack)
    (delivered,) = receiver.delivered().values()
    body = Webhook(kept["secret"]).verify(delivered.body, delivered.headers)  # the secret `add` showed
    assert body["type"] == "task.finished" and body["data"]["task_id"] == task_id
    assert all(r.headers.get("webhook-id") == delivered.headers["webhook-id"] for r in receiver.received)
