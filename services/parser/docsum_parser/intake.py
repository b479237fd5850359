"""Documents other systems publish onto document-submitted (inline or by URI): the parser's decisions, no IO.

A message whose ids, owner or task do not add up is refused (`Poison`: dead-lettered with the reason,
no row written). A message that is fine but whose bytes cannot be had — bad base64, over a cap, a URI
that is not allowed or cannot be fetched, no content at all — fails its document (`ItemFailed`): the
task and document rows are written, the document FAILED with the reason, so its submitter sees why.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from docsum_shared.blobs import S3Place, parse_s3_uri
from docsum_shared.errors import ItemFailed, Poison, RateLimited
from docsum_shared.events import ID_PATTERN, DocumentSubmitted, intake_topic
from docsum_shared.intake_access import OwnerAccess
from docsum_shared.options import deadline_error
from docsum_shared.outbound import (  # noqa: F401 - the rules of where an http(s):// URI may lead, shared
    MAX_URI,
    NOT_PUBLIC,
    Address,
    HttpSource,
    address_error,
    embedded_ipv4,
    host_allowed,
    host_error,
    http_source,
    not_public,
    split_uri,
    uri_error,
)
from docsum_shared.taskrate import Admission

from .settings import ParserSettings
from .uris import shown

_ID = re.compile(ID_PATTERN)
MAX_FILENAME = 255
MAX_CONTENT_TYPE = 255


@dataclass(frozen=True)
class StoredTask:
    """A task as intake sees it: whose it is, how many documents it expects, what it holds already."""

    owner: str
    expected_documents: int | None  # None: a task the gateway made (its documents are all present)
    documents: int
    total_bytes: int


@dataclass(frozen=True)
class ExistingDocument:
    """The row a message's document_id names, whichever task it is in."""

    task_id: str
    owner: str
    needs_bytes: bool  # not parsed yet and no bytes stored (it failed before; `docsum retry` reset it)


# --- refused: the dead-letter topic ---------------------------------------------------------------


def check_source(event: DocumentSubmitted, producer: str | None, settings: ParserSettings) -> None:
    """Whether the topic the message came on may carry it. document-submitted (`producer` None) is the
    pipeline's own: the stored form only, as the gateway and the re-drives publish it. intake.<producer>
    carries that producer's documents (inline or by URI), for the owners DOCSUM_INTAKE_PRODUCERS lets it
    act for: Kafka's ACLs decide who writes the topic, so the topic says who the producer is."""
    if producer is None:
        if event.form != "stored":
            raise Poison(
                "document-submitted takes only the stored form, which the pipeline publishes itself: publish"
                f" a document inline or by URI on your own topic, {intake_topic('<producer>')} (with the"
                " deployment's DOCSUM_TOPIC_PREFIX), which DOCSUM_INTAKE_PRODUCERS configures"
            )
        return
    if event.blob_sha256 is not None or event.size_bytes is not None:
        raise Poison(
            f"{intake_topic(producer)} takes documents inline (content_base64) or by URI (source_uri): the"
            " stored form (blob_sha256) is the pipeline's own"
        )
    if event.owner not in settings.intake_producers.get(producer, ()):
        raise Poison(
            f"producer {producer} may not submit documents for owner {event.owner[:80]!r}: its owners are"
            " listed in DOCSUM_INTAKE_PRODUCERS"
        )


def check_message(event: DocumentSubmitted, settings: ParserSettings) -> None:
    """The ids, the owner and the task's size in documents; Poison naming the first that is wrong."""
    for name in ("task_id", "document_id", "owner"):
        value = getattr(event, name)
        if not _ID.match(value):
            raise Poison(f"{name} {value[:80]!r} is not 1-64 characters of A-Z a-z 0-9 . _ : -")
    if not event.filename or len(event.filename) > MAX_FILENAME or "\x00" in event.filename:
        raise Poison(f"filename must be 1-{MAX_FILENAME} characters without NUL")
    if event.content_type is not None and (len(event.content_type) > MAX_CONTENT_TYPE or "\x00" in event.content_type):
        raise Poison(f"content_type must be at most {MAX_CONTENT_TYPE} characters without NUL")
    if event.title is not None and "\x00" in event.title:
        raise Poison("title must not contain NUL")
    if event.options is not None and event.options.language is not None and "\x00" in event.options.language:
        raise Poison("options.language must not contain NUL")
    if event.document_key is not None and "\x00" in event.document_key:
        raise Poison("document_key must not contain NUL")
    if event.task_documents is None:
        raise Poison("task_documents is missing: say how many documents the task has, in each of its messages")
    if event.task_documents > settings.max_files_per_task:
        raise Poison(
            f"task_documents is {event.task_documents}, over the limit of {settings.max_files_per_task}"
            " documents per task (DOCSUM_MAX_FILES_PER_TASK)"
        )


def check_document(event: DocumentSubmitted, existing: ExistingDocument | None) -> None:
    """A document id is another task's (or owner's): refused, and never joined to this task."""
    if existing is not None and (existing.task_id != event.task_id or existing.owner != event.owner):
        raise Poison(f"document {event.document_id} already exists under another task or owner")


def check_task(event: DocumentSubmitted, task: StoredTask | None, *, new_document: bool) -> None:
    """The task the message names, as stored (None: not yet, the message creates it). The first message
    of a task decides its owner and its size; one that disagrees is refused."""
    if task is None:
        return
    if task.owner != event.owner:
        raise Poison(f"task {event.task_id} belongs to another owner")
    if task.expected_documents is None:
        raise Poison(f"task {event.task_id} was submitted through the gateway and takes no documents from Kafka")
    if task.expected_documents != event.task_documents:
        raise Poison(
            f"task_documents is {event.task_documents}, but task {event.task_id} was first published with"
            f" {task.expected_documents}: every message of a task gives the same number"
        )
    if new_document and task.documents >= task.expected_documents:
        raise Poison(f"task {event.task_id} already has its {task.expected_documents} documents")


def check_previous(event: DocumentSubmitted, previous_owner: str | None) -> None:
    """The task the message's options name as previous (`options.previous_task`), of the owner
    `previous_owner` in this deployment (None: no such task there): its owner's own, or refused. Said the same
    way for a task of another owner as for none, so a producer learns nothing of other owners' tasks."""
    previous = event.options.previous_task if event.options is not None else None
    if previous is not None and previous_owner != event.owner:
        raise Poison(
            f"options.previous_task {previous} is no task of owner {event.owner}: name one of its own tasks, or none"
        )


def check_deadline(event: DocumentSubmitted, now: datetime) -> None:
    """The deadline of a task this message creates, by the gateway's rule: after `now` and at most
    DEADLINE_HORIZON ahead (one in year 1, or 9999, would otherwise reach the batch driver). Judged once,
    by the message that creates the task: its other messages' options are not read, and a replay finds
    the task stored."""
    deadline = event.options.deadline if event.options is not None else None
    if deadline is not None and (problem := deadline_error(deadline, now)) is not None:
        raise Poison(f"options.deadline {deadline.isoformat()} {problem}, as an ISO 8601 instant with its zone")


# --- waits: retried later, through the consumer's retry path ------------------------------------------


class TaskRateExceeded(RateLimited):
    """The owner has created its DOCSUM_TASKS_PER_MINUTE tasks: the message creating another waits (the
    consumer retries it after `retry_after` seconds) instead of being refused or lost."""


def check_admission(event: DocumentSubmitted, admission: Admission, settings: ParserSettings) -> None:
    """A new task of a producer counts against its owner's task rate, as one made through the gateway does."""
    if not admission.allowed:
        raise TaskRateExceeded(
            f"owner {event.owner} is over {settings.tasks_per_minute} new tasks a minute (DOCSUM_TASKS_PER_MINUTE):"
            f" task {event.task_id} waits {admission.retry_after_s} s",
            retry_after=admission.retry_after_s,
        )


# --- failed: the document FAILED with the reason ----------------------------------------------------


def form_error(event: DocumentSubmitted) -> str | None:
    """Why the message gives no bytes to take (None: it gives exactly one kind)."""
    if event.content_base64 is not None and event.source_uri is not None:
        return "the message gives both content_base64 and source_uri: give exactly one"
    if event.content_base64 is None and event.source_uri is None:
        return "the message gives no content: put the bytes in content_base64 (base64) or name them by source_uri"
    return None


def inline_cap(settings: ParserSettings) -> tuple[int, str]:
    """The most decoded bytes an inline document may have, and the setting that says so."""
    if settings.max_file_bytes < settings.intake_inline_max_bytes:
        return settings.max_file_bytes, "DOCSUM_MAX_FILE_BYTES"
    return settings.intake_inline_max_bytes, "DOCSUM_INTAKE_INLINE_MAX_BYTES"


def decode_inline(content: str, settings: ParserSettings) -> bytes:
    """The bytes of `content_base64` (standard alphabet, padded; line breaks allowed)."""
    cap, setting = inline_cap(settings)
    compact = "".join(content.split())
    if len(compact) // 4 * 3 > cap + 2:  # over the cap by its length alone: not decoded at all
        raise ItemFailed(_over(f"about {len(compact) // 4 * 3:,}", cap, setting) + _LARGER)
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ItemFailed(
            f"content_base64 is not valid base64 ({exc}): encode the file's bytes with the standard alphabet"
            " (A-Z a-z 0-9 + /) and = padding"
        ) from None
    if len(data) > cap:
        raise ItemFailed(_over(f"{len(data):,}", cap, setting) + _LARGER)
    return data


_LARGER = "; publish a larger file by source_uri instead"


def _over(size: str, cap: int, setting: str) -> str:
    return f"the document has {size} bytes, over the limit of {cap:,} ({setting})"


def task_bytes_error(total_bytes: int, size: int, settings: ParserSettings) -> str | None:
    """A document that would take its task over the bytes one task may hold."""
    if total_bytes + size <= settings.max_task_bytes:
        return None
    return (
        f"the task's documents would have {total_bytes + size:,} bytes, over the limit of"
        f" {settings.max_task_bytes:,} (DOCSUM_MAX_TASK_BYTES)"
    )


# --- where a URI may lead ---------------------------------------------------------------------------


def global_access(settings: ParserSettings) -> OwnerAccess:
    """The global lists (DOCSUM_INTAKE_FILE_ROOTS, _HTTP_HOSTS, _HTTP_PORTS): an owner's without an entry
    of its own in DOCSUM_INTAKE_OWNERS."""
    return OwnerAccess.of(None, None, settings)


@dataclass(frozen=True)
class FileSource:
    path: str  # absolute, as the URI names it (not resolved yet)


def parse_uri(
    uri: str, settings: ParserSettings, access: OwnerAccess | None = None
) -> FileSource | HttpSource | S3Place:
    """What `source_uri` names, if the owner's access (default: the global lists) allows that kind of
    place at all; ItemFailed otherwise."""
    access = access or global_access(settings)
    parts, port = split_uri(uri)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ItemFailed(f"a file:// URI names a file of this machine: file:///path, not a host ({parts.netloc})")
        path = unquote(parts.path)
        if not path.startswith("/") or "\x00" in path:
            raise ItemFailed("a file:// URI needs an absolute path: file:///path/to/file")
        if not access.file_roots:
            raise ItemFailed(
                f"file:// URIs are not allowed here: no directory is configured ({access.setting('file_roots')})"
            )
        return FileSource(path)
    if scheme in ("http", "https"):
        return http_source(uri, parts.hostname or "", scheme, port, access)
    if scheme == "s3":
        try:
            place = parse_s3_uri(uri)
        except ValueError as exc:
            raise ItemFailed(f"source_uri is not a valid s3:// URI: {exc}") from None
        if not place.key or place.key.endswith("/"):
            raise ItemFailed(f"{uri[:200]} names no object: s3://bucket/key")
        if not access.s3_places:
            raise ItemFailed(
                f"s3:// URIs are not allowed here: no bucket is configured ({access.setting('s3_places')})"
            )
        if not s3_allowed(place, access.s3_places):
            raise ItemFailed(
                f"s3://{place.bucket}/{place.key[:200]} is not under a bucket and prefix"
                f" {access.setting('s3_places')} allows"
            )
        return place
    raise ItemFailed(
        f"source_uri scheme {scheme or '(none)'!r} is not supported: use file://, http://, https:// or s3://"
    )


def s3_allowed(place: S3Place, places: list[str]) -> bool:
    """The object is in one of the listed buckets, under its prefix (whole path segments: s3://b/in allows
    s3://b/in/x, not s3://b/inbox)."""
    for listed in places:
        allowed = parse_s3_uri(listed)
        prefix = allowed.key.strip("/")
        if allowed.bucket == place.bucket and (not prefix or place.key.startswith(prefix + "/")):
            return True
    return False


def under_roots(resolved: str, roots: list[str]) -> bool:
    """`resolved` (a path with its symlinks and .. resolved) is one of the roots or inside one (the roots
    resolved likewise)."""
    return _closest(resolved, roots) >= 0


def _closest(resolved: str, roots: list[str]) -> int:
    """How deep the deepest of `roots` that holds `resolved` is (in path parts); -1: none holds it."""
    path = PurePosixPath(resolved)
    held = (PurePosixPath(root) for root in roots)
    return max((len(root.parts) for root in held if path == root or path.is_relative_to(root)), default=-1)


def place_error(path: str, resolved: str, roots: list[str], other_roots: list[str], setting: str) -> str | None:
    """Why the file `path` (`resolved`: its symlinks and .. resolved) is not read for this owner (None: it
    is): it is under none of its `roots`, or a root DOCSUM_INTAKE_OWNERS gives another owner (`other_roots`)
    holds it more closely. The deepest root holding a file says whose it is: a root given to one owner
    inside a wider one (a global /srv around alice's /srv/alice) is read for that owner alone, and a root
    two owners are both given is read for both."""
    if not under_roots(resolved, roots):
        return f"{path} is not under a directory {setting} allows"
    if _closest(resolved, other_roots) > _closest(resolved, roots):
        return f"{path} is in a directory DOCSUM_INTAKE_OWNERS gives to another owner: it is not read for this one"
    return None


def redirect_error(source: HttpSource, location: str) -> str | None:
    """A redirect is followed only to a URI that can be requested, on the same scheme, host and port."""
    if (problem := uri_error(location, "the server's redirect (Location)")) is not None:
        return f"{problem}: it is not followed"
    try:
        target = urlsplit(location)
        port = target.port
    except ValueError:
        return f"the server redirected to an invalid URI ({shown(location)})"
    scheme = target.scheme.lower()
    if not scheme and not target.netloc:
        return None  # relative: the same origin
    default = 443 if scheme == "https" else 80
    if (scheme, (target.hostname or "").lower(), port or default) != (source.scheme, source.host, source.port):
        return (
            f"the server redirected to another place ({shown(location)}); redirects are followed only within"
            " the same scheme, host and port: publish the final URI"
        )
    return None
