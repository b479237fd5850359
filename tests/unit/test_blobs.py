"""What the blob store decides without a server: which setting names which store, and which listed objects
the sweep may remove."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from docsum_parser.settings import ParserSettings
from docsum_parser.sources import read_s3
from docsum_shared.blobs import (
    ObjectStore,
    ObjectStoreUnavailable,
    S3Connection,
    S3Place,
    _parts,
    orphans,
    parse_blob_store,
)
from docsum_shared.errors import Kind, classify
from docsum_shared.settings import BlobSettings, bad_setting

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_the_setting_names_postgresql_or_a_bucket_and_prefix() -> None:
    assert parse_blob_store("") is None
    assert parse_blob_store("postgresql") is None
    assert parse_blob_store("s3://docs/uploads/") == S3Place("docs", "uploads")
    assert parse_blob_store("s3://docs") == S3Place("docs", "")
    for bad in ("s3:/docs", "file:///tmp", "s3://Docs/x", "s3://a/x"):
        with pytest.raises(ValueError):
            parse_blob_store(bad)


def test_a_bad_store_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSUM_BLOB_STORE", "s3:/docs")
    with pytest.raises(ValidationError) as refused:
        BlobSettings()
    assert bad_setting(BlobSettings, refused.value)[0] == "DOCSUM_BLOB_STORE"
    assert "s3://bucket/prefix" in bad_setting(BlobSettings, refused.value)[1]


def test_only_old_objects_no_row_names_are_orphans() -> None:
    cutoff = NOW - timedelta(hours=1)
    page = [
        ("a" * 64, cutoff - timedelta(seconds=1)),  # old, no row: an orphan
        ("b" * 64, cutoff - timedelta(days=3)),  # old, a row names it
        ("c" * 64, cutoff + timedelta(seconds=1)),  # no row yet: its writer may be about to insert it
    ]
    assert orphans(page, {"b" * 64}, cutoff) == ["a" * 64]


@pytest.mark.asyncio
async def test_large_files_go_in_parts_of_a_bounded_size() -> None:
    async def blocks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"x" * 3

    parts = [(n, len(body)) async for n, body in _parts(blocks(), 4)]
    assert parts == [(1, 4), (2, 4), (3, 4), (4, 3)]


@pytest.mark.asyncio
async def test_an_object_store_away_is_a_passing_failure_not_the_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """No server where AWS_ENDPOINT_URL points (what an outage looks like to the client): after the SDK's own
    retries the read is infrastructure that comes back (retried by the consumer, never dead-lettered), and
    a document published as s3://... waits for it instead of failing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "docsum")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "docsum-secret")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the SDK's retries of a refused connection: not the point here
    connection = S3Connection()
    try:
        with pytest.raises(ObjectStoreUnavailable) as away:
            await ObjectStore(S3Place("docs", "blobs"), connection).get("s3://docs/blobs/" + "a" * 64)
        assert classify(away.value) is Kind.RETRIABLE
        settings = ParserSettings(_env_file=None)  # type: ignore[call-arg]
        with pytest.raises(ObjectStoreUnavailable):
            await read_s3(S3Place("docs", "in/a.pdf"), settings, connection)
    finally:
        await connection.close()
