"""The gateway's front door against a real gateway and database: each attack of the audit, and the answer
it gets now. The gateway runs in-process, served as `__main__` serves it (what is tested is its answers,
not a process), except for its log: what reaches it is what the process's `__main__` configures, so that
test runs a gateway process; `scripts/stack.sh up` starts processes of its own.

- an upload over the limit is cut off at the limit: the 413 comes while the client is still sending;
- an API key in a WebSocket URL (right or wrong) never reaches the gateway's log;
- a NUL in any text input is a 422, an id the gateway cannot have made a 404;
- `Bearer` in any case, on REST and on the WebSocket; tickets for browsers;
- a bad setting stops `scripts/stack.sh up` with the service and the setting named, logs are 0600.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import select
import socket
import stat
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from tests.fake_llm import free_port
from tests.integration.conftest import ROOT, AnyStack, Stack, StackFactory
from tests.integration.helpers import eventually

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
FILE_LIMIT = 1 * MiB
TASK_LIMIT = 3 * MiB


@pytest.fixture(scope="module")
def gateway(make_stack: StackFactory) -> AnyStack:
    """A gateway alone (nothing consumes what it publishes), with small upload limits."""
    return make_stack.in_process(
        services=("gateway",), DOCSUM_MAX_FILE_BYTES=str(FILE_LIMIT), DOCSUM_MAX_TASK_BYTES=str(TASK_LIMIT)
    )


@pytest.fixture(scope="module")
def gateway_process(make_stack: StackFactory) -> Stack:
    """A gateway process alone, logging as its `__main__` configures it."""
    return make_stack(services=("gateway",))


def _auth(stack: AnyStack, owner: str = "alice", scheme: str = "Bearer") -> dict[str, str]:
    return {"Authorization": f"{scheme} {stack.keys[owner]}"}


async def _new_task(stack: AnyStack, owner: str = "alice") -> str:
    async with httpx.AsyncClient(base_url=stack.gateway_url, headers=_auth(stack, owner), timeout=30) as client:
        response = await client.post("/v1/tasks", files=[("files", ("a.txt", b"some text", "text/plain"))])
    assert response.status_code == 201, response.text
    return response.json()["task_id"]


def _ws_url(stack: AnyStack, task_id: str, query: str = "") -> str:
    return stack.gateway_url.replace("http://", "ws://") + f"/v1/tasks/{task_id}/events" + query


async def _first_message(
    url: str, additional_headers: dict[str, str] | None = None, subprotocols: Sequence[Subprotocol] | None = None
) -> dict:
    connecting = connect(url, open_timeout=10, additional_headers=additional_headers, subprotocols=subprotocols)
    async with connecting as ws:
        return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def _refused(
    url: str, additional_headers: dict[str, str] | None = None, subprotocols: Sequence[Subprotocol] | None = None
) -> int:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, open_timeout=10, additional_headers=additional_headers, subprotocols=subprotocols):
            pass
    return refused.value.response.status_code


# --- an upload over the limit is cut off at the limit ---------------------------------------------------


def _send_until_answered(url: str, head: bytes, body: Iterator[bytes]) -> tuple[int, int, bytes]:
    """Send `head`, then `body` block by block, until the server answers; (status, body bytes sent
    before the answer was seen, answer). The client watches for the answer between blocks, as a
    client that reads while it writes does; its send buffer is kept small so 'sent' means sent."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    try:
        sock.sendall(head)
        sent = 0
        answered = False
        for block in body:
            view = memoryview(block)
            while view and not answered:
                readable, writable, _ = select.select([sock], [sock], [], 30)
                if readable:
                    answered = True
                elif writable:
                    n = sock.send(view)
                    sent += n
                    view = view[n:]
            if answered or select.select([sock], [], [], 0.002)[0]:
                break
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return int(answer.split(b" ", 2)[1]), sent, answer
    finally:
        sock.close()


def _upload_head(stack: AnyStack, content_length: int | None = None, boundary: str = "cutoff") -> bytes:
    """The request's head; without a length the body comes chunked (then only what arrives counts)."""
    framing = f"Content-Length: {content_length}" if content_length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST /v1/tasks HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {stack.keys['alice']}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n{framing}\r\n\r\n"
    ).encode()


def _chunked(blocks: Iterator[bytes]) -> Iterator[bytes]:
    for block in blocks:
        yield f"{len(block):x}\r\n".encode() + block + b"\r\n"


def _big_file(size: int, name: str = "big.bin", boundary: str = "cutoff") -> Iterator[bytes]:
    yield f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n\r\n'.encode()
    block = os.urandom(64 * 1024)
    for _ in range(size // len(block)):
        yield block


def test_a_file_over_the_limit_is_cut_off_while_it_streams(gateway: AnyStack) -> None:
    size = 24 * MiB  # 24 times the file limit, sent chunked: nothing says how long it is
    status, sent, answer = _send_until_answered(gateway.gateway_url, _upload_head(gateway), _chunked(_big_file(size)))
    assert status == 413, answer
    assert b"file 'big.bin' is over the limit of 1048576 bytes" in answer
    print(f"\n413 after the client sent {sent / MiB:.2f} MiB of a {size / MiB:.0f} MiB body (limit 1 MiB)")
    # The limit, plus what the two sockets' buffers hold: never the body.
    assert sent < FILE_LIMIT + 6 * MiB, sent


def test_the_files_of_a_task_over_its_limit_are_cut_off(gateway: AnyStack) -> None:
    def files() -> Iterator[bytes]:
        for i in range(20):
            yield from _big_file(FILE_LIMIT - 64 * 1024, name=f"f{i}.bin")
            yield b"\r\n"

    status, sent, answer = _send_until_answered(gateway.gateway_url, _upload_head(gateway), _chunked(files()))
    assert status == 413, answer
    assert b"the files of the task are over the limit of 3145728 bytes" in answer
    assert sent < TASK_LIMIT + 6 * MiB, sent


def test_a_declared_body_over_the_cap_is_answered_before_it_is_sent(gateway: AnyStack) -> None:
    status, sent, answer = _send_until_answered(gateway.gateway_url, _upload_head(gateway, 50 * 1024 * MiB), iter(()))
    assert (status, sent) == (413, 0), answer
    assert b"request body over the limit" in answer


async def test_uploads_are_stored_whole_and_once(gateway: AnyStack, db: asyncpg.Pool) -> None:
    """Spooled on disk or in memory, copied in blocks: the stored bytes and hash are the file's, and the
    same new file uploaded by two tasks at once is stored once."""
    big, small = os.urandom(FILE_LIMIT - 1), os.urandom(100)
    async with httpx.AsyncClient(base_url=gateway.gateway_url, headers=_auth(gateway), timeout=60) as client:
        answers = await asyncio.gather(
            *(
                client.post("/v1/tasks", files=[("files", ("big.bin", big)), ("files", ("small.bin", small))])
                for _ in "ab"
            )
        )
    assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
    for content in (big, small):
        sha = hashlib.sha256(content).hexdigest()
        row = await db.fetchrow("SELECT data, size_bytes FROM blobs WHERE sha256 = $1", sha)
        assert row["data"] == content and row["size_bytes"] == len(content)
        documents = await db.fetch("SELECT task_id, size_bytes FROM documents WHERE blob_sha256 = $1", sha)
        assert {d["task_id"] for d in documents} == {a.json()["task_id"] for a in answers}


# --- a key in a WebSocket URL never reaches the log -----------------------------------------------------


async def test_a_key_in_a_websocket_url_never_reaches_the_log(gateway_process: Stack) -> None:
    gateway = gateway_process
    key, wrong = gateway.keys["alice"], "wrong-" + uuid.uuid4().hex
    task_id = await _new_task(gateway)
    first = await _first_message(_ws_url(gateway, task_id, f"?token={key}"))
    assert first["task_id"] == task_id
    assert await _refused(_ws_url(gateway, task_id, f"?token={wrong}")) == 403
    assert await _refused(_ws_url(gateway, task_id, f"?api_key={key}&token={wrong}")) == 403
    async with httpx.AsyncClient(base_url=gateway.gateway_url, timeout=30) as client:
        ticket = (await client.post(f"/v1/tasks/{task_id}/ticket", headers=_auth(gateway))).json()["ticket"]
        assert (await client.get(f"/v1/tasks?token={key}&key={wrong}", headers=_auth(gateway))).status_code == 200
        assert (await client.get(f"/v1/tasks?token={wrong}")).status_code == 401
    assert (await _first_message(_ws_url(gateway, task_id, f"?ticket={ticket}")))["task_id"] == task_id

    log = gateway.log_of("gateway")
    await eventually(lambda: log.read_text().count("[redacted]") >= 6, timeout=10, message="the requests' log lines")
    text = log.read_text()
    assert key not in text and wrong not in text and ticket not in text
    assert f"/v1/tasks/{task_id}/events?token=[redacted]" in text


# --- Bearer in any case; tickets and the subprotocol for browsers ---------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
async def test_bearer_in_any_case_on_the_websocket_and_rest(gateway: AnyStack, scheme: str) -> None:
    task_id = await _new_task(gateway)
    first = await _first_message(_ws_url(gateway, task_id), additional_headers=_auth(gateway, scheme=scheme))
    assert first["task_id"] == task_id and first["status"] == "PROCESSING"
    async with httpx.AsyncClient(base_url=gateway.gateway_url, timeout=30) as client:
        assert (await client.get(f"/v1/tasks/{task_id}", headers=_auth(gateway, scheme=scheme))).status_code == 200


async def test_a_ticket_opens_one_websocket_of_its_task(gateway: AnyStack) -> None:
    task_id, other_task = await _new_task(gateway), await _new_task(gateway)
    async with httpx.AsyncClient(base_url=gateway.gateway_url, timeout=30) as client:
        answer = await client.post(f"/v1/tasks/{task_id}/ticket", headers=_auth(gateway))
        assert answer.status_code == 201 and answer.json()["expires_in_s"] == 30
        ticket = answer.json()["ticket"]
        # Bob's key does not get a ticket for alice's task.
        assert (await client.post(f"/v1/tasks/{task_id}/ticket", headers=_auth(gateway, "bob"))).status_code == 404
    protocols = [Subprotocol("docsum"), Subprotocol(f"bearer.{ticket}")]
    assert await _refused(_ws_url(gateway, other_task), subprotocols=protocols) == 403  # not its task
    async with connect(_ws_url(gateway, task_id), subprotocols=protocols, open_timeout=10) as ws:
        assert ws.subprotocol == "docsum"  # the ticket is never echoed
        assert json.loads(await ws.recv())["task_id"] == task_id
    assert await _refused(_ws_url(gateway, task_id), subprotocols=protocols) == 403  # used
    key_protocols = [Subprotocol("docsum"), Subprotocol(f"bearer.{gateway.keys['alice']}")]
    assert (await _first_message(_ws_url(gateway, task_id), subprotocols=key_protocols))["task_id"] == task_id


# --- strict inputs ----------------------------------------------------------------------------------------


def _raw_multipart(*parts: tuple[bytes, bytes]) -> tuple[bytes, dict[str, str]]:
    body = b"".join(b"--nul\r\n" + h + b"\r\n\r\n" + c + b"\r\n" for h, c in parts) + b"--nul--\r\n"
    return body, {"Content-Type": "multipart/form-data; boundary=nul"}


FILE = (b'Content-Disposition: form-data; name="files"; filename="a.txt"', b"text")


@pytest.mark.parametrize(
    "parts",
    [
        ((FILE[0].replace(b"a.txt", b"a\x00.txt"), FILE[1]),),
        (FILE, (b'Content-Disposition: form-data; name="title"', b"t\x00")),
        (FILE, (b'Content-Disposition: form-data; name="language"', b"\x00")),
    ],
    ids=["filename", "title", "language"],
)
async def test_a_nul_is_422(gateway: AnyStack, parts: tuple) -> None:
    body, headers = _raw_multipart(*parts)
    async with httpx.AsyncClient(base_url=gateway.gateway_url, headers=_auth(gateway), timeout=30) as client:
        response = await client.post("/v1/tasks", content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "NUL" in response.json()["detail"][0]["msg"]


async def test_a_nul_in_a_path_is_422_and_a_non_id_404(gateway: AnyStack) -> None:
    async with httpx.AsyncClient(base_url=gateway.gateway_url, headers=_auth(gateway), timeout=30) as client:
        assert (await client.get("/v1/tasks/%00")).status_code == 422
        assert (await client.post("/v1/tasks/ab%00cd/retry")).status_code == 422
        for bad in ("not-a-task", str(uuid.uuid4()).upper(), "1' OR '1'='1"):
            response = await client.get(f"/v1/tasks/{bad}")
            assert response.status_code == 404 and response.json() == {"detail": f"no task {bad}"}
        assert (await client.get(f"/v1/tasks/{uuid.uuid4()}")).status_code == 404  # an id, but nobody's
        # A document's text: the same rules for the document's id, under a task of the caller's.
        task_id = await _new_task(gateway)
        quote = f"/v1/tasks/{task_id}/documents/%s/text?start=0&end=1"
        assert (await client.get(quote % "ab%00cd")).status_code == 422
        for bad in ("not-a-document", str(uuid.uuid4()).upper()):
            response = await client.get(quote % bad)
            assert response.status_code == 404 and response.json() == {"detail": f"no document {bad} in task {task_id}"}
    assert await _refused(_ws_url(gateway, "not-a-task"), additional_headers=_auth(gateway)) == 403


# --- a bad setting: `up` fails naming the service and the setting; logs are private ---------------------


def test_stack_up_names_the_gateway_and_the_setting_and_stops_what_it_started(
    infra: dict[str, str], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DOCSUM_")},
        **infra,  # this session's database, the shared broker: stack.sh starts no infrastructure of its own
        "DOCSUM_STATE_DIR": str(state),
        "DOCSUM_TOPIC_PREFIX": f"test-{uuid.uuid4().hex[:8]}.",
        "DOCSUM_GATEWAY_PORT": str(free_port()),
        "DOCSUM_API_KEYS": "local=tooshort",
        "DOCSUM_HEALTH_PORT_BASE": "0",  # no health ports: a `make up` stack may hold the default ones
    }
    done = subprocess.run(
        [str(ROOT / "scripts" / "stack.sh"), "up"], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 1, done
    assert "up: gateway exited during start-up" in done.stderr, done.stderr
    assert "docsum-gateway: bad setting DOCSUM_API_KEYS: " in done.stderr
    assert "Traceback" not in done.stderr and "tooshort" not in done.stderr
    assert "up failed: stopped what it had started" in done.stderr
    for pid_file in state.glob("*.pid"):  # nothing left running
        pid = int(pid_file.read_text())
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    for log in state.glob("*.log"):
        assert stat.S_IMODE(log.stat().st_mode) == 0o600, log
