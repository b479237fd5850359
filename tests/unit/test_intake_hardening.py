"""Intake of another system's URI: ports, addresses that embed an IPv4 address, URIs no request can be
made for (each fails its document with the reason, never the dead-letter topic), and URIs in the log."""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field

import pytest

from docsum_parser import handlers as parser
from docsum_parser import intake, logfilter, sources
from docsum_parser.intake import ExistingDocument, StoredTask
from docsum_parser.policy import StoredDocument
from docsum_parser.settings import ParserSettings
from docsum_parser.uris import shown
from docsum_shared.errors import ItemFailed
from docsum_shared.events import DocumentSubmitted
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus

EVERY_HOST = ParserSettings(_env_file=None, intake_http_hosts=["*"])


# --- ports ----------------------------------------------------------------------------------------------


def test_only_the_configured_ports_are_allowed_on_an_allowed_host() -> None:
    assert intake.parse_uri("https://docs.example.com/a.pdf", EVERY_HOST).port == 443  # type: ignore[union-attr]
    assert intake.parse_uri("http://docs.example.com:80/a.pdf", EVERY_HOST).port == 80  # type: ignore[union-attr]
    for uri in ("http://docs.example.com:8080/a.pdf", "https://docs.example.com:6379/", "http://h.example.com:22/"):
        with pytest.raises(ItemFailed, match=r"port \d+ is not allowed: list it in DOCSUM_INTAKE_HTTP_PORTS"):
            intake.parse_uri(uri, EVERY_HOST)
    wider = ParserSettings(_env_file=None, intake_http_hosts=["*"], intake_http_ports=[8443])
    assert intake.parse_uri("https://docs.example.com:8443/", wider).port == 8443  # type: ignore[union-attr]
    with pytest.raises(ItemFailed, match="port 443 is not allowed"):
        intake.parse_uri("https://docs.example.com/", wider)


def test_the_ports_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ParserSettings(_env_file=None).intake_http_ports == [80, 443]
    monkeypatch.setenv("DOCSUM_INTAKE_HTTP_PORTS", "[443, 8443]")
    assert ParserSettings(_env_file=None).intake_http_ports == [443, 8443]


# --- IPv6 addresses that lead to an IPv4 one ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "inner", "kind"),
    [
        ("64:ff9b::7f00:1", "127.0.0.1", "loopback"),  # NAT64
        ("64:ff9b::a9fe:a9fe", "169.254.169.254", "link-local"),  # NAT64 to the cloud metadata address
        ("::127.0.0.1", "127.0.0.1", "loopback"),  # IPv4-compatible
        ("::10.0.0.5", "10.0.0.5", "private"),
        ("2002:7f00:1::", "127.0.0.1", "loopback"),  # 6to4
        ("2002:c0a8:1::1", "192.168.0.1", "private"),
        ("::ffff:10.1.2.3", "10.1.2.3", "private"),  # IPv4-mapped
    ],
)
def test_an_ipv6_address_carrying_an_ipv4_one_is_judged_by_it(address: str, inner: str, kind: str) -> None:
    ip = ipaddress.ip_address(address)
    problem = intake.address_error("docs.example.com", ip, ["*"])
    assert problem is not None and f"resolves to {inner} (by {ip}), a {kind} address" in problem
    assert intake.address_error("docs.example.com", ip, [inner]) is None  # listing the IPv4 address allows it
    assert intake.address_error("docs.example.com", ip, [address]) is None  # and so does listing this one


def test_embedded_public_addresses_pass_and_local_nat64_does_not() -> None:
    for address in ("64:ff9b::5db8:d822", "::93.184.216.34", "2002:5db8:d822::1", "2606:4700::1111"):
        assert intake.address_error("example.com", ipaddress.ip_address(address), ["*"]) is None, address
    assert intake.address_error("example.com", ipaddress.ip_address("64:ff9b:1::5db8:d822"), ["*"]) is not None
    assert intake.address_error("example.com", ipaddress.ip_address("::"), ["*"]) is not None


# --- URIs no request can be made for: the document fails with the reason ---------------------------------


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://docs.example.com/a\x01b.pdf", "contains the control character or space"),
        ("http://docs.example.com/a b.pdf", "contains the control character or space"),
        ("http://a..example.com/a.pdf", "host a..example.com is not a valid host name"),
        ("http://" + "a" * 64 + ".example.com/", "is not a valid host name"),
        ("http://docs.example.com/" + "a" * 70_000, "longer than 65,536 characters"),
    ],
)
def test_a_uri_no_request_can_be_made_for_fails_the_document(uri: str, reason: str) -> None:
    with pytest.raises(ItemFailed, match=reason):
        intake.parse_uri(uri, EVERY_HOST)


def test_a_redirect_to_a_location_no_request_can_be_made_for_is_not_followed() -> None:
    source = intake.HttpSource("https://docs.example.com/a", "https", "docs.example.com", 443)
    assert "control character" in (intake.redirect_error(source, "/a\x7fb") or "")
    assert "longer than 65,536" in (intake.redirect_error(source, "/" + "a" * 70_000) or "")


async def test_a_name_idna_cannot_encode_fails_at_resolution_too() -> None:
    """Should such a name get past parse_uri, resolving it fails the document (UnicodeError is no OSError)."""
    source = intake.HttpSource("http://a..example.com/", "http", "a..example.com", 80)
    with pytest.raises(ItemFailed, match="cannot be resolved"):
        await sources.resolve(source, EVERY_HOST)


@dataclass
class IntakeRepo:
    taken: list[tuple[str | None, bool]] = field(default_factory=list)  # (error, had bytes)

    async def load(self, document_id: str) -> StoredDocument | None:
        return StoredDocument(DocumentStatus.FAILED, None, None, "failed", owner="crm", task_id="crm:t")

    async def load_bytes(self, sha256: str) -> bytes | None:
        raise AssertionError("no bytes are read")

    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        raise AssertionError("no text is stored")

    async def fail(self, document_id: str, error: str) -> None:
        raise AssertionError("intake writes the failure with the rows")

    async def find_document(self, document_id: str) -> ExistingDocument | None:
        return None

    async def load_intake_task(self, task_id: str) -> StoredTask | None:
        return None

    async def take_in(
        self, event: DocumentSubmitted, data: bytes | None, error: str | None, settings: ParserSettings
    ) -> None:
        self.taken.append((error, data is not None))


@pytest.mark.parametrize(
    "uri",
    ["http://93.184.216.34/a\x01b.pdf", "http://a..example.com/a.pdf"],  # InvalidURL, UnicodeError (IDNA)
)
async def test_the_handler_writes_the_rows_with_the_reason_instead_of_dead_lettering(uri: str) -> None:
    event = DocumentSubmitted(
        task_id="crm:t", document_id="crm:t:1", owner="crm", filename="a.pdf", task_documents=1, source_uri=uri
    )
    repo = IntakeRepo()
    crm = EVERY_HOST.model_copy(update={"intake_producers": {"crm": ["crm"]}})
    [failed] = await parser.handle(event, parser.Deps(repo, crm, producer="crm"))  # type: ignore[arg-type]
    assert type(failed).__name__ == "DocumentMerged"
    [(error, had_bytes)] = repo.taken
    assert error and not had_bytes


# --- URIs in messages and in the log ----------------------------------------------------------------------


def test_uris_are_shown_without_userinfo_query_or_fragment() -> None:
    presigned = "https://user:pa55@bucket.example.com:443/a/b.pdf?X-Amz-Signature=abc123&X-Amz-Credential=k#f"
    assert shown(presigned) == "https://bucket.example.com:443/a/b.pdf"
    assert shown("/relative/path?token=t") == "/relative/path"
    assert shown("http://[::1]:8080/x?y") == "http://[::1]:8080/x"


def test_the_parsers_log_never_shows_a_uris_userinfo_or_query() -> None:
    handler = logging.StreamHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    keep = Keep()
    keep.addFilter(logfilter.RedactUris())
    root.addHandler(keep)
    try:
        logfilter.redact_uris()
        logfilter.redact_uris()  # idempotent
        assert sum(isinstance(f, logfilter.RedactUris) for f in handler.filters) == 1
        logging.getLogger("httpx2").warning(
            'HTTP Request: %s %s "%s"', "GET", "http://93.184.216.34/a.pdf?X-Amz-Signature=s3cr3t", "HTTP/1.1 200"
        )
        logging.getLogger("docsum_parser").warning("fetching https://bob:hunter2@docs.example.com/x?token=t0k")
    finally:
        root.removeHandler(handler)
        root.removeHandler(keep)
    assert records == [
        'HTTP Request: GET http://93.184.216.34/a.pdf "HTTP/1.1 200"',
        "fetching https://docs.example.com/x",
    ]
    for secret in ("s3cr3t", "hunter2", "t0k", "bob"):
        assert not any(secret in r for r in records)


async def test_fetch_errors_show_the_uri_without_its_query() -> None:
    settings = ParserSettings(
        _env_file=None, intake_http_hosts=["127.0.0.3"], intake_http_ports=[9], intake_http_timeout_s=5
    )
    source = intake.parse_uri("http://user:pw@127.0.0.3:9/doc.txt?sig=s3cr3t", settings)
    assert isinstance(source, intake.HttpSource)
    with pytest.raises(ItemFailed) as failed:
        await sources.download(source, settings)
    assert "s3cr3t" not in str(failed.value) and "pw" not in str(failed.value)
    assert "http://127.0.0.3:9/doc.txt cannot be fetched" in str(failed.value)
