"""The Idempotency-Key of POST /v1/tasks, without IO: the header's syntax, the request's fingerprint, and
what a request whose key is stored gets."""

from __future__ import annotations

import re

import pytest

from docsum_gateway.idempotency import (
    KEY_PATTERN,
    MAX_KEY_CHARS,
    BadKey,
    Mismatch,
    Replay,
    SentFile,
    Stored,
    decide,
    fingerprint,
    parse_key,
)

REPORT = SentFile("report.pdf", "application/pdf", "a" * 64, 1000)
NOTES = SentFile("notes.txt", "text/plain", "b" * 64, 20)


@pytest.mark.parametrize(
    ("sent", "key"),
    [
        ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),  # the draft's form
        ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),  # Stripe's
        ('"a \\"quoted\\" \\\\ key"', 'a "quoted" \\ key'),  # RFC 8941 escapes
        ('  "padded"\t', "padded"),
    ],
)
def test_a_key_is_read_quoted_or_bare(sent: str, key: str) -> None:
    assert parse_key(sent) == key


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        ('""', "empty"),
        ("", "empty"),
        ('"open', "no closing quote"),
        ('"one" "two"', "nothing after"),
        ('"bad \\n escape"', "escapes only"),
        ('"tab\tinside"', "printable ASCII"),
        ("two words", "without spaces"),
        ("a,b", "commas"),
        ('"' + "k" * (MAX_KEY_CHARS + 1) + '"', f"at most {MAX_KEY_CHARS}"),
        ("clé", "printable ASCII"),
    ],
)
def test_a_header_that_is_no_key_says_why(sent: str, reason: str) -> None:
    with pytest.raises(BadKey, match=reason):
        parse_key(sent)


def test_the_same_request_has_the_same_fingerprint_whatever_the_order_of_its_fields() -> None:
    one = fingerprint([REPORT, NOTES], {"title": ["Q3"], "length": ["brief"], "deadline": ["6h"]})
    again = fingerprint([REPORT, NOTES], {"deadline": ["6h"], "length": ["brief"], "title": ["Q3"]})
    assert one == again
    assert len(one) == 64 and int(one, 16) >= 0


@pytest.mark.parametrize(
    ("files", "fields"),
    [
        ([NOTES, REPORT], {"title": ["Q3"]}),  # the documents' order is the task's
        ([REPORT], {"title": ["Q3"]}),  # a file fewer
        ([REPORT, SentFile("notes.txt", "text/plain", "c" * 64, 20)], {"title": ["Q3"]}),  # other bytes
        ([REPORT, SentFile("notes2.txt", "text/plain", "b" * 64, 20)], {"title": ["Q3"]}),  # another name
        ([REPORT, SentFile("notes.txt", "text/markdown", "b" * 64, 20)], {"title": ["Q3"]}),  # another type
        ([REPORT, NOTES], {"title": ["Q4"]}),  # another field value
        ([REPORT, NOTES], {"title": ["Q3"], "strict": ["true"]}),  # a field more
        ([REPORT, NOTES], {"title": ["Q3", "Q3"]}),  # a field twice
        ([REPORT, NOTES], {}),
    ],
)
def test_any_difference_in_files_or_fields_is_another_fingerprint(
    files: list[SentFile], fields: dict[str, list[str]]
) -> None:
    assert fingerprint(files, fields) != fingerprint([REPORT, NOTES], {"title": ["Q3"]})


def test_a_field_cannot_pass_for_a_file_or_another_field() -> None:
    """The encoding is structured (JSON), not concatenated: moving text between values changes it."""
    assert fingerprint([], {"title": ["ab"], "language": ["c"]}) != fingerprint(
        [], {"title": ["a"], "language": ["bc"]}
    )
    assert fingerprint([], {"title": ["a,b"]}) != fingerprint([], {"title": ["a", "b"]})


def test_a_stored_key_replays_its_answer_for_the_same_request_only() -> None:
    stored = Stored("f" * 64, 201, '{"task_id":"t1","status":"PROCESSING","documents":[]}')
    assert decide(stored, "f" * 64) == Replay(201, '{"task_id":"t1","status":"PROCESSING","documents":[]}')
    assert decide(stored, "e" * 64) == Mismatch()


@pytest.mark.parametrize(
    "sent",
    ['"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e", '"a \\"q\\" \\\\ b"', '"with space"', "a\\b", "~!#+-.:<"],
)
def test_the_declared_pattern_takes_what_the_gateway_takes(sent: str) -> None:
    assert re.fullmatch(KEY_PATTERN, sent) and parse_key(sent)


@pytest.mark.parametrize(
    "sent", ['""', "", '"open', '"one" "two"', '"bad \\n"', "two words", "a,b", "a;b", "clé", 'a"b']
)
def test_the_declared_pattern_refuses_what_the_gateway_refuses(sent: str) -> None:
    assert not re.fullmatch(KEY_PATTERN, sent)
    with pytest.raises(BadKey):
        parse_key(sent)
