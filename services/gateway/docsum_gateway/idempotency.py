"""Idempotency-Key on `POST /v1/tasks` (draft-ietf-httpapi-idempotency-key-header-07): what a key is, the
fingerprint of a request, and what a request whose key is stored already gets. No IO here: the repository
looks the key up and stores it with the task, in one transaction."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

HEADER = "Idempotency-Key"
# Stripe's name for the header that marks an answer as the stored answer of an earlier request.
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_CHARS = 255
# What parse_key takes, as the OpenAPI schema declares it (a regular expression both Python and JSON Schema
# read alike): an RFC 8941 String, or a bare token of printable ASCII without quotes, commas or semicolons.
KEY_PATTERN = r'^(?:"(?:[ !#-\[\]-~]|\\["\\])+"|[!#-+\-.-:<-~]+)$'
# What a request whose key another request is storing now is told to wait: storing a task takes as long
# as copying its files into PostgreSQL, a second or two for the largest upload.
IN_FLIGHT_RETRY_AFTER_S = 2


class BadKey(ValueError):
    """The header is not a key: the reason, in a sentence."""


def parse_key(value: str) -> str:
    """The key a header value carries. The draft makes it a Structured Field String (RFC 8941 §3.3.3:
    `"8e03978e-…"`, printable ASCII, `\\"` and `\\\\` escaped); a bare token, as Stripe's clients send, is
    taken as it is. 1 to MAX_KEY_CHARS characters either way."""
    value = value.strip(" \t")
    if value.startswith('"'):
        key = _sf_string(value)
    else:
        if any(not ("!" <= c <= "~") or c in '",;' for c in value):
            raise BadKey(
                'a bare key is printable ASCII without spaces, quotes, commas or semicolons; or send it quoted: "<key>"'
            )
        key = value
    if not key:
        raise BadKey("the key is empty")
    if len(key) > MAX_KEY_CHARS:
        raise BadKey(f"the key has {len(key)} characters; at most {MAX_KEY_CHARS}")
    return key


def _sf_string(value: str) -> str:
    out: list[str] = []
    escaped = False
    for i, c in enumerate(value[1:], start=1):
        if escaped:
            if c not in '"\\':
                raise BadKey('in a quoted key, a backslash escapes only " and \\')
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            if value[i + 1 :]:
                raise BadKey("one key, and nothing after its closing quote")
            return "".join(out)
        elif not (" " <= c <= "~"):
            raise BadKey("a quoted key is printable ASCII")
        else:
            out.append(c)
    raise BadKey("the quoted key has no closing quote")


@dataclass(frozen=True)
class SentFile:
    """What of an uploaded file the fingerprint covers: its bytes (by hash) and how it was named."""

    filename: str | None
    content_type: str | None
    sha256: str
    size: int


def fingerprint(files: Sequence[SentFile], fields: Mapping[str, Sequence[str]]) -> str:
    """The request, as the key stands for it: each file's hash, size, name and type in order, and every
    text field as sent (a deadline of "6h" is the same text on a retry, though not the same instant).
    Fields are taken in name order: multipart does not make their order mean anything."""
    canonical = {
        "files": [[f.sha256, f.size, f.filename, f.content_type] for f in files],
        "fields": {name: list(fields[name]) for name in sorted(fields)},
    }
    encoded = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Stored:
    """A key's row: the request it was first used for, and the answer that request got."""

    fingerprint: str
    status_code: int
    body: str  # the JSON text, as it was sent


@dataclass(frozen=True)
class Replay:
    status_code: int
    body: str


@dataclass(frozen=True)
class Mismatch:
    """The key was used for another request."""


@dataclass(frozen=True)
class InFlight:
    """Another request with the key is being stored now."""


def decide(stored: Stored, sent: str) -> Replay | Mismatch:
    """A request whose key is stored: the first answer again if it is the same request, else a refusal."""
    if stored.fingerprint != sent:
        return Mismatch()
    return Replay(stored.status_code, stored.body)
