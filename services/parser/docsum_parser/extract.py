"""Pure text extraction: bytes in, normalized text and where its pages start out (or a ParseError a user
can act on).

No IO happens here besides reading the bytes we are given, so everything is unit-testable and the
service layer only has to map ParseError to a failed-document event. PDF (pdf.py) and Word (word.py)
are read by their own modules, imported when a file of theirs comes: in the parse worker, so the
parser's own process never loads pypdf, python-docx or lxml (about 45 MB it would hold for nothing).
What they share with this module lives in modules of its own (limits.py, parse_error.py, normalize.py,
zips.py), so neither of them imports this one.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from docsum_shared.positions import Positions, Unit

from .limits import DEFAULT_LIMITS, Limits, too_many_chars
from .normalize import break_ends, normalize_keeping
from .parse_error import ParseError
from .zips import zip_members

Format = Literal["pdf", "docx", "text"]


@dataclass(frozen=True)
class ExtractedText:
    text: str
    format: Format
    positions: Positions  # where each page (PDF), paragraph (DOCX) or line (text) starts in `text`
    pages: int | None = None  # PDFs only


SUPPORTED = "PDF, DOCX, TXT, Markdown"
MSG_EMPTY = "file is empty"
MSG_DOCX_PASSWORD = (
    "DOCX is password-protected; remove the password in Word (File > Info > Protect Document) and try again"
)
MSG_ENCODING = (
    "text file is not in a supported encoding (UTF-8, UTF-16 with BOM, GB18030); save it as UTF-8 and try again"
)
MSG_NO_TEXT = {
    "pdf": "no extractable text: the PDF seems to contain only scanned images; run OCR first",
    "docx": "no extractable text: the Word document has no text in its body (images, headers and footers are not read)",
    "text": "no extractable text: the text file contains only whitespace",
}

_EXTENSIONS: dict[str, Format] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".markdown": "text",
}
_CONTENT_TYPES: dict[str, Format] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/plain": "text",
    "text/markdown": "text",
    "text/x-markdown": "text",
}
# Legacy binary Office files (.doc/.xls/.ppt) are OLE2 compound files with this signature.
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# A password-protected DOCX/XLSX/PPTX is not a zip but an OLE2 compound file holding the
# "EncryptionInfo" and "EncryptedPackage" streams (MS-OFFCRYPTO); directory entries name them in UTF-16LE.
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_WORD_EXTENSIONS = frozenset({".docx", ".docm", ".dotx", ".dotm"})


def detect_format(data: bytes, filename: str, content_type: str | None) -> Format:
    """Decide how to parse: magic bytes beat the extension, which beats the (client-supplied) type."""
    ext = PurePosixPath((filename or "").replace("\\", "/")).suffix.lower()
    ctype = (content_type or "").split(";")[0].strip().lower()

    if data[:1024].lstrip().startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"PK\x03\x04") and "word/document.xml" in (zip_members(data) or ()):
        return "docx"
    # Any other zip (xlsx, odt, a damaged docx) is judged by its name: .docx gets the DOCX error.
    if data.startswith(_OLE2_MAGIC) and _ENCRYPTED_PACKAGE in data:
        if ext in _WORD_EXTENSIONS or (not ext and _CONTENT_TYPES.get(ctype) == "docx"):
            raise ParseError(MSG_DOCX_PASSWORD, "encrypted")
        what = f"{_label(ext, ctype)} file" if ext or ctype else "file"
        raise ParseError(
            f"{what} is password-protected (an encrypted Office document); remove the password and save it "
            f"as DOCX or PDF, then try again (supported: {SUPPORTED})",
            "encrypted",
        )
    if data.startswith(_OLE2_MAGIC):
        raise ParseError(
            f"unsupported file type {_label(ext or '.doc', ctype)}; supported: {SUPPORTED} "
            "(legacy .doc files must be saved as .docx or PDF first)",
            "unsupported",
        )
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    if ctype in _CONTENT_TYPES:  # last resort, e.g. a pasted upload without a file name
        return _CONTENT_TYPES[ctype]
    raise ParseError(f"unsupported file type {_label(ext, ctype)}; supported: {SUPPORTED}", "unsupported")


def extract_text(
    data: bytes, filename: str, content_type: str | None = None, limits: Limits = DEFAULT_LIMITS
) -> ExtractedText:
    """Extract normalized plain text and where each of its pages, paragraphs or lines starts; raises
    ParseError with a user-facing message on any failure, including a document over one of `limits`."""
    if not data:
        raise ParseError(MSG_EMPTY, "empty")
    fmt = detect_format(data, filename, content_type)
    pages: int | None = None
    if fmt == "pdf":
        from .pdf import extract_pdf

        text, starts = extract_pdf(data, limits)
        pages = len(starts)
    elif fmt == "docx":
        from .word import extract_docx

        text, starts = extract_docx(data, limits)
    else:
        text = _decode_text(data, limits)
        starts = _line_starts(text)
    # The units' starts are line starts, which the normalization carries into its result exactly.
    text, starts = normalize_keeping(text, starts)
    if not text:
        raise ParseError(MSG_NO_TEXT[fmt], "no_text")
    if len(text) > limits.max_chars:  # normalizing can expand (tabs, ligatures)
        raise too_many_chars(limits)
    return ExtractedText(text=text, format=fmt, positions=Positions(_UNITS[fmt], tuple(starts)), pages=pages)


_UNITS: dict[Format, Unit] = {"pdf": "page", "docx": "paragraph", "text": "line"}


# ---------------------------------------------------------------------------------------- helpers


def _label(ext: str, ctype: str) -> str:
    if ext:
        return f"'{ext}'"
    return f"'{ctype}'" if ctype else "(no file extension)"


# ------------------------------------------------------------------------------------------- text

# A line ends where an editor ends it; a form feed or vertical tab (a line break once normalized) does not.
_EDITOR_LINE_BREAK = re.compile(r"\r\n|[\r\n]")


def _line_starts(text: str) -> list[int]:
    """Where each line of the file starts; a final line break ends the last line, it opens none."""
    starts = [0, *break_ends(text, _EDITOR_LINE_BREAK)]
    if len(starts) > 1 and starts[-1] == len(text):
        starts.pop()
    return starts


_BAD_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ue000-\uf8ff]")  # controls, private use
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef\u2014\u2018-\u201d\u2026]")


def _decode_text(data: bytes, limits: Limits) -> str:
    # Every encoding read here takes at most 4 bytes per character (a BOM takes at most 4 more).
    if len(data) - 4 > 4 * limits.max_chars:
        raise too_many_chars(limits)
    if data.startswith(codecs.BOM_UTF8):
        candidates = ["utf-8-sig"]
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        candidates = ["utf-16"]  # the codec reads the BOM to pick the byte order
    else:
        candidates = ["utf-8", "gb18030"]  # GB18030 for Chinese text saved by Windows tools
    for encoding in candidates:
        try:
            text = _decode_capped(data, encoding, limits)  # strict: a wrong guess must fail, not produce mojibake
        except UnicodeDecodeError:
            continue
        if _looks_like_text(text, chinese=encoding == "gb18030"):
            return text
    raise ParseError(MSG_ENCODING, "encoding")


_DECODE_BLOCK = 2**20


def _decode_capped(data: bytes, encoding: str, limits: Limits) -> str:
    """Decode block by block, so that a text over the limit fails after `max_chars` characters."""
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    view = memoryview(data)
    parts: list[str] = []
    chars = 0
    for start in range(0, len(view), _DECODE_BLOCK):
        part = decoder.decode(view[start : start + _DECODE_BLOCK], final=start + _DECODE_BLOCK >= len(view))
        chars += len(part)
        if chars > limits.max_chars:
            raise too_many_chars(limits)
        parts.append(part)
    return "".join(parts)


def _looks_like_text(text: str, chinese: bool) -> bool:
    # A strict decode can still "succeed" on binary data (or on UTF-16 without a BOM, which is
    # valid UTF-8 full of NULs); real text has almost no control or private-use characters.
    # (Counted with subn, which builds no list of matches.)
    if _BAD_CHARS.subn("", text)[1] > 3 + len(text) * 0.01:
        return False
    if chinese:
        # GB18030 maps nearly every byte pair to *some* character; Chinese text is mostly Han
        # characters and CJK punctuation.
        non_ascii = _NON_ASCII.subn("", text)[1]
        return _CJK.subn("", text)[1] >= non_ascii * 0.5
    return True
