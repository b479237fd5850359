"""The gateway's front door without a database: limits while the body streams, strict inputs, keys,
tickets, the log's redaction and the start-up check of the settings.

The application is built for real (create_app) with a pool and a producer that fail the test when
touched: every answer here comes before PostgreSQL or Kafka would be reached.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from fastapi.testclient import TestClient

from docsum_gateway.app import create_app
from docsum_gateway.logs import Redact
from docsum_gateway.security import Tickets, bearer_token, parse_api_keys, ticket_secret
from docsum_gateway.settings import ConfigError, GatewaySettings, check
from docsum_gateway.uploads import Spool, Upload, form_charset
from tests.cli_doubles import gateway_in_process

KEY = "k" * 24
MiB = 1024 * 1024
TASK_ID = "0b0e4d6c-2f49-4f3a-9a57-1d5f7c1e2a10"


class Untouchable:
    """A pool or publishing port that must not be used."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the database or broker was reached ({name})")


def _app(**settings: Any) -> Any:
    # No task rate limit: it is booked in PostgreSQL (tests/integration/test_gateway_keys.py).
    app = create_app(GatewaySettings(api_keys=f"alice={KEY}", **{"tasks_per_minute": 0, **settings}))
    app.state.pool = Untouchable()
    app.state.publish = Untouchable()
    return app


@pytest.fixture
def client() -> Iterator[TestClient]:
    yield TestClient(_app(max_file_bytes=MiB), headers={"Authorization": f"Bearer {KEY}"})


def multipart(*parts: tuple[bytes, bytes], boundary: bytes = b"b0undary") -> tuple[bytes, str]:
    """A multipart body from (part headers, content) pairs, byte for byte as given (httpx would escape a
    NUL in a filename)."""
    body = b"".join(
        b"--" + boundary + b"\r\n" + headers + b"\r\n\r\n" + content + b"\r\n" for headers, content in parts
    )
    return body + b"--" + boundary + b"--\r\n", f"multipart/form-data; boundary={boundary.decode()}"


def file_part(filename: bytes, content: bytes = b"hello", content_type: bytes = b"text/plain") -> tuple[bytes, bytes]:
    headers = b'Content-Disposition: form-data; name="files"; filename="' + filename + b'"'
    return headers + b"\r\nContent-Type: " + content_type, content


def field(name: str, value: bytes) -> tuple[bytes, bytes]:
    return f'Content-Disposition: form-data; name="{name}"'.encode(), value


# --- NUL and other text PostgreSQL cannot store: 422 naming the input ----------------------------------


@pytest.mark.parametrize(
    ("parts", "loc"),
    [
        ((file_part(b"a\x00b.txt"),), ["body", "files", 0, "filename"]),
        ((file_part(b"ok.txt", content_type=b"text/plain\x00"),), ["body", "files", 0, "content_type"]),
        ((file_part(b"ok.txt"), field("title", b"a \x00 title")), ["body", "title"]),
        ((file_part(b"ok.txt"), field("language", b"e\x00n")), ["body", "language"]),
        ((file_part(b"ok.txt"), field("ti\x00tle", b"x")), ["body", "<field name>"]),
    ],
)
def test_nul_in_a_text_input_is_422(client: TestClient, parts: tuple, loc: list) -> None:
    body, content_type = multipart(*parts)
    response = client.post("/v1/tasks", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == loc
    assert "NUL" in error["msg"]


def test_a_lone_surrogate_is_refused_and_shown_escaped() -> None:
    from fastapi.exceptions import RequestValidationError

    from docsum_gateway.inputs import check_text, unstorable

    assert unstorable("fine, 中文 too") is None
    with pytest.raises(RequestValidationError) as refused:
        check_text(("body", "title"), "a\ud800b")
    (error,) = refused.value.errors()
    assert "surrogate" in error["msg"] and error["input"] == "a\\ud800b"
    error["input"].encode("utf-8")  # JSON-encodable as UTF-8


def test_nul_in_a_path_parameter_is_422(client: TestClient) -> None:
    for path in ("/v1/tasks/%00", f"/v1/tasks/{TASK_ID[:-1]}%00/failures", "/v1/tasks/%00/pause"):
        response = client.request("GET" if "pause" not in path else "POST", path)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["detail"][0]["loc"] == ["path", "task_id"]


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ([field("length", b"enormous")], ["body", "length"]),
        ([field("mode", b"bulk")], ["body", "mode"]),  # not a mode
        ([field("mode", b"")], ["body", "mode"]),
        ([field("strict", b"1")], ["body", "strict"]),  # a boolean is `true` or `false`
        ([field("strict", b"")], ["body", "strict"]),
        ([field("title", b"x" * 501)], ["body", "title"]),
        ([field("title", b"one"), field("title", b"two")], ["body", "title"]),  # given twice
        ([field("nickname", b"x")], ["body", "nickname"]),  # not a field of the API
        ([field("files", b"not a file")], ["body", "files"]),
    ],
)
def test_form_fields_are_validated(client: TestClient, fields: list, loc: list) -> None:
    body, content_type = multipart(file_part(b"a.txt"), *fields)
    response = client.post("/v1/tasks", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_a_405_names_every_method_of_the_path(client: TestClient) -> None:
    response = client.request("OPTIONS", "/v1/tasks")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    response = client.get(f"/v1/tasks/{TASK_ID}/pause")
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


def test_not_an_upload_is_400(client: TestClient) -> None:
    assert client.post("/v1/tasks", json={"files": []}).status_code == 400
    body, content_type = multipart(field("title", b"nothing else"))
    assert client.post("/v1/tasks", content=body, headers={"Content-Type": content_type}).status_code == 400
    truncated = multipart(file_part(b"a.txt"))[0][:-20]
    response = client.post("/v1/tasks", content=truncated, headers={"Content-Type": content_type})
    assert response.status_code == 400


@pytest.mark.parametrize("charset", ["base64", "rot13", "hex", "zlib", "undefined", "utf-16", "punycode", "no-such"])
def test_a_charset_that_is_no_form_encoding_is_400_naming_it(client: TestClient, charset: str) -> None:
    body, content_type = multipart(file_part(b"a.txt"), field("title", b"dGl0bGU="))
    response = client.post("/v1/tasks", content=body, headers={"Content-Type": f"{content_type}; charset={charset}"})
    assert response.status_code == 400, response.text
    assert f"charset='{charset}'" in response.json()["detail"] and "UTF-8" in response.json()["detail"]


def test_a_name_the_charset_cannot_decode_is_read_as_latin_1() -> None:
    from docsum_gateway.uploads import UploadLimits, _Parser

    parser = _Parser(UploadLimits(1, 1, 1, 1, 1.0), Upload(), form_charset("idna"))
    assert parser._text(b"a..b") == "a..b"  # the idna codec raises UnicodeError (not a decode error) here
    assert form_charset("UTF8") == "utf-8" and form_charset("gb18030") == "gb18030"


# --- task ids that cannot be ids: 404 without a query ------------------------------------------------


@pytest.mark.parametrize(
    "task_id", ["not-a-uuid", TASK_ID.upper(), TASK_ID.replace("-", ""), "{" + TASK_ID + "}", "1" * 300, "é"]
)
def test_a_task_id_the_gateway_cannot_have_made_is_404_without_the_database(client: TestClient, task_id: str) -> None:
    for method, path in [
        ("GET", f"/v1/tasks/{task_id}"),
        ("GET", f"/v1/tasks/{task_id}/failures"),
        ("POST", f"/v1/tasks/{task_id}/cancel"),
        ("POST", f"/v1/tasks/{task_id}/ticket"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json() == {"detail": f"no task {task_id}"}


def test_the_websocket_refuses_a_non_id_without_the_database(client: TestClient) -> None:
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect) as closed, client.websocket_connect("/v1/tasks/nope/events"):
        pass
    assert closed.value.code == 1008


def test_no_key_is_401_before_anything_is_read() -> None:
    client = TestClient(_app())
    for scheme in ("Basic", "Token", ""):
        response = client.get(f"/v1/tasks/{TASK_ID}", headers={"Authorization": f"{scheme} {KEY}".strip()})
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/tasks/not-a-uuid").status_code == 401  # no key: nothing about ids either


# --- limits while the body streams --------------------------------------------------------------------


def _post_streaming(app: Any, body: Iterator[bytes], headers: dict[str, str]) -> tuple[int, int, bytes]:
    """Drive the ASGI app with a body that arrives in 64 KiB messages; (status, bytes the app read, body)."""
    import asyncio

    consumed = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal consumed
        block = next(body, None)
        if block is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        consumed += len(block)
        return {"type": "http.request", "body": block, "more_body": True}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/tasks",
        "raw_path": b"/v1/tasks",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], consumed, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _one_big_file(total: int, boundary: bytes = b"b0undary") -> Iterator[bytes]:
    yield b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="big.bin"\r\n\r\n'
    block = b"x" * 65536
    for _ in range(total // len(block)):
        yield block


def test_a_file_over_the_limit_is_cut_off_at_the_limit() -> None:
    app = _app(max_file_bytes=MiB)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "multipart/form-data; boundary=b0undary"}
    status, consumed, body = _post_streaming(app, _one_big_file(90 * MiB), headers)
    assert status == 413, body
    assert b"big.bin" in body and b"over the limit of 1048576 bytes" in body
    # Read: the limit and the block that crossed it, not the 90 MiB that were on their way.
    assert MiB < consumed <= MiB + 2 * 65536, consumed


def test_the_files_of_a_task_over_their_limit_are_cut_off() -> None:
    app = _app(max_file_bytes=MiB, max_task_bytes=2 * MiB)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "multipart/form-data; boundary=b0undary"}

    def many_files() -> Iterator[bytes]:
        for i in range(50):
            yield (
                b"\r\n" * (i > 0) + b"--b0undary\r\n"
                + f'Content-Disposition: form-data; name="files"; filename="f{i}"\r\n\r\n'.encode()
            )  # fmt: skip
            yield b"y" * (MiB - 4096)

    status, consumed, body = _post_streaming(app, many_files(), headers)
    assert status == 413, body
    assert b"files of the task are over the limit of 2097152 bytes" in body
    assert consumed <= 3 * MiB, consumed


def test_too_many_files_is_413_at_the_first_one_too_many() -> None:
    app = _app(max_files_per_task=3)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "multipart/form-data; boundary=b0undary"}
    parts = [file_part(f"f{i}.txt".encode()) for i in range(10)]
    status, _, body = _post_streaming(app, iter([multipart(*parts)[0]]), headers)
    assert status == 413 and b"more than the limit of 3 files" in body


def test_a_declared_body_over_the_cap_is_413_before_reading() -> None:
    app = _app(max_file_bytes=MiB, max_files_per_task=2)
    headers = {
        "Authorization": f"Bearer {KEY}",
        "Content-Type": "multipart/form-data; boundary=b0undary",
        "Content-Length": str(10 * 1024 * MiB),
    }
    status, consumed, _ = _post_streaming(app, _one_big_file(10 * MiB), headers)
    assert (status, consumed) == (413, 0)


def test_the_body_cap_is_the_files_plus_a_small_allowance() -> None:
    settings = GatewaySettings(api_keys=f"alice={KEY}")  # 100 files of 50 MiB, 256 MiB per task
    from docsum_gateway.routers.tasks import upload_limits

    limits = upload_limits(settings)
    assert limits.max_total_bytes == 256 * MiB
    assert 256 * MiB < limits.max_body_bytes < 258 * MiB


def test_a_spool_keeps_a_small_part_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import tempfile
    from types import SimpleNamespace

    from docsum_gateway import uploads

    spilled: list[IO[bytes]] = []

    def temporary_file(prefix: str) -> IO[bytes]:
        file = tempfile.TemporaryFile(prefix=prefix)
        spilled.append(file)
        return file

    monkeypatch.setattr(uploads, "tempfile", SimpleNamespace(TemporaryFile=temporary_file))
    spool = Spool(threshold=1000)
    spool.write(b"a" * 600)
    assert spilled == []  # under the threshold: in memory
    spool.write(b"b" * 600)
    assert len(spilled) == 1 and spool.size == 1200
    spilled[0].seek(0)
    assert spilled[0].read() == b"a" * 600 + b"b" * 600  # over it: all of the bytes in the file

    async def read() -> bytes:
        return b"".join([block async for block in spool.blocks(size=500)])

    assert asyncio.run(read()) == b"a" * 600 + b"b" * 600
    spool.close()
    assert spilled[0].closed


# --- keys, Bearer, tickets ----------------------------------------------------------------------------


@pytest.mark.parametrize("header", [f"Bearer {KEY}", f"bearer {KEY}", f"BEARER {KEY}", f"BeArEr  {KEY} "])
def test_bearer_in_any_case(header: str) -> None:
    assert bearer_token(header) == KEY


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", f"Basic {KEY}", f"Bearer{KEY}"])
def test_not_bearer(header: str | None) -> None:
    assert bearer_token(header) is None


def test_a_ticket_is_for_one_task_one_connection_and_a_short_time() -> None:
    tickets = Tickets(ticket_secret(None, {KEY: "alice"}), ttl_s=30)
    ticket = tickets.issue("alice", TASK_ID, now=1000.0)
    assert ticket.isascii() and all(c.isalnum() or c in "._-" for c in ticket)  # fits a URL and a subprotocol
    assert tickets.redeem(ticket, "another-task", now=1001.0) is None
    assert tickets.redeem(ticket, TASK_ID, now=1031.0) is None  # expired
    assert tickets.redeem(ticket, TASK_ID, now=1001.0) == "alice"
    assert tickets.redeem(ticket, TASK_ID, now=1002.0) is None  # used
    forged = Tickets(ticket_secret(None, {"x" * 20: "alice"}), ttl_s=30).issue("alice", TASK_ID, now=1000.0)
    assert tickets.redeem(forged, TASK_ID, now=1001.0) is None
    assert tickets.redeem("wst1.bm9wZQ.bm9wZQ", TASK_ID) is None


# --- credentials never in the log ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        f'127.0.0.1:5000 - "GET /v1/tasks/x/events?token={KEY} HTTP/1.1" 403',
        f"('127.0.0.1', 5000) - \"WebSocket /v1/tasks/x/events?a=1&TOKEN={KEY}&b=2\" [accepted]",
        '127.0.0.1:5000 - "GET /v1/tasks?api_key=other-secret-value HTTP/1.1" 200',
        "Authorization: bearer other-secret-value",
        f"a key elsewhere: /v1/tasks/{KEY}",
    ],
)
def test_the_log_never_shows_a_credential(line: str) -> None:
    redact = Redact([KEY])
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s", (line,), None)
    assert redact.filter(record)
    assert KEY not in record.getMessage() and "other-secret-value" not in record.getMessage()
    assert "[redacted]" in record.getMessage()


def test_the_log_keeps_what_is_no_credential() -> None:
    line = '127.0.0.1:5000 - "GET /v1/tasks?limit=5&monkey=1 HTTP/1.1" 200'
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, line, (), None)
    Redact([KEY]).filter(record)
    assert record.getMessage() == line


# --- settings checked at start: one line naming the setting, no traceback ----------------------------


def test_a_short_key_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as error:
        check(GatewaySettings(api_keys="alice=short"))
    assert error.value.setting == "DOCSUM_API_KEYS" and "16" in error.value.message
    with pytest.raises(ValueError, match="owner 'bob'"):
        parse_api_keys(f"alice={KEY},bob=tiny")


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"DOCSUM_API_KEYS": "alice=short"}, "DOCSUM_API_KEYS"),
        ({"DOCSUM_API_KEYS": ""}, "DOCSUM_API_KEYS"),
        ({"DOCSUM_API_KEYS": f"alice={KEY}", "DOCSUM_MAX_FILE_BYTES": "0"}, "DOCSUM_MAX_FILE_BYTES"),
        ({"DOCSUM_API_KEYS": f"alice={KEY}", "DOCSUM_MAX_TASK_BYTES": "lots"}, "DOCSUM_MAX_TASK_BYTES"),
    ],
)
def test_the_gateway_exits_with_one_line_naming_a_bad_setting(env: dict[str, str], setting: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DOCSUM_")}
    done = subprocess.run(
        [sys.executable, "-m", "docsum_gateway"], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"docsum-gateway: bad setting {setting}: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "short" not in done.stderr  # the message names the setting, never a key


def test_the_cli_says_which_input_was_refused(tmp_path: Path) -> None:
    """The CLI shows a 422 as each refused input and why (here through the real application)."""
    from docsum_cli.client import GatewayError

    gateway = gateway_in_process(_app(), KEY)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    with pytest.raises(GatewayError, match=r"gateway answered 422: title: contains a NUL character"):
        gateway.submit([doc], title="bad\x00title")
