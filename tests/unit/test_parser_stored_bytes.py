"""The stored form of document-submitted reads only its own document's bytes.

Blobs are stored once by sha256 for every owner: a message that names a hash other than its row's must
never make the parser read those bytes, and must be refused the same way whether or not they exist.
"""

from __future__ import annotations

import hashlib

import pytest

from docsum_parser import handlers as parser
from docsum_parser.policy import StoredDocument
from docsum_parser.settings import ParserSettings
from docsum_shared.errors import Poison
from docsum_shared.events import DocumentParsed, DocumentSubmitted
from docsum_shared.states import DocumentStatus
from tests.fakes.parser import FakeParserRepository

SETTINGS = ParserSettings(_env_file=None)
MEMO = b"Another owner's private memo, stored by the gateway."
MEMO_SHA = hashlib.sha256(MEMO).hexdigest()
OWN = b"The document's own text."
OWN_SHA = hashlib.sha256(OWN).hexdigest()
MADE_UP = hashlib.sha256(b"no such bytes").hexdigest()


def stored_form(sha256: str) -> DocumentSubmitted:
    return DocumentSubmitted(
        task_id="t", document_id="d", owner="eve", filename="memo.txt", blob_sha256=sha256, size_bytes=len(MEMO)
    )


def repo_for(row_sha256: str | None) -> FakeParserRepository:
    doc = StoredDocument(DocumentStatus.PENDING, None, None, None, owner="eve", blob_sha256=row_sha256, task_id="t")
    repo = FakeParserRepository.holding("d", doc)
    repo.state.blobs.update({MEMO_SHA: MEMO, OWN_SHA: OWN})  # another owner's memo is stored too
    return repo


@pytest.mark.parametrize("row_sha256", [None, OWN_SHA], ids=["row-without-bytes", "row-with-its-own-bytes"])
async def test_a_hash_that_is_not_the_rows_is_refused_alike_whether_or_not_it_is_stored(row_sha256: str | None) -> None:
    refusals = []
    for guess in (MEMO_SHA, MADE_UP):
        repo = repo_for(row_sha256)
        with pytest.raises(Poison) as refused:
            await parser.handle(stored_form(guess), parser.Deps(repo, SETTINGS))
        assert repo.bytes_read == 0 and repo.texts == {}  # nothing looked up, nothing written
        assert repo.documents["d"].status is DocumentStatus.PENDING and repo.documents["d"].error is None
        refusals.append(str(refused.value))
    assert refusals[0] == refusals[1]  # a stored hash and a made-up one read the same
    assert MEMO_SHA not in refusals[0] and "not the hash of this document's stored bytes" in refusals[0]


async def test_the_stored_form_of_the_rows_own_bytes_is_parsed_from_them() -> None:
    repo = repo_for(OWN_SHA)
    [out] = await parser.handle(stored_form(OWN_SHA), parser.Deps(repo, SETTINGS))
    assert isinstance(out, DocumentParsed)
    assert repo.texts == {"d": OWN.decode()}
