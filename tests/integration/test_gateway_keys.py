"""Owners, keys and the task rate limit against two real gateway replicas on one database.

- ownership: owner B on every route of owner A's task (enumerated from the app's route table, so a
  new route cannot be forgotten) gets exactly what a random unknown id gets: 404, the same body;
- stored keys: created by the operator (shown once, only a hash kept), refused on every replica from
  the request after their revocation, on REST, on the WebSocket and through a ticket issued before;
- the rate limit of task creation is per owner and shared by the replicas: 429 with Retry-After;
- the CLI: `docsum keys create|list|revoke`, `docsum tasks`, `docsum show`, with and without --json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from pydantic import SecretStr
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from docsum_gateway.app import create_app
from docsum_gateway.settings import GatewaySettings
from tests.fake_llm import free_port
from tests.integration.conftest import Stack, StackFactory
from tests.integration.helpers import eventually_blocking

pytestmark = pytest.mark.integration

ADMIN = "operator-" + uuid.uuid4().hex
PER_MINUTE = 3


@pytest.fixture(scope="module")
def gateways(make_stack: StackFactory) -> Iterator[tuple[Stack, str]]:
    """A gateway and a second replica of it (nothing consumes what they publish); (stack, replica URL)."""
    stack = make_stack(services=("gateway",), DOCSUM_ADMIN_KEY=ADMIN, DOCSUM_TASKS_PER_MINUTE=str(PER_MINUTE))
    port = free_port()
    stack.start("gateway-2", DOCSUM_GATEWAY_PORT=str(port))
    second = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{second}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    eventually_blocking(healthy, timeout=90, interval=0.3, message="the second gateway to start", stack=stack)
    yield stack, second
    stack.stop_all()


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _new_task(url: str, key: str) -> httpx.Response:
    with _client(url, key) as client:
        return client.post("/v1/tasks", files=[("files", ("a.txt", b"some text to summarize", "text/plain"))])


def _create_key(url: str, owner: str) -> dict[str, Any]:
    with _client(url, ADMIN) as admin:
        made = admin.post("/v1/keys", json={"owner": owner, "name": "test"})
    assert made.status_code == 201, made.text
    return made.json()


@pytest.fixture(scope="module")
def alice_task(gateways: tuple[Stack, str]) -> str:
    stack, _ = gateways
    created = _new_task(stack.gateway_url, stack.keys["alice"])
    assert created.status_code == 201, created.text
    return created.json()["task_id"]


# --- ownership: another owner's task is a task that does not exist --------------------------------------

# Every route that names a task, and how to call it. A route the app has and this table lacks fails
# the test: decide how another owner must see it, then add it here.
REST = "rest"
WEBSOCKET = "websocket"
PAGE = "page"  # the same static page for any id: its data comes from the routes above, with the key
MATRIX: dict[tuple[str, str], str] = {
    ("GET", "/tasks/{task_id}"): PAGE,
    ("GET", "/v1/tasks/{task_id}/events"): REST,  # the SSE stream (404 before the Accept check)
    ("GET", "/v1/tasks/{task_id}"): REST,
    ("GET", "/v1/tasks/{task_id}/failures"): REST,
    ("GET", "/v1/tasks/{task_id}/documents/{document_id}/text"): REST,  # asked for a range of one of its documents
    ("POST", "/v1/tasks/{task_id}/pause"): REST,
    ("POST", "/v1/tasks/{task_id}/resume"): REST,
    ("POST", "/v1/tasks/{task_id}/cancel"): REST,
    ("POST", "/v1/tasks/{task_id}/retry"): REST,
    ("POST", "/v1/tasks/{task_id}/ticket"): REST,
    ("WS", "/v1/tasks/{task_id}/events"): WEBSOCKET,
}


def _flat_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(full path, route) of every route, inside included routers too (FastAPI keeps an included
    router as one entry that holds the router and the prefix it was included with)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            yield from _flat_routes(included.routes, prefix + (getattr(context, "prefix", "") or ""))
        else:
            yield prefix + getattr(route, "path", ""), route


def _task_routes() -> set[tuple[str, str]]:
    """(method, path) of every route of the application that names a task."""
    app = create_app(GatewaySettings(api_keys="x=" + "k" * 24, admin_key=SecretStr("a" * 24)))
    found: set[tuple[str, str]] = set()
    every = list(_flat_routes(app.routes))
    assert ("/v1/tasks", "POST") in {(p, m) for p, r in every for m in getattr(r, "methods", None) or ()}
    for path, route in every:
        if "{task_id}" not in path:
            continue
        if isinstance(route, APIWebSocketRoute):
            found.add(("WS", path))
        elif isinstance(route, APIRoute):
            found |= {(method, path) for method in route.methods or () if method != "HEAD"}
        else:
            found.add((type(route).__name__, path))  # a kind of route this test does not know yet
    return found


def test_the_matrix_covers_every_route_that_names_a_task() -> None:
    routes = _task_routes()
    assert routes - MATRIX.keys() == set(), "routes missing from MATRIX"
    assert MATRIX.keys() - routes == set(), "MATRIX names routes the app no longer has"


def _rest_answer(client: httpx.Client, method: str, path: str, task_id: str, document_id: str) -> tuple[int, str, str]:
    query = "?start=0&end=5" if "{document_id}" in path else ""
    answer = client.request(method, path.format(task_id=task_id, document_id=document_id) + query)
    return answer.status_code, answer.headers.get("content-type", ""), answer.text.replace(task_id, "<id>")


async def _ws_answer(url: str, path: str, task_id: str, **how: Any) -> tuple[str, int | str]:
    ws_url = url.replace("http://", "ws://") + path.format(task_id=task_id) + how.pop("query", "")
    try:
        async with connect(ws_url, open_timeout=10, **how) as ws:
            return "accepted", await ws.recv(decode=True)
    except InvalidStatus as refused:
        return "refused", refused.response.status_code


async def test_another_owner_learns_nothing_about_a_task_on_any_route(
    gateways: tuple[Stack, str], alice_task: str
) -> None:
    stack, _ = gateways
    bob = stack.keys["bob"]
    unknown = str(uuid.uuid4())
    with _client(stack.gateway_url, stack.keys["alice"]) as client:
        document = client.get(f"/v1/tasks/{alice_task}").json()["documents"][0]["document_id"]
    with _client(stack.gateway_url, bob) as client:
        for (method, path), kind in sorted(MATRIX.items()):
            if kind in (REST, PAGE):
                theirs = _rest_answer(client, method, path, alice_task, document)
                nobodys = _rest_answer(client, method, path, unknown, document)
                assert theirs[0] == (404 if kind == REST else 200), (method, path, theirs)
                assert theirs == nobodys, (method, path)
            else:
                for how in (
                    {"additional_headers": {"Authorization": f"Bearer {bob}"}},
                    {"query": f"?token={bob}"},
                    {"subprotocols": ["docsum", f"bearer.{bob}"]},
                ):
                    theirs_ws = await _ws_answer(stack.gateway_url, path, alice_task, **dict(how))
                    assert theirs_ws[0] == "refused", (path, how, theirs_ws)
                    assert theirs_ws == await _ws_answer(stack.gateway_url, path, unknown, **dict(how)), (path, how)
        assert alice_task not in client.get("/v1/tasks").text
    # The task is untouched (bob's pause and cancel did nothing) and alice sees all of it.
    with _client(stack.gateway_url, stack.keys["alice"]) as client:
        mine = client.get(f"/v1/tasks/{alice_task}")
        assert mine.status_code == 200 and mine.json()["status"] == "PROCESSING", mine.text
        assert client.get(f"/v1/tasks/{alice_task}/failures").status_code == 200
        assert alice_task in client.get("/v1/tasks").text
        ticket = client.post(f"/v1/tasks/{alice_task}/ticket").json()["ticket"]
    first = await _ws_answer(stack.gateway_url, "/v1/tasks/{task_id}/events", alice_task, query=f"?ticket={ticket}")
    assert first[0] == "accepted" and isinstance(first[1], str) and json.loads(first[1])["task_id"] == alice_task


# --- stored keys: shown once, hashed, revoked at once everywhere ----------------------------------------


async def test_a_revoked_key_is_refused_at_once_on_every_replica(gateways: tuple[Stack, str], db: asyncpg.Pool) -> None:
    stack, second = gateways
    made = _create_key(stack.gateway_url, "dave")
    key, key_id = made["key"], made["key_id"]
    assert key.startswith(f"dsk_{key_id}_") and made["owner"] == "dave" and made["revoked_at"] is None
    # Only a hash is stored, and the key is never shown again.
    stored = await db.fetchrow("SELECT * FROM api_keys WHERE id = $1", key_id)
    secret = key.split("_", 2)[2]  # dsk_<id>_<secret>: the secret itself may hold "_"
    assert stored is not None and not any(secret in str(v) for v in stored.values())
    with _client(second, ADMIN) as admin:
        listed = admin.get("/v1/keys", params={"owner": "dave"}).json()
    assert [k["key_id"] for k in listed] == [key_id] and "key" not in listed[0]

    created = _new_task(second, key)
    assert created.status_code == 201, created.text
    task_id = created.json()["task_id"]
    with _client(stack.gateway_url, key) as dave:
        assert dave.get(f"/v1/tasks/{task_id}").status_code == 200
        ticket = dave.post(f"/v1/tasks/{task_id}/ticket").json()["ticket"]
    with _client(stack.gateway_url, ADMIN) as admin:
        revoked = admin.delete(f"/v1/keys/{key_id}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None, revoked.text
        assert admin.get("/v1/keys", params={"owner": "dave"}).json() == []
        assert [
            k["key_id"] for k in admin.get("/v1/keys", params={"owner": "dave", "include_revoked": "true"}).json()
        ] == [key_id]
        assert admin.delete(f"/v1/keys/{key_id}").json()["revoked_at"] == revoked.json()["revoked_at"]
        assert admin.delete("/v1/keys/0123456789ab").status_code == 404

    for url in (stack.gateway_url, second):  # the very next request, on either replica
        with _client(url, key) as dave:
            refused = dave.get(f"/v1/tasks/{task_id}")
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", refused.text
            assert dave.get("/v1/tasks").status_code == 401
        assert _new_task(url, key).status_code == 401
        events = "/v1/tasks/{task_id}/events"
        assert await _ws_answer(url, events, task_id, additional_headers={"Authorization": f"Bearer {key}"}) == (
            "refused",
            403,
        )
    # A ticket issued before the revocation dies with the key.
    assert (await _ws_answer(stack.gateway_url, "/v1/tasks/{task_id}/events", task_id, query=f"?ticket={ticket}"))[
        0
    ] == "refused"


def test_an_owners_key_cannot_manage_keys(gateways: tuple[Stack, str]) -> None:
    stack, _ = gateways
    stored = _create_key(stack.gateway_url, "frank")["key"]
    for key in (stack.keys["alice"], stored):
        with _client(stack.gateway_url, key) as client:
            assert client.get("/v1/keys").status_code == 401
            assert client.post("/v1/keys", json={"owner": "alice"}).status_code == 401


# --- the rate limit of task creation -------------------------------------------------------------------


def test_task_creation_is_limited_per_owner_across_replicas(gateways: tuple[Stack, str]) -> None:
    stack, second = gateways
    carol = _create_key(stack.gateway_url, "carol")["key"]
    urls = [stack.gateway_url, second, stack.gateway_url]
    assert [_new_task(url, carol).status_code for url in urls] == [201] * PER_MINUTE
    refused = _new_task(second, carol)  # the other replica counts what the first one booked
    assert refused.status_code == 429, refused.text
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 60 // PER_MINUTE and "try again" in refused.json()["detail"]
    # Other owners are not slowed down by carol.
    assert _new_task(second, stack.keys["bob"]).status_code == 201


# --- the CLI --------------------------------------------------------------------------------------------


def _docsum(stack: Stack, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("DOCSUM_API_KEY", "DOCSUM_ADMIN_KEY")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("docsum")), "--url", stack.gateway_url, *args],
        env={**clean, **env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,  # no .run/ here: only the keys given count
    )


def test_the_cli_manages_keys_and_shows_an_owners_tasks(
    gateways: tuple[Stack, str], alice_task: str, tmp_path: Path
) -> None:
    stack, _ = gateways
    docsum: Callable[..., subprocess.CompletedProcess[str]] = lambda *a, **e: _docsum(stack, tmp_path, *a, **e)  # noqa: E731

    made = docsum("keys", "create", "erin", "--name", "ci", "--json", DOCSUM_ADMIN_KEY=ADMIN)
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    key, key_id = created["key"], created["key_id"]
    plain = docsum("keys", "create", "erin", DOCSUM_ADMIN_KEY=ADMIN)
    assert plain.returncode == 0 and plain.stdout.strip().startswith("dsk_") and "once" in plain.stderr
    listed = docsum("keys", "list", "--owner", "erin", "--json", DOCSUM_ADMIN_KEY=ADMIN)
    assert listed.returncode == 0 and key_id in [k["key_id"] for k in json.loads(listed.stdout)]
    assert key not in listed.stdout
    table = docsum("keys", "list", DOCSUM_ADMIN_KEY=ADMIN)
    assert table.returncode == 0 and key_id in table.stdout and "erin" in table.stdout
    no_admin = docsum("keys", "list", DOCSUM_ADMIN_KEY=stack.keys["alice"])
    assert no_admin.returncode == 2 and "401" in no_admin.stderr

    assert json.loads(docsum("tasks", "--json", DOCSUM_API_KEY=key).stdout) == []
    mine = docsum("tasks", "--json", DOCSUM_API_KEY=stack.keys["alice"])
    assert alice_task in [t["task_id"] for t in json.loads(mine.stdout)]
    assert alice_task in docsum("tasks", DOCSUM_API_KEY=stack.keys["alice"]).stdout
    shown = docsum("show", alice_task, "--json", DOCSUM_API_KEY=stack.keys["alice"])
    assert shown.returncode == 0 and json.loads(shown.stdout)["documents"][0]["filename"] == "a.txt"
    human = docsum("show", alice_task, DOCSUM_API_KEY=stack.keys["alice"])
    assert human.returncode == 0 and "a.txt" in human.stdout and "PROCESSING" in human.stdout
    theirs = docsum("show", alice_task, DOCSUM_API_KEY=key)
    assert theirs.returncode == 2 and "404" in theirs.stderr

    revoked = docsum("keys", "revoke", key, "--json", DOCSUM_ADMIN_KEY=ADMIN)  # the whole key works too
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked_at"], revoked.stderr
    after = docsum("tasks", DOCSUM_API_KEY=key)
    assert after.returncode == 2 and "401" in after.stderr
