"""Lone surrogates: a PDF's ToUnicode map can yield one (pypdf decodes with "surrogatepass"), and neither
UTF-8 nor PostgreSQL can hold it. Every format's text ends clean, and a text the database still refuses
fails its document with a message instead of leaving it PENDING."""

from __future__ import annotations

import asyncpg
import pytest

from docsum_parser import handlers as parser
from docsum_parser.extract import extract_text
from docsum_parser.normalize import normalize
from docsum_parser.policy import StoredDocument, TextRefused
from docsum_parser.settings import ParserSettings
from docsum_shared.events import DocumentMerged, DocumentOutcome, DocumentSubmitted
from docsum_shared.levels import SizeLevel
from docsum_shared.positions import Positions
from docsum_shared.states import DocumentStatus
from docsum_shared.text import without_lone_surrogates
from tests.fakes.parser import FakeParserRepository
from tests.hostile import pdf_with_lone_surrogate


def test_a_pdf_mapping_a_glyph_to_a_lone_surrogate_gives_text_utf8_can_hold() -> None:
    text = extract_text(pdf_with_lone_surrogate(), "lone.pdf").text
    assert "\ufffd" in text and "the words go on" in text
    text.encode("utf-8")  # raises on a surrogate


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a\ud800b", "a\ufffdb"),  # a lone high surrogate
        ("\udc80 end", "\ufffd end"),  # a lone low one (what surrogateescape leaves for a stray byte)
        ("x\ud83d\ude00y", "x\U0001f600y"),  # a pair in a row is the character it encodes
        ("\ude00\ud83d", "\ufffd\ufffd"),  # the wrong order is no pair
        ("plain 中文", "plain 中文"),
    ],
)
def test_surrogates_are_resolved_by_the_normalization_every_format_goes_through(given: str, expected: str) -> None:
    assert without_lone_surrogates(given) == expected
    assert normalize(given) == expected


class RefusingDocuments(FakeParserRepository):
    async def store_text(self, document_id: str, text: str, size_level: SizeLevel, positions: Positions) -> None:
        raise TextRefused("UntranslatableCharacterError")


async def test_a_text_the_database_refuses_fails_its_document_with_what_to_do() -> None:
    event = DocumentSubmitted(
        task_id="t", document_id="d", owner="o", filename="odd.txt", blob_sha256="sha", size_bytes=5
    )
    doc = StoredDocument(DocumentStatus.PENDING, None, None, None, blob_sha256="sha")
    repo = RefusingDocuments.holding("d", doc, b"Some text that the database will not take.")
    [out] = await parser.handle(event, parser.Deps(repo, ParserSettings(_env_file=None)))
    assert isinstance(out, DocumentMerged) and out.outcome is DocumentOutcome.FAILED
    error = repo.documents["d"].error or ""
    assert repo.documents["d"].status is DocumentStatus.FAILED
    assert "the text extracted from odd.txt cannot be stored" in error and "UntranslatableCharacterError" in error


def test_asyncpgs_refusal_to_encode_an_argument_is_a_value_error() -> None:
    """The repository takes asyncpg's client-side DataError as a refused text by its ValueError base;
    were that to change, a lone surrogate would be retried as a connection fault again."""
    assert issubclass(asyncpg.exceptions._base.DataError, ValueError)
