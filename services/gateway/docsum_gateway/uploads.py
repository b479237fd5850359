"""Streaming multipart uploads: limits enforced as the bytes arrive, files spooled and hashed on the way.

`read_upload` feeds the request body, block by block as the server receives it, to python-multipart's
streaming parser. Each file goes to a `Spool` (its first `spool_bytes` in memory, the rest in an
anonymous temporary file) and through sha256 as it streams; nothing holds a whole file. The limits —
bytes per file, bytes of all files, number of files, the body as a whole, form fields — are checked
on every block, so a request over any of them is answered 413 as soon as it crosses it, after reading
about the limit and never the rest of the body.

Starlette's own parser (`request.form()`) limits the number of files and fields and the size of a text
field, but not the size of a file, and it spools 1 MiB of each file in memory: hence this module.

What all uploads of the process hold at once is capped too (`SpoolBudget`): each request books its file
bytes as they arrive, and gives them back when its files are closed. Beyond the process's budget the answer
is 503, beyond an owner's share 429, both with Retry-After: a burst of large uploads waits instead of
filling the disk they spool to. What a request declares (Content-Length) books nothing: four silent
requests declaring 256 MiB each would otherwise hold the whole budget while sending nothing.

A body that stops arriving is dropped: no byte of it for `idle_s` (DOCSUM_UPLOAD_IDLE_S) answers 408 and
gives back what it booked, so a client that went quiet holds neither budget nor spool for long.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import IO

from fastapi import HTTPException, status
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from .inputs import check_text, invalid

KiB = 1024
FILE_FIELD = "files"
MAX_FIELDS = 16  # text fields of one request (the API has five)
MAX_FIELD_BYTES = 4 * KiB  # of one text field's value
MAX_PART_HEADER_BYTES = 8 * KiB  # of one part's headers (python-multipart also caps each line and the count)
FRAMING_BYTES = 64 * KiB  # the body beyond files and fields: boundaries, the preamble, the epilogue
READ_BLOCK = 64 * KiB  # what is read back from a spool at a time


def body_limit(upload_bytes: int, max_files: int) -> int:
    """The most bytes a request body may have: the files, their part headers, the fields and framing."""
    return upload_bytes + max_files * (MAX_PART_HEADER_BYTES + 256) + MAX_FIELDS * MAX_FIELD_BYTES + FRAMING_BYTES


@dataclass(frozen=True)
class UploadLimits:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int  # of all files together
    spool_bytes: int
    idle_s: float  # the longest wait for the body's next bytes

    @property
    def max_body_bytes(self) -> int:
        return body_limit(self.max_total_bytes, self.max_files)


class Spool:
    """A file's bytes: up to `threshold` in memory, then all of them in an unnamed temporary file."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.size = 0
        self._memory = bytearray()
        self._file: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        """Called with one received block at most: a write to the page cache, cheap enough for the loop."""
        self.size += len(data)
        if self._file is None:
            if len(self._memory) + len(data) <= self.threshold:
                self._memory += data
                return
            self._file = tempfile.TemporaryFile(prefix="docsum-upload-")  # closed by close()
            self._file.write(self._memory)
            self._memory = bytearray()
        self._file.write(data)

    async def blocks(self, size: int = READ_BLOCK) -> AsyncIterator[bytes]:
        """The bytes again, from the start, `size` at a time (file reads off the event loop)."""
        if self._file is None:
            for start in range(0, len(self._memory), size):
                yield bytes(self._memory[start : start + size])
            return
        file = self._file
        await asyncio.to_thread(file.seek, 0)
        while block := await asyncio.to_thread(file.read, size):
            yield block

    def close(self) -> None:
        self._memory = bytearray()
        if self._file is not None:
            self._file.close()
            self._file = None


RETRY_AFTER_S = 5  # what a client told to wait for the budget waits: uploads take seconds to drain


class SpoolBudget:
    """The upload bytes this process holds at once (spooled files, in memory or on disk): at most `total`
    in all and `per_owner` for one owner. Single event loop: no lock needed."""

    def __init__(self, total: int, per_owner: int) -> None:
        self.total, self.per_owner = total, per_owner
        self.held = 0
        self.by_owner: dict[str, int] = {}

    def claim(self, owner: str) -> Claim:
        return Claim(self, owner)

    def _take(self, owner: str, n: int) -> None:
        mine = self.by_owner.get(owner, 0)
        if mine + n > self.per_owner:
            raise _busy(
                status.HTTP_429_TOO_MANY_REQUESTS,
                f"your uploads in progress would hold over {self.per_owner} bytes"
                " (DOCSUM_UPLOAD_INFLIGHT_BYTES_PER_OWNER): wait for them to finish, then send this one again",
            )
        if self.held + n > self.total:
            # Nothing of the others' uploads is told: only that the gateway is busy.
            raise _busy(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                "the gateway is receiving as many uploads as it can hold (DOCSUM_UPLOAD_INFLIGHT_BYTES):"
                " send this one again in a moment",
            )
        self.held += n
        self.by_owner[owner] = mine + n

    def _give_back(self, owner: str, n: int) -> None:
        self.held -= n
        left = self.by_owner.get(owner, 0) - n
        if left > 0:
            self.by_owner[owner] = left
        else:
            self.by_owner.pop(owner, None)


def _busy(code: int, message: str) -> HTTPException:
    return HTTPException(code, message, headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass
class Claim:
    """One request's share of the budget: what it booked so far, given back once."""

    budget: SpoolBudget
    owner: str
    held: int = 0

    def cover(self, n: int) -> None:
        """Hold at least `n` bytes in all (books only what is not booked yet)."""
        if n > self.held:
            self.budget._take(self.owner, n - self.held)
            self.held = n

    def release(self) -> None:
        self.budget._give_back(self.owner, self.held)
        self.held = 0


@dataclass
class UploadedFile:
    filename: str | None
    content_type: str | None
    spool: Spool
    _hash: hashlib._Hash = field(default_factory=hashlib.sha256)

    @property
    def size(self) -> int:
        return self.spool.size

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


@dataclass
class Upload:
    """A parsed request: its files (spooled) and its text fields (every value of each name, in order)."""

    files: list[UploadedFile] = field(default_factory=list)
    fields: dict[str, list[str]] = field(default_factory=dict)
    claim: Claim | None = None  # its share of the process's upload budget, given back by close()

    def close(self) -> None:
        for f in self.files:
            f.spool.close()
        if self.claim is not None:
            self.claim.release()


def too_large(message: str) -> HTTPException:
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, message)


def bad_request(message: str) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, message)


def timed_out(idle_s: float) -> HTTPException:
    # Connection: close, as the rest of the body will not be read.
    return HTTPException(
        status.HTTP_408_REQUEST_TIMEOUT,
        f"no bytes of the request body arrived for {idle_s:g} s (DOCSUM_UPLOAD_IDLE_S): the upload was dropped;"
        " send it again",
        headers={"Connection": "close"},
    )


class _Parser:
    """python-multipart callbacks that enforce the limits and route each part's data."""

    def __init__(self, limits: UploadLimits, upload: Upload, charset: str) -> None:
        self.limits = limits
        self.upload = upload
        self.charset = charset
        self.file_bytes = 0
        self.ended = False
        self._headers: dict[bytes, bytes] = {}
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._header_bytes = 0
        self._name = ""
        self._file: UploadedFile | None = None
        self._value = bytearray()

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self._headers = {}
        self._header_bytes = 0
        self._file = None
        self._value = bytearray()

    def _count_header(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_PART_HEADER_BYTES:
            raise too_large(f"the headers of a part are over the limit of {MAX_PART_HEADER_BYTES} bytes")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[bytes(self._header_name).lower()] = bytes(self._header_value)
        self._header_name = bytearray()
        self._header_value = bytearray()

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode(self.charset)
        except UnicodeError:  # not only UnicodeDecodeError: the idna codec raises UnicodeError itself
            return raw.decode("latin-1")

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition"))
        if b"name" not in options:
            raise bad_request('a part has no Content-Disposition header with a "name"')
        self._name = check_text(("body", "<field name>"), self._text(options[b"name"]))
        if b"filename" not in options:
            if sum(map(len, self.upload.fields.values())) >= MAX_FIELDS:
                raise too_large(f"more than {MAX_FIELDS} form fields")
            return
        if self._name != FILE_FIELD:
            raise invalid(("body", self._name), f"files go in the field '{FILE_FIELD}', not '{self._name}'")
        if len(self.upload.files) >= self.limits.max_files:
            raise too_large(f"more than the limit of {self.limits.max_files} files per task")
        index = len(self.upload.files)
        filename = check_text(("body", FILE_FIELD, index, "filename"), self._text(options[b"filename"]))
        content_type = self._headers.get(b"content-type", b"").decode("latin-1").strip()[:255]
        check_text(("body", FILE_FIELD, index, "content_type"), content_type)
        self._file = UploadedFile(filename or None, content_type or None, Spool(self.limits.spool_bytes))
        self.upload.files.append(self._file)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file is None:
            if len(self._value) + (end - start) > MAX_FIELD_BYTES:
                raise too_large(f"form field '{self._name}' is over the limit of {MAX_FIELD_BYTES} bytes")
            self._value += data[start:end]
            return
        block = data[start:end]
        self.file_bytes += len(block)
        if self._file.size + len(block) > self.limits.max_file_bytes:
            name = self._file.filename or f"document-{len(self.upload.files)}"
            raise too_large(f"file '{name}' is over the limit of {self.limits.max_file_bytes} bytes")
        if self.file_bytes > self.limits.max_total_bytes:
            raise too_large(f"the files of the task are over the limit of {self.limits.max_total_bytes} bytes")
        if self.upload.claim is not None:
            self.upload.claim.cover(self.file_bytes)
        self._file._hash.update(block)
        self._file.spool.write(block)

    def on_part_end(self) -> None:
        if self._file is None:
            self.upload.fields.setdefault(self._name, []).append(self._text(bytes(self._value)))

    def on_end(self) -> None:
        self.ended = True


# The parts' headers are ASCII-framed bytes: a charset that does not read ASCII as ASCII (UTF-16, a
# codec such as base64 or rot13 that is no text encoding at all) cannot be what the form was sent in.
_CHARSET_PROBE = b'form-data; name="files"; filename="a.txt"'


def form_charset(declared: str) -> str:
    """The codec the form's field names, file names and values are decoded with; 400 naming the charset
    when Python does not know it or it cannot be a form's (LookupError or UnicodeError, otherwise a 500)."""
    try:
        name = codecs.lookup(declared).name
        usable = _CHARSET_PROBE.decode(name) == _CHARSET_PROBE.decode("ascii")
    except (LookupError, UnicodeError):
        usable = False
    if not usable:
        raise bad_request(
            f"the multipart/form-data Content-Type names charset={declared[:40]!r}, which cannot be read as a"
            " form's text encoding: send the form in UTF-8 (charset=utf-8, or no charset)"
        )
    return name


async def read_upload(request: Request, limits: UploadLimits, claim: Claim | None = None) -> Upload:
    """The request's multipart body, parsed as it streams in; on any error nothing is left spooled. With
    `claim`, the file bytes are booked against the process's upload budget as they arrive (429/503 beyond
    it). A body that sends nothing for `limits.idle_s` is a 408."""
    content_type, params = parse_options_header(request.headers.get("content-type"))
    if content_type != b"multipart/form-data":
        raise bad_request("expected a multipart/form-data body (files in the field 'files')")
    boundary = params.get(b"boundary")
    if not boundary:
        raise bad_request("the multipart/form-data Content-Type has no boundary")
    charset = form_charset(params.get(b"charset", b"utf-8").decode("latin-1"))
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_large(f"request body over the limit of {limits.max_body_bytes} bytes")

    upload = Upload(claim=claim)
    parser = _Parser(limits, upload, charset)
    blocks = request.stream()
    try:
        multipart = MultipartParser(boundary, parser.callbacks())  # type: ignore[arg-type]
        received = 0
        while True:
            try:
                async with asyncio.timeout(limits.idle_s):
                    block = await anext(blocks, None)
            except TimeoutError:
                raise timed_out(limits.idle_s) from None
            if block is None:
                break
            multipart.write(block)  # first: a file or task limit crossed in this block says more
            received += len(block)
            if received > limits.max_body_bytes:
                raise too_large(f"request body over the limit of {limits.max_body_bytes} bytes")
        multipart.finalize()
        if not parser.ended:
            raise bad_request("the multipart body ends before its closing boundary")
    except MultipartParseError as exc:
        upload.close()
        raise bad_request(f"malformed multipart body: {exc}") from None
    except ClientDisconnect:
        upload.close()
        raise bad_request("the client went away before the end of the body") from None
    except BaseException:
        upload.close()
        raise
    return upload
