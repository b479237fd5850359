"""Documents other systems publish: validation, the URI policy (files under roots, hosts and addresses),
the bytes each form gives, the schema's forms, and a task that waits for every document it announced."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema_rs
import pytest
from pydantic import ValidationError

from docsum_merger.policy import DocumentState, decide_task, with_awaited
from docsum_parser import intake, sources
from docsum_parser.settings import ParserSettings
from docsum_shared.blobs import S3Place
from docsum_shared.errors import ItemFailed, Poison
from docsum_shared.events import DocumentSubmitted, Topic, decode
from docsum_shared.intake_access import IntakeAccess
from docsum_shared.redrive import DocumentRow, plan
from docsum_shared.states import DocumentStatus, TaskStatus
from tests import generators

contracts = generators.contracts()

SETTINGS = ParserSettings(_env_file=None, max_files_per_task=10)


def _inline(**fields: object) -> DocumentSubmitted:
    values: dict[str, object] = {
        "task_id": "crm:task-1",
        "document_id": "crm:doc-1",
        "owner": "crm",
        "filename": "a.txt",
        "task_documents": 2,
        "content_base64": base64.b64encode(b"hello").decode(),
        **fields,
    }
    return DocumentSubmitted.model_validate(values, context={"submission_forms": "lenient"})


# --- the message --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("task_id", "has space"),
        ("task_id", "x" * 65),
        ("document_id", "../etc/passwd"),
        ("document_id", ""),
        ("owner", "alice@example.com"),
        ("owner", "bob\x00"),
    ],
)
def test_ids_and_owner_outside_the_charset_are_refused(field: str, value: str) -> None:
    with pytest.raises(Poison, match=field):
        intake.check_message(_inline(**{field: value}), SETTINGS)


def test_usable_ids_pass_and_the_task_size_is_bounded() -> None:
    intake.check_message(_inline(task_id="A.b_c:d-9" + "x" * 55), SETTINGS)
    with pytest.raises(Poison, match="task_documents is 11, over the limit of 10"):
        intake.check_message(_inline(task_documents=11), SETTINGS)
    with pytest.raises(Poison, match="task_documents is missing"):
        intake.check_message(_inline(task_documents=None), SETTINGS)
    with pytest.raises(Poison, match="filename"):
        intake.check_message(_inline(filename="a\x00.txt"), SETTINGS)


def test_a_task_of_another_owner_or_size_is_refused_and_a_full_one_takes_no_new_document() -> None:
    event = _inline()
    stored = intake.StoredTask(owner="crm", expected_documents=2, documents=1, total_bytes=5)
    intake.check_task(event, None, new_document=True)  # first sight: the message creates it
    intake.check_task(event, stored, new_document=True)
    with pytest.raises(Poison, match="belongs to another owner"):
        intake.check_task(_inline(owner="erp"), stored, new_document=True)
    with pytest.raises(Poison, match="task_documents is 3, but .* first published with 2"):
        intake.check_task(_inline(task_documents=3), stored, new_document=True)
    with pytest.raises(Poison, match="submitted through the gateway"):
        intake.check_task(event, intake.StoredTask("crm", None, 1, 5), new_document=True)
    full = intake.StoredTask("crm", 2, 2, 10)
    with pytest.raises(Poison, match="already has its 2 documents"):
        intake.check_task(event, full, new_document=True)
    intake.check_task(event, full, new_document=False)  # a replay of one of its own


def test_a_document_id_of_another_task_or_owner_is_refused() -> None:
    event = _inline()
    intake.check_document(event, None)
    intake.check_document(event, intake.ExistingDocument("crm:task-1", "crm", needs_bytes=False))
    for other in (
        intake.ExistingDocument("crm:task-2", "crm", False),
        intake.ExistingDocument("crm:task-1", "x", False),
    ):
        with pytest.raises(Poison, match="another task or owner"):
            intake.check_document(event, other)


# --- inline bytes -------------------------------------------------------------------------------------


def test_inline_bytes_are_decoded_with_line_breaks_and_bad_base64_fails_the_document() -> None:
    data = "论文".encode() * 100
    wrapped = base64.encodebytes(data).decode()  # 76-character lines
    assert intake.decode_inline(wrapped, SETTINGS) == data
    with pytest.raises(ItemFailed, match="not valid base64"):
        intake.decode_inline("not base64 at all!", SETTINGS)
    with pytest.raises(ItemFailed, match="not valid base64"):
        intake.decode_inline("aGVsbG8", SETTINGS)  # padding missing


def test_inline_bytes_over_the_cap_fail_the_document_naming_the_setting() -> None:
    small = ParserSettings(_env_file=None, intake_inline_max_bytes=100)
    assert len(intake.decode_inline(base64.b64encode(b"x" * 100).decode(), small)) == 100
    with pytest.raises(ItemFailed, match=r"101 bytes, over the limit of 100 \(DOCSUM_INTAKE_INLINE_MAX_BYTES\)"):
        intake.decode_inline(base64.b64encode(b"x" * 101).decode(), small)
    with pytest.raises(ItemFailed, match="DOCSUM_INTAKE_INLINE_MAX_BYTES"):  # refused by its length, not decoded
        intake.decode_inline("A" * 10_000, small)
    upload_cap = ParserSettings(_env_file=None, max_file_bytes=50)
    with pytest.raises(ItemFailed, match="DOCSUM_MAX_FILE_BYTES"):
        intake.decode_inline(base64.b64encode(b"x" * 60).decode(), upload_cap)


def test_the_task_bytes_cap_holds_across_its_documents() -> None:
    capped = ParserSettings(_env_file=None, max_task_bytes=100)
    assert intake.task_bytes_error(60, 40, capped) is None
    assert "DOCSUM_MAX_TASK_BYTES" in (intake.task_bytes_error(60, 41, capped) or "")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [({"content_base64": None}, "no content"), ({"source_uri": "file:///x"}, "both content_base64 and source_uri")],
)
def test_no_content_or_two_fail_the_document(fields: dict[str, object], reason: str) -> None:
    assert reason in (intake.form_error(_inline(**fields)) or "")


# --- URIs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("s3://bucket/key.pdf", "s3:// URIs are not allowed here: no bucket is configured (DOCSUM_INTAKE_S3_PLACES)"),
        ("ftp://host/a.txt", "scheme 'ftp' is not supported"),
        ("file:///srv/a.txt", "no directory is configured (DOCSUM_INTAKE_FILE_ROOTS)"),
        ("file://otherhost/srv/a.txt", "not a host"),
        ("https://example.com/a.pdf", "host example.com is not allowed: list it in DOCSUM_INTAKE_HTTP_HOSTS"),
        ("http://[::1/a", "not a valid URI"),
    ],
)
def test_uris_the_settings_do_not_allow_fail_the_document(uri: str, reason: str) -> None:
    with pytest.raises(ItemFailed, match=reason.replace("(", r"\(").replace(")", r"\)")):
        intake.parse_uri(uri, SETTINGS)


def test_s3_uris_are_read_only_under_the_owners_buckets_and_prefixes() -> None:
    settings = ParserSettings(
        _env_file=None,
        intake_s3_places=["s3://shared-docs"],
        intake_owners={"alice": IntakeAccess(s3_places=["s3://alice-docs/in"])},
    )
    alice, bob = settings.intake_access("alice"), settings.intake_access("bob")
    assert intake.parse_uri("s3://alice-docs/in/q3/a.pdf", settings, alice) == S3Place("alice-docs", "in/q3/a.pdf")
    assert intake.parse_uri("s3://shared-docs/x.pdf", settings, bob) == S3Place("shared-docs", "x.pdf")
    refusals = [
        ("s3://alice-docs/in/a.pdf", bob, "not under a bucket and prefix DOCSUM_INTAKE_S3_PLACES allows"),
        ("s3://shared-docs/x.pdf", alice, "not under a bucket and prefix DOCSUM_INTAKE_OWNERS (alice: s3_places)"),
        ("s3://alice-docs/inbox/a.pdf", alice, "not under a bucket"),  # a prefix is whole path segments
        ("s3://alice-docs/in/", alice, "names no object"),
        ("s3://A_B/x", alice, "not a valid s3:// URI"),
    ]
    for uri, access, reason in refusals:
        with pytest.raises(ItemFailed, match=re.escape(reason)):
            intake.parse_uri(uri, settings, access)


def test_allowed_uris_name_their_place() -> None:
    settings = ParserSettings(
        _env_file=None,
        intake_file_roots=["/srv"],
        intake_http_hosts=["*.example.com", "10.0.0.0/8"],
        intake_http_ports=[443, 8080],
    )
    assert intake.parse_uri("file:///srv/a%20b.txt", settings) == intake.FileSource("/srv/a b.txt")
    assert intake.parse_uri("https://Docs.Example.com/a.pdf", settings) == intake.HttpSource(
        "https://Docs.Example.com/a.pdf", "https", "docs.example.com", 443
    )
    assert intake.parse_uri("http://10.1.2.3:8080/a", settings).port == 8080  # type: ignore[union-attr]
    with pytest.raises(ItemFailed, match="not allowed"):
        intake.parse_uri("https://example.com.evil.net/a.pdf", settings)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("192.168.0.7", "private"),
        ("fd00::5", "private"),
        ("100.64.0.1", "non-public"),
        ("0.0.0.0", "private"),
    ],
)
def test_non_public_addresses_are_refused_unless_listed(address: str, kind: str) -> None:
    ip = ipaddress.ip_address(address)
    problem = intake.address_error("docs.example.com", ip, ["*.example.com", "*"])
    assert problem is not None and f"a {kind} address" in problem
    assert intake.address_error("docs.example.com", ip, [address]) is None  # that very address
    assert intake.address_error("docs.example.com", ip, ["docs.example.com"]) is None  # the host by its name


def test_public_addresses_pass_and_networks_can_be_listed() -> None:
    assert intake.address_error("example.com", ipaddress.ip_address("93.184.216.34"), []) is None
    assert intake.address_error("h", ipaddress.ip_address("10.9.9.9"), ["10.0.0.0/8"]) is None
    assert intake.address_error("h", ipaddress.ip_address("11.0.0.1"), ["10.0.0.0/8"]) is None


# Python's is_global says True for these (3.11 to 3.13): the table of intake.NOT_PUBLIC refuses them.
UNREACHABLE_RANGES = [
    ("fec0::1", "site-local"),
    ("feff:ffff::1", "site-local"),  # the last of fec0::/10
    ("5f00::1", "segment-routing"),
    ("5f00:ffff::5", "segment-routing"),
    ("3fff::1", "documentation"),
    ("3fff:fff:ffff::1", "documentation"),  # the last of 3fff::/20
]


@pytest.mark.parametrize(("address", "kind"), UNREACHABLE_RANGES)
def test_site_local_srv6_and_documentation_addresses_are_refused_unless_listed(address: str, kind: str) -> None:
    ip = ipaddress.ip_address(address)
    problem = intake.address_error("docs.example.com", ip, ["*.example.com", "*"])
    assert problem is not None and f"resolves to {ip}, a {kind} (" in problem, problem
    assert "list that address" in problem
    assert intake.address_error("docs.example.com", ip, [address]) is None  # that very address
    assert intake.address_error("docs.example.com", ip, ["docs.example.com"]) is None  # the host by its name


def test_the_ranges_next_to_the_refused_ones_are_public() -> None:
    for address in ("3fff:1000::1", "2001:4860:4860::8888"):
        assert intake.address_error("example.com", ipaddress.ip_address(address), ["*"]) is None, address


def test_redirects_are_followed_only_within_the_origin() -> None:
    source = intake.HttpSource("https://docs.example.com/a", "https", "docs.example.com", 443)
    assert intake.redirect_error(source, "/b") is None
    assert intake.redirect_error(source, "https://docs.example.com:443/c") is None
    for elsewhere in ("http://docs.example.com/a", "https://other.example.com/a", "https://docs.example.com:8443/"):
        assert "redirected to another place" in (intake.redirect_error(source, elsewhere) or "")


# --- file roots, on a real file system ------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, ParserSettings]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "a.txt").write_bytes(b"inside")
    (outside / "secret.txt").write_bytes(b"secret")
    (root / "escape.txt").symlink_to(outside / "secret.txt")
    (root / "linked-dir").symlink_to(outside)
    (outside / "into-root.txt").symlink_to(root / "sub" / "a.txt")
    return tmp_path, ParserSettings(_env_file=None, intake_file_roots=[str(root)], max_file_bytes=1000)


def test_a_file_under_a_root_is_read(tree: tuple[Path, ParserSettings]) -> None:
    base, settings = tree
    assert sources.read_file(str(base / "root" / "sub" / "a.txt"), settings) == b"inside"
    assert sources.read_file(str(base / "root" / "sub" / ".." / "sub" / "a.txt"), settings) == b"inside"
    # a link from elsewhere into a root leads to a file under it
    assert sources.read_file(str(base / "outside" / "into-root.txt"), settings) == b"inside"


@pytest.mark.parametrize(
    "relative",
    [
        "root/../outside/secret.txt",
        "root/sub/../../outside/secret.txt",
        "root/escape.txt",
        "root/linked-dir/secret.txt",
    ],
)
def test_dot_dot_and_symlinks_out_of_the_roots_are_refused(tree: tuple[Path, ParserSettings], relative: str) -> None:
    base, settings = tree
    with pytest.raises(ItemFailed, match="is not under a directory DOCSUM_INTAKE_FILE_ROOTS allows"):
        sources.read_file(str(base / relative), settings)


def test_a_root_named_through_a_symlink_is_resolved_too(tree: tuple[Path, ParserSettings]) -> None:
    base, _ = tree
    (base / "alias").symlink_to(base / "root")
    settings = ParserSettings(_env_file=None, intake_file_roots=[str(base / "alias")])
    assert sources.read_file(str(base / "root" / "sub" / "a.txt"), settings) == b"inside"


def test_missing_non_regular_and_oversized_files_fail_with_the_reason(tree: tuple[Path, ParserSettings]) -> None:
    base, settings = tree
    with pytest.raises(ItemFailed, match="no file at"):
        sources.read_file(str(base / "root" / "nope.txt"), settings)
    with pytest.raises(ItemFailed, match="not a regular file"):
        sources.read_file(str(base / "root" / "sub"), settings)
    (base / "root" / "big.bin").write_bytes(b"x" * 1001)
    with pytest.raises(ItemFailed, match=r"1,001 bytes, over the limit of 1,000 \(DOCSUM_MAX_FILE_BYTES\)"):
        sources.read_file(str(base / "root" / "big.bin"), settings)


# --- http(s), against a real server on a loopback address -------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        if self.path.startswith("/redirect-out"):
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.end_headers()
            return
        if self.path.startswith("/redirect-in"):
            self.send_response(302)
            self.send_header("Location", "/doc.txt")
            self.end_headers()
            return
        if self.path in ("/redirect-control", "/redirect-long"):
            self.send_response(302)
            tail = "a\x01b" if self.path == "/redirect-control" else "a" * 70_000
            self.send_header("Location", f"/{tail}")
            self.end_headers()
            return
        if self.path == "/doc.txt":
            body = f"host header {self.headers['Host']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/big":
            self.send_response(200)
            self.end_headers()  # no length: counted as it streams
            self.wfile.write(b"x" * 5000)
            return
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A server on 127.0.0.2 (another loopback address than the refused 127.0.0.1)."""
    httpd = ThreadingHTTPServer(("127.0.0.2", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.2:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


# These tests are about hosts and addresses: the test server's port (and 9, closed) are allowed.
ANY_PORT = list(range(1, 65536))


def _http(listed: list[str]) -> ParserSettings:
    return ParserSettings(
        _env_file=None, intake_http_hosts=listed, intake_http_ports=ANY_PORT, max_file_bytes=1000,
        intake_http_timeout_s=5,
    )  # fmt: skip


async def _fetch(url: str, settings: ParserSettings) -> bytes:
    source = intake.parse_uri(url, settings)
    assert isinstance(source, intake.HttpSource)
    return await sources.download(source, settings)


async def test_a_listed_address_is_fetched_with_its_host_and_same_origin_redirects(server: str) -> None:
    settings = _http(["127.0.0.2"])
    assert await _fetch(f"http://{server}/doc.txt", settings) == f"host header {server}".encode()
    assert await _fetch(f"http://{server}/redirect-in", settings) == f"host header {server}".encode()


async def test_a_loopback_address_behind_a_wildcard_is_refused_before_connecting(server: str) -> None:
    port = server.rpartition(":")[2]
    with pytest.raises(ItemFailed, match="127.0.0.1, a loopback address"):
        await _fetch(f"http://127.0.0.1:{port}/doc.txt", _http(["*"]))
    with pytest.raises(ItemFailed, match="127.0.0.2, a loopback address"):
        await _fetch(f"http://{server}/doc.txt", _http(["*"]))
    with pytest.raises(ItemFailed, match="resolves to 127.0.0.1"):
        await _fetch(f"http://localhost:{port}/doc.txt", _http(["*"]))


@pytest.mark.parametrize(("address", "kind"), UNREACHABLE_RANGES[::2])
async def test_an_unreachable_range_is_refused_by_address_and_by_name_before_connecting(
    address: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _http(["*"])
    with pytest.raises(ItemFailed, match=f"a {kind} "):
        await _fetch(f"http://[{address}]:8080/doc.txt", settings)  # the address in the URI

    def resolved(host: str, port: int, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        assert host == "docs.example.com"
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolved)  # what the name's DNS answer says
    with pytest.raises(ItemFailed, match=f"host docs.example.com resolves to {address}, a {kind} "):
        await _fetch("https://docs.example.com/doc.txt", settings)


async def test_redirects_elsewhere_oversized_bodies_and_errors_fail_the_document(server: str) -> None:
    settings = _http(["127.0.0.2"])
    with pytest.raises(ItemFailed, match="redirected to another place"):
        await _fetch(f"http://{server}/redirect-out", settings)
    with pytest.raises(ItemFailed, match="more than 1,000 bytes"):
        await _fetch(f"http://{server}/big", settings)
    with pytest.raises(ItemFailed, match="answered 404"):
        await _fetch(f"http://{server}/missing", settings)
    closed = _http(["127.0.0.3"])
    with pytest.raises(ItemFailed, match="cannot be fetched: ConnectError"):
        await _fetch("http://127.0.0.3:9/doc.txt", closed)


async def test_a_redirect_no_request_can_follow_fails_the_document(server: str) -> None:
    """A Location with a control character, or one longer than any client takes, fails the document
    (httpx's InvalidURL is no HTTPError: it used to escape, and the message was dead-lettered)."""
    for path in ("/redirect-control", "/redirect-long"):
        with pytest.raises(ItemFailed) as failed:
            await _fetch(f"http://{server}{path}", _http(["127.0.0.2"]))
        assert "redirect" in str(failed.value) or "cannot be" in str(failed.value), str(failed.value)
        assert len(str(failed.value)) < 600


# --- the contract: one model, three forms -------------------------------------------------------------------


def test_the_schema_publishes_the_three_forms_as_one_of() -> None:
    schema = contracts.schema(Topic.DOCUMENT_SUBMITTED)
    assert [form["title"] for form in schema["oneOf"]] == ["stored", "inline", "by URI"]
    validator = jsonschema_rs.validator_for(schema)
    base = {"task_id": "t1", "document_id": "d1", "owner": "alice", "filename": "a.txt"}
    stored = DocumentSubmitted(**base, blob_sha256="ab" * 32, size_bytes=3)
    inline = DocumentSubmitted(**base, task_documents=1, content_base64="aGk=")
    by_uri = DocumentSubmitted(**base, task_documents=1, source_uri="file:///srv/a.txt")
    for event in (stored, inline, by_uri):  # what our models write (null for the other forms' fields)
        assert validator.is_valid(json.loads(event.to_bytes()))
    assert not validator.is_valid(base)
    assert not validator.is_valid({**base, "task_documents": 1, "content_base64": "aGk=", "source_uri": "file:///a"})
    assert not validator.is_valid({**base, "content_base64": "aGk="})  # task_documents missing
    assert not validator.is_valid({**base, "task_documents": 1, "content_base64": "aGk=", "owner": "a b"})
    for name in ("task_documents", "content_base64", "source_uri", "title", "options"):
        assert schema["properties"][name]["description"], name


def test_the_model_requires_one_form_and_decoding_leaves_the_reason_to_the_parser() -> None:
    base = {"task_id": "t1", "document_id": "d1", "owner": "alice", "filename": "a.txt"}
    for fields in (
        {},
        {"task_documents": 1, "content_base64": "aGk=", "source_uri": "file:///a"},
        {"blob_sha256": "a"},
    ):
        with pytest.raises(ValidationError):
            DocumentSubmitted(**base, **fields)
    with pytest.raises(ValidationError, match="task_documents"):
        DocumentSubmitted(**base, content_base64="aGk=")
    decoded = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**base, "task_documents": 2}).encode())
    assert isinstance(decoded, DocumentSubmitted) and decoded.form is None
    assert "no content" in (intake.form_error(decoded) or "")


# --- a task waits for the documents it announced ----------------------------------------------------------


def _doc(status: DocumentStatus, name: str = "a") -> DocumentState:
    return DocumentState(name, name, status, "s" if status is DocumentStatus.COMPLETED else None, None)


def test_the_merger_does_not_finish_a_task_before_its_announced_documents_exist() -> None:
    arrived = [_doc(DocumentStatus.COMPLETED, "a"), _doc(DocumentStatus.FAILED, "b")]
    assert decide_task(None, with_awaited(arrived, 3)) is None
    finished = decide_task(None, with_awaited(arrived, 2))
    assert finished is not None and finished.status is TaskStatus.COMPLETED_WITH_ERRORS
    assert decide_task(None, with_awaited(arrived, None)) is not None  # a gateway task: what is present


def test_a_redrive_does_not_announce_a_task_finished_before_its_documents_exist() -> None:
    def row(i: int, status: DocumentStatus, sha: str | None = "ab") -> DocumentRow:
        return DocumentRow(f"d{i}", status, f"{i}.txt", None, sha, 1 if sha else None, None, None)

    final = [row(1, DocumentStatus.COMPLETED), row(2, DocumentStatus.FAILED, None)]
    assert plan("t", "o", final, {}, expected_documents=3) == []
    [merged] = plan("t", "o", final, {}, expected_documents=2)
    assert merged.document_id == "d2"  # type: ignore[attr-defined]
    # a document without bytes (reset by retry) waits for its producer instead of a message naming none
    assert plan("t", "o", [row(1, DocumentStatus.PENDING, None)], {}, expected_documents=1) == []


def test_settings_read_lists_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "DOCSUM_INTAKE_FILE_ROOTS", '["/srv/docs", "/data"]')
    monkeypatch.setitem(os.environ, "DOCSUM_INTAKE_HTTP_HOSTS", '["docs.example.com"]')
    settings = ParserSettings(_env_file=None)
    assert settings.intake_file_roots == ["/srv/docs", "/data"] and settings.intake_http_hosts == ["docs.example.com"]


# --- the parser's handler: a replay takes nothing in ------------------------------------------------------


class _Intake:
    """The parser's repository as intake uses it, in memory."""

    def __init__(self, existing: intake.ExistingDocument | None) -> None:
        self.existing = existing
        self.taken: list[tuple[bytes | None, str | None]] = []

    async def find_document(self, document_id: str) -> intake.ExistingDocument | None:
        return self.existing

    async def load_intake_task(self, task_id: str) -> intake.StoredTask | None:
        return None

    async def take_in(
        self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
    ) -> None:
        self.taken.append((data, error))


async def test_the_handler_takes_bytes_in_once_and_a_replay_fetches_nothing(tmp_path: Path) -> None:
    from docsum_parser import handlers

    (tmp_path / "a.txt").write_bytes(b"from a file")
    settings = ParserSettings(_env_file=None, intake_file_roots=[str(tmp_path)])
    event = _inline(content_base64=None, source_uri=(tmp_path / "a.txt").as_uri())
    repo = _Intake(None)
    await handlers.take_in(event, handlers.Deps(repo, settings))  # type: ignore[arg-type]
    assert repo.taken == [(b"from a file", None)]

    (tmp_path / "a.txt").unlink()  # a fetch now would fail: the replay must not fetch
    replay = _Intake(intake.ExistingDocument(event.task_id, event.owner, needs_bytes=False))
    await handlers.take_in(event, handlers.Deps(replay, settings))  # type: ignore[arg-type]
    assert replay.taken == []

    broken = _Intake(None)
    await handlers.take_in(_inline(content_base64="%%%="), handlers.Deps(broken, settings))  # type: ignore[arg-type]
    [(data, error)] = broken.taken
    assert data is None and error is not None and "not valid base64" in error


def test_a_previous_task_is_its_owners_or_refused_the_same_way_as_none() -> None:
    named = _inline(owner="alice", options={"previous_task": "crm:task-0"})
    intake.check_previous(named, "alice")  # alice's own
    intake.check_previous(_inline(owner="alice"), None)  # names none
    said = []
    for previous_owner in ("bob", None):  # bob's task, and no task at all
        with pytest.raises(Poison) as refused:
            intake.check_previous(named, previous_owner)
        said.append(str(refused.value))
    assert said[0] == said[1] and "bob" not in said[0] and "options.previous_task crm:task-0" in said[0]


def test_a_document_key_with_a_nul_is_refused() -> None:
    with pytest.raises(Poison, match="document_key"):
        intake.check_message(_inline(document_key="a\x00b"), SETTINGS)
