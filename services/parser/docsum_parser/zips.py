"""Zip-based documents (DOCX, PPTX, EPUB): what an archive holds, read without inflating it (how such a
document is recognized), and the caps every one of them gets before a library unpacks it."""

from __future__ import annotations

import copy
import io
import struct
import zipfile
import zlib
from collections.abc import Callable

from lxml import etree

from .limits import SPLIT_IT, Limits, size_label
from .parse_error import ParseError, short_reason

# How a damaged member of any zip-based document surfaces while its library reads it: a bad CRC or an unknown
# compression from zipfile/zlib, bad XML from lxml, a missing part as KeyError. Each reader adds its library's own.
DAMAGED = (
    KeyError,
    ValueError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RecursionError,
    etree.LxmlError,
)
_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"


def zip_members(data: bytes) -> dict[str, int] | None:
    """Member name -> declared uncompressed size, or None if this is not a readable zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        return None


def declared_entries(data: bytes) -> int | None:
    """How many files the archive's end record says it holds (None: no end record). Read before
    zipfile builds an object for each entry of the central directory, which could be millions."""
    end = data.rfind(_EOCD, max(0, len(data) - _EOCD_SIZE - 0xFFFF))
    if end < 0 or end + _EOCD_SIZE > len(data):
        return None
    (entries,) = struct.unpack_from("<H", data, end + 10)
    locator = end - 20
    if entries == 0xFFFF and locator >= 0 and data[locator : locator + 4] == _ZIP64_LOCATOR:
        (record,) = struct.unpack_from("<Q", data, locator + 8)
        if record + 56 <= len(data) and data[record : record + 4] == _ZIP64_EOCD:
            (entries,) = struct.unpack_from("<Q", data, record + 32)
    return int(entries)


def too_many_entries(what: str, entries: int, limits: Limits) -> ParseError:
    return ParseError(
        f"the {what} holds {entries:,} files, over the limit of {limits.max_zip_entries:,}"
        f" (DOCSUM_MAX_ZIP_ENTRIES); {SPLIT_IT}",
        "too_large",
    )


def check_entries(data: bytes, what: str, limits: Limits) -> None:
    """Refuse an archive with more files than the cap, by what its end record declares: before any
    entry is read."""
    entries = declared_entries(data)
    if entries is not None and entries > limits.max_zip_entries:
        raise too_many_entries(what, entries, limits)


_INFLATE_BLOCK = 2**20


def check_archive(data: bytes, what: str, required: str, limits: Limits, invalid: Callable[[str], ParseError]) -> None:
    """Refuse what is no readable zip, or lacks its format's `required` part, and an archive over a cap
    before a library unpacks it in memory: more files than
    `max_zip_entries`, or parts that inflate to more than `max_docx_unzipped_bytes`. Every member is
    inflated in blocks, counting the bytes that really come out, and the count stops as soon as it
    passes the limit: the sizes in the zip's headers are whatever the file's author wrote there.
    `what` names the format in the message ("DOCX"); `invalid` makes the error of a damaged archive."""
    members = zip_members(data)
    if members is None:
        raise invalid("it is not a readable zip archive; it may be truncated or another format")
    if required not in members:
        raise invalid(f"the archive has no {required}")
    check_entries(data, what, limits)
    limit = limits.max_docx_unzipped_bytes
    total = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > limits.max_zip_entries:  # an end record that understates them
                raise too_many_entries(what, len(infos), limits)
            for info in infos:
                if info.is_dir():
                    continue
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    # Office and e-book tools write only these two; zipfile inflates the others without
                    # a bound per read.
                    raise invalid(f"{info.filename} is compressed with an unsupported method")
                # zipfile stops reading at the declared size (and then checks the CRC): declare more
                # than can be read before the count passes the limit.
                probe = copy.copy(info)
                probe.file_size = limit + 2 * _INFLATE_BLOCK
                with archive.open(probe) as member:
                    while block := member.read(_INFLATE_BLOCK):
                        total += len(block)
                        if total > limit:
                            raise ParseError(
                                f"the {what} unpacks to more than the limit of {size_label(limit)} "
                                f"(DOCSUM_MAX_DOCX_UNZIPPED_BYTES); {SPLIT_IT}",
                                "too_large",
                            )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError, RuntimeError) as exc:
        raise invalid(short_reason(exc)) from exc
