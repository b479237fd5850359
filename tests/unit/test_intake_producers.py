"""Producers bound to the owners they may act for: a topic per producer (intake.<producer>), the owners
DOCSUM_INTAKE_PRODUCERS lets it name, document-submitted kept for the stored form, each owner's own file
roots and hosts (DOCSUM_INTAKE_OWNERS), and the ACLs that make the topic say who published."""

from __future__ import annotations

import base64
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import ValidationError

from docsum_parser import handlers as parser
from docsum_parser import intake, sources
from docsum_parser.settings import ParserSettings
from docsum_parser.stage import intake_carriers
from docsum_shared.errors import ItemFailed, Kind, Poison, classify
from docsum_shared.events import DocumentSubmitted, Topic
from docsum_shared.kafka import DLQ_SUFFIX, topic_partitions
from docsum_shared.taskrate import Admission

ROOT = Path(__file__).resolve().parents[2]
CRM = ParserSettings(_env_file=None, intake_producers={"crm": ["alice"]}, topic_prefix="p.")


def _submission(**fields: object) -> DocumentSubmitted:
    values: dict[str, object] = {
        "task_id": "crm:t1",
        "document_id": "crm:t1:1",
        "owner": "alice",
        "filename": "a.txt",
        "task_documents": 1,
        "content_base64": base64.b64encode(b"hello").decode(),
        **fields,
    }
    return DocumentSubmitted.model_validate(values, context={"submission_forms": "lenient"})


STORED = {"content_base64": None, "blob_sha256": "ab" * 32, "size_bytes": 5}


# --- which topic may carry what -------------------------------------------------------------------------


def test_a_producer_acts_only_for_its_owners() -> None:
    intake.check_source(_submission(), "crm", CRM)  # alice: crm's
    with pytest.raises(Poison, match="producer crm may not submit documents for owner 'bob'.*DOCSUM_INTAKE_PRODUCERS"):
        intake.check_source(_submission(owner="bob"), "crm", CRM)
    with pytest.raises(Poison, match="producer erp may not submit"):  # a topic no producer is configured for
        intake.check_source(_submission(), "erp", CRM)


def test_document_submitted_takes_the_stored_form_only() -> None:
    intake.check_source(_submission(**STORED), None, CRM)
    for foreign in ({}, {"content_base64": None, "source_uri": "file:///srv/a.txt"}, {"content_base64": None}):
        with pytest.raises(Poison, match=r"takes only the stored form.*publish.*on your own topic, intake\.<producer>"):
            intake.check_source(_submission(**foreign), None, CRM)


def test_an_intake_topic_takes_no_stored_form() -> None:
    with pytest.raises(Poison, match="the stored form .* is the pipeline's own"):
        intake.check_source(_submission(**STORED), "crm", CRM)


class _Untouched:
    """A repository the handler must not reach: a refused message writes and reads nothing."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the refused message reached the repository ({name})")


@pytest.mark.parametrize(
    ("producer", "fields"),
    [("crm", {"owner": "bob"}), (None, {}), ("crm", STORED)],
    ids=["another-owner", "foreign-form-on-document-submitted", "stored-form-on-intake"],
)
async def test_the_handler_refuses_before_touching_anything(producer: str | None, fields: dict[str, object]) -> None:
    with pytest.raises(Poison):
        await parser.handle(_submission(**fields), parser.Deps(_Untouched(), CRM, producer=producer))  # type: ignore[arg-type]


def test_the_parser_reads_each_producers_topic_knowing_the_producer() -> None:
    settings = ParserSettings(_env_file=None, topic_prefix="p.", intake_producers={"crm": ["alice"], "erp": ["bob"]})
    carriers = intake_carriers(parser.Deps(_Untouched(), settings))  # type: ignore[arg-type]
    assert set(carriers) == {"p.intake.crm", "p.intake.erp"}
    assert {topic for topic, _ in carriers.values()} == {Topic.DOCUMENT_SUBMITTED}
    assert {name: handler.deps.producer for name, (_, handler) in carriers.items()} == {  # type: ignore[attr-defined]
        "p.intake.crm": "crm",
        "p.intake.erp": "erp",
    }
    partitions = topic_partitions(settings)
    assert partitions["p.intake.crm"] == settings.topic_partitions and partitions["p.intake.crm" + DLQ_SUFFIX] == 1
    assert not [t for t in topic_partitions(ParserSettings(_env_file=None)) if "intake" in t]  # none by default


@pytest.mark.parametrize("name", ["crm.eu", "", "a b", "x" * 101, "crm/1"])
def test_a_producer_name_is_a_topic_name_of_its_own(name: str) -> None:
    with pytest.raises(ValidationError, match="DOCSUM_INTAKE_PRODUCERS|producer"):
        ParserSettings(_env_file=None, intake_producers={name: ["alice"]})


def test_settings_read_producers_and_owners_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "DOCSUM_INTAKE_PRODUCERS", '{"crm": ["alice", "bob"]}')
    monkeypatch.setitem(
        os.environ,
        "DOCSUM_INTAKE_OWNERS",
        '{"alice": {"file_roots": ["/srv/alice"], "http_hosts": ["files.example.com"]}}',
    )
    monkeypatch.setitem(os.environ, "DOCSUM_INTAKE_FILE_ROOTS", '["/srv/shared"]')
    settings = ParserSettings(_env_file=None)
    assert settings.intake_producers == {"crm": ["alice", "bob"]}
    alice, bob = settings.intake_access("alice"), settings.intake_access("bob")
    assert (alice.file_roots, alice.http_hosts, alice.http_ports) == (["/srv/alice"], ["files.example.com"], [80, 443])
    assert (bob.file_roots, bob.http_hosts) == (["/srv/shared"], [])  # not listed: the global lists


# --- each owner's own places ------------------------------------------------------------------------------


@pytest.fixture
def two_roots(tmp_path: Path) -> tuple[Path, Path, ParserSettings]:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for root, text in ((alice, b"alice's notes"), (bob, b"bob's secrets")):
        root.mkdir()
        (root / "doc.txt").write_bytes(text)
    settings = ParserSettings(
        _env_file=None,
        intake_producers={"crm": ["alice", "bob"]},
        intake_owners={"alice": {"file_roots": [str(alice)]}, "bob": {"file_roots": [str(bob)]}},
    )
    return alice, bob, settings


async def test_an_owner_reads_only_under_its_own_roots(two_roots: tuple[Path, Path, ParserSettings]) -> None:
    alice, bob, settings = two_roots
    own = _submission(content_base64=None, source_uri=(alice / "doc.txt").as_uri())
    assert await sources.content(own, settings) == b"alice's notes"
    theirs = _submission(content_base64=None, source_uri=(bob / "doc.txt").as_uri())
    with pytest.raises(ItemFailed, match=r"is not under a directory DOCSUM_INTAKE_OWNERS \(alice: file_roots\) allows"):
        await sources.content(theirs, settings)
    assert await sources.content(_submission(owner="bob", content_base64=None, source_uri=theirs.source_uri), settings)


async def test_an_owner_with_an_entry_gets_exactly_it(tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_bytes(b"shared")
    settings = ParserSettings(
        _env_file=None,
        intake_file_roots=[str(tmp_path)],
        intake_http_hosts=["*"],
        intake_owners={"alice": {"http_hosts": ["files.example.com"], "http_ports": [8443]}},
    )
    shared_file = _submission(content_base64=None, source_uri=(tmp_path / "doc.txt").as_uri())
    with pytest.raises(ItemFailed, match=r"no directory is configured \(DOCSUM_INTAKE_OWNERS \(alice: file_roots\)\)"):
        await sources.content(shared_file, settings)  # the global root is not alice's
    assert await sources.content(
        _submission(owner="bob", content_base64=None, source_uri=shared_file.source_uri), settings
    )
    access = settings.intake_access("alice")
    with pytest.raises(ItemFailed, match=r"host other.example.com is not allowed: list it in DOCSUM_INTAKE_OWNERS"):
        intake.parse_uri("https://other.example.com/a.pdf", settings, access)
    with pytest.raises(
        ItemFailed, match=r"port 443 is not allowed: list it in DOCSUM_INTAKE_OWNERS \(alice: http_ports\)"
    ):
        intake.parse_uri("https://files.example.com/a.pdf", settings, access)
    assert intake.parse_uri("https://files.example.com:8443/a.pdf", settings, access)


async def _read(owner: str, path: Path, settings: ParserSettings) -> bytes:
    return await sources.content(_submission(owner=owner, content_base64=None, source_uri=path.as_uri()), settings)


async def test_an_owner_without_an_entry_never_reads_inside_another_owners_root(tmp_path: Path) -> None:
    """The global root holds alice's own root (and a symlink into it): bob, who has no entry, reads the
    global root's files but none of alice's, however he names them; alice reads hers."""
    srv = tmp_path / "srv"
    (srv / "alice" / "deep").mkdir(parents=True)
    (srv / "alice" / "deep" / "doc.txt").write_bytes(b"alice's contract")
    (srv / "public.txt").write_bytes(b"for anyone")
    (srv / "link-to-alice").symlink_to(srv / "alice")
    settings = ParserSettings(
        _env_file=None,
        intake_file_roots=[str(srv)],
        intake_owners={"alice": {"file_roots": [str(srv / "alice")]}},
    )
    assert await _read("bob", srv / "public.txt", settings) == b"for anyone"
    for named in (srv / "alice" / "deep" / "doc.txt", srv / "link-to-alice" / "deep" / "doc.txt", srv / "alice"):
        with pytest.raises(ItemFailed, match="in a directory DOCSUM_INTAKE_OWNERS gives to another owner"):
            await _read("bob", named, settings)
    assert await _read("alice", srv / "alice" / "deep" / "doc.txt", settings) == b"alice's contract"
    with pytest.raises(ItemFailed, match=r"not under a directory DOCSUM_INTAKE_OWNERS \(alice: file_roots\)"):
        await _read("alice", srv / "public.txt", settings)  # alice has exactly her entry


async def test_the_deepest_root_says_whose_a_file_is(tmp_path: Path) -> None:
    """Between owners with entries too: carol's wide root does not open dave's root inside it, and a
    root both are given is read for both."""
    (tmp_path / "dave").mkdir()
    (tmp_path / "dave" / "doc.txt").write_bytes(b"dave's")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "doc.txt").write_bytes(b"both")
    settings = ParserSettings(
        _env_file=None,
        intake_owners={
            "carol": {"file_roots": [str(tmp_path)]},
            "dave": {"file_roots": [str(tmp_path / "dave"), str(tmp_path / "shared")]},
            "erin": {"file_roots": [str(tmp_path / "shared")]},
        },
    )
    with pytest.raises(ItemFailed, match="gives to another owner"):
        await _read("carol", tmp_path / "dave" / "doc.txt", settings)
    assert await _read("dave", tmp_path / "dave" / "doc.txt", settings) == b"dave's"
    with pytest.raises(ItemFailed, match="gives to another owner"):
        await _read("carol", tmp_path / "shared" / "doc.txt", settings)  # dave's and erin's, not carol's
    for owner in ("dave", "erin"):
        assert await _read(owner, tmp_path / "shared" / "doc.txt", settings) == b"both"


# --- the task rate ---------------------------------------------------------------------------------------


def test_a_new_task_over_the_owners_rate_waits_its_turn() -> None:
    intake.check_admission(_submission(), Admission(True, 1.0, 0), CRM)
    with pytest.raises(intake.TaskRateExceeded, match="over 60 new tasks a minute.*waits 7 s") as refused:
        intake.check_admission(_submission(), Admission(False, 1.0, 7), CRM)
    assert classify(refused.value) is Kind.RATE_LIMITED  # the consumer waits and retries it: never lost
    assert refused.value.retry_after == 7


def test_the_gateway_and_the_parser_share_one_rate_decision() -> None:
    from docsum_gateway import policy
    from docsum_shared import taskrate

    assert policy.admit_task is taskrate.admit_task


# --- the ACLs ---------------------------------------------------------------------------------------------


def _acls() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kafka_acls", ROOT / "scripts" / "kafka_acls.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_acls"] = module
    spec.loader.exec_module(module)
    return module


def test_each_producer_may_write_its_own_topic_and_nothing_else() -> None:
    acls = _acls()
    principals = acls.intake_principals(
        CRM.model_copy(update={"intake_producers": {"crm": [], "erp": []}}), ["crm=ingest"]
    )
    assert principals == {"crm": "ingest", "erp": "erp"}
    found = [str(g) for g in acls.grants(CRM, "docsum", principals, "results", "")]
    assert "User:ingest: WRITE on TOPIC LITERAL 'p.intake.crm'" in found
    assert "User:erp: WRITE on TOPIC LITERAL 'p.intake.erp'" in found
    assert [g for g in found if g.startswith(("User:ingest", "User:erp"))] == [
        "User:ingest: WRITE on TOPIC LITERAL 'p.intake.crm'",
        "User:erp: WRITE on TOPIC LITERAL 'p.intake.erp'",
    ]  # no producer writes document-submitted, nor reads anything
    with pytest.raises(SystemExit, match="PRODUCER=PRINCIPAL"):
        acls.intake_principals(CRM, ["crm"])
