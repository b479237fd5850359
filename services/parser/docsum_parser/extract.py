"""Pure text extraction: bytes in, normalized text and where its pages start out (or a ParseError a user
can act on).

No IO happens here besides reading the bytes we are given, so everything is unit-testable and the
service layer only has to map ParseError to a failed-document event. PDF (pdf.py), Word (word.py),
PowerPoint (slides.py), web pages (webpage.py) and e-books (ebook.py) are read by their own modules,
imported when a file of theirs comes: in the parse worker, so the parser's own process never loads
pypdf, python-docx, python-pptx, trafilatura or lxml (about 45 MB it would hold for nothing).
What they share with this module lives in modules of its own (limits.py, parse_error.py, normalize.py,
zips.py), so neither of them imports this one.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from docsum_shared.positions import Positions, Unit

from .limits import DEFAULT_LIMITS, Limits, too_many_chars
from .normalize import break_ends, normalize_keeping
from .parse_error import ParseError
from .zips import check_entries, zip_members

Format = Literal["pdf", "docx", "pptx", "html", "epub", "text"]


@dataclass(frozen=True)
class ExtractedText:
    text: str
    format: Format
    # where each page (PDF), paragraph (DOCX), slide (PPTX), section (HTML), chapter (EPUB) or line (text)
    # starts in `text`
    positions: Positions
    pages: int | None = None  # PDFs only
    # PDF pages (from 0) drawn from images without text, to be read by OCR before the text is known: the
    # text is then empty (see pdf.PdfText.scanned).
    scanned: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()  # PDF pages (from 0) whose text was read by OCR


SUPPORTED = "PDF, DOCX, PPTX, HTML, EPUB, TXT, Markdown"
MSG_EMPTY = "file is empty"
MSG_DOCX_PASSWORD = (
    "DOCX is password-protected; remove the password in Word (File > Info > Protect Document) and try again"
)
MSG_PPTX_PASSWORD = (
    "PPTX is password-protected; remove the password in PowerPoint (File > Info > Protect Presentation) and try again"
)
MSG_ENCODING = (
    "text file is not in a supported encoding (UTF-8, UTF-16 with BOM, GB18030); save it as UTF-8 and try again"
)
MSG_NO_TEXT = {
    "pdf": (
        "no extractable text: the PDF's pages have no text, and OCR read none from their images (a blank or"
        " unreadable scan, or text drawn as shapes); scan it again at 300 dpi, or export it with its text, and"
        " try again"
    ),
    "docx": "no extractable text: the Word document has no text in its body (images, headers and footers are not read)",
    "pptx": "no extractable text: the presentation's slides and notes have no text (pictures and charts are not read)",
    "html": "no extractable text: the web page has no main text (navigation, scripts and styles are not read)",
    "epub": "no extractable text: the e-book's chapters have no text (pictures are not read)",
    "text": "no extractable text: the text file contains only whitespace",
}
# What a file of each format is, in a message that says a file is not what its name claims.
_NAMES: dict[Format, str] = {
    "pdf": "a PDF",
    "docx": "a Word document (DOCX)",
    "pptx": "a PowerPoint presentation (PPTX)",
    "html": "a web page (HTML)",
    "epub": "an e-book (EPUB)",
    "text": "a text file",
}

_EXTENSIONS: dict[str, Format] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".epub": "epub",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".markdown": "text",
}
_CONTENT_TYPES: dict[str, Format] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/epub+zip": "epub",
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
_POWERPOINT_EXTENSIONS = frozenset({".pptx", ".pptm", ".ppsx", ".potx"})


def detect_format(data: bytes, filename: str, content_type: str | None, limits: Limits = DEFAULT_LIMITS) -> Format:
    """Decide how to parse: magic bytes beat the extension, which beats the (client-supplied) type.

    A file named (or typed) as a presentation, a web page, an e-book or a Word document whose bytes are
    another of the formats read here fails, saying what it is: its name is the user's claim, and
    reading it as something else would surprise them."""
    ext = PurePosixPath((filename or "").replace("\\", "/")).suffix.lower()
    ctype = (content_type or "").split(";")[0].strip().lower()
    claimed = _EXTENSIONS.get(ext) if ext else _CONTENT_TYPES.get(ctype)

    sniffed = _sniff(data, claimed, limits)
    if sniffed is not None and claimed is not None and claimed in _CLAIMS_CHECKED and sniffed != claimed:
        raise ParseError(
            f"the file is named as {_NAMES[claimed]} ({_label(ext, ctype)}) but it is {_NAMES[sniffed]}; "
            f"rename it to its real type, or save it again as {_NAMES[claimed]}, and try again",
            "mismatch",
        )
    if sniffed is not None:
        return sniffed
    # Any other zip (xlsx, odt, a damaged docx) is judged by its name: .docx gets the DOCX error.
    if data.startswith(_OLE2_MAGIC) and _ENCRYPTED_PACKAGE in data:
        if ext in _WORD_EXTENSIONS or (not ext and _CONTENT_TYPES.get(ctype) == "docx"):
            raise ParseError(MSG_DOCX_PASSWORD, "encrypted")
        if ext in _POWERPOINT_EXTENSIONS or (not ext and _CONTENT_TYPES.get(ctype) == "pptx"):
            raise ParseError(MSG_PPTX_PASSWORD, "encrypted")
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
    data: bytes,
    filename: str,
    content_type: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    ocr_texts: Mapping[int, str] | None = None,
) -> ExtractedText:
    """Extract normalized plain text and where each of its pages, paragraphs or lines starts; raises
    ParseError with a user-facing message on any failure, including a document over one of `limits`.
    A PDF with scanned pages not among `ocr_texts` (their OCR'd text, by page from 0) comes back with
    no text and those pages in `scanned`."""
    if not data:
        raise ParseError(MSG_EMPTY, "empty")
    fmt = detect_format(data, filename, content_type, limits)
    pages: int | None = None
    ocr_pages: tuple[int, ...] = ()
    if fmt == "pdf":
        from .pdf import extract_pdf

        read = extract_pdf(data, limits, ocr_texts)
        if read.scanned:
            return ExtractedText("", fmt, Positions("page", (0,)), pages=read.pages, scanned=read.scanned)
        text, starts = read.text, read.starts
        pages = len(starts)
        ocr_pages = tuple(sorted(ocr_texts or ()))
    elif fmt == "docx":
        from .word import extract_docx

        text, starts = extract_docx(data, limits)
    elif fmt == "pptx":
        from .slides import extract_pptx

        text, starts = extract_pptx(data, limits)
    elif fmt == "html":
        from .webpage import extract_html

        text, starts = extract_html(data, limits)
    elif fmt == "epub":
        from .ebook import extract_epub

        text, starts = extract_epub(data, limits)
    else:
        text = _decode_text(data, limits)
        starts = _line_starts(text)
    # The units' starts are line starts, which the normalization carries into its result exactly.
    text, starts = normalize_keeping(text, starts)
    if not text:
        raise ParseError(MSG_NO_TEXT[fmt], "no_text")
    if len(text) > limits.max_chars:  # normalizing can expand (tabs, ligatures)
        raise too_many_chars(limits)
    return ExtractedText(
        text=text, format=fmt, positions=Positions(_UNITS[fmt], tuple(starts)), pages=pages, ocr_pages=ocr_pages
    )


_UNITS: dict[Format, Unit] = {
    "pdf": "page",
    "docx": "paragraph",
    "pptx": "slide",
    "html": "section",
    "epub": "chapter",
    "text": "line",
}
# A name (or type) that claims one of these, on bytes of another format, is refused rather than read.
_CLAIMS_CHECKED: frozenset[Format | None] = frozenset({"docx", "pptx", "html", "epub"})
_HTML_START = re.compile(
    rb"\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)[\s>]", re.IGNORECASE | re.DOTALL
)
_ZIP_NAMES: dict[Format | None, str] = {"docx": "DOCX", "pptx": "PPTX", "epub": "EPUB"}


def _sniff(data: bytes, claimed: Format | None, limits: Limits) -> Format | None:
    """The format the bytes themselves show (None: they show none of them)."""
    if data[:1024].lstrip().startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        # zipfile builds an object per entry: count them (by the archive's end record) first.
        check_entries(data, _ZIP_NAMES.get(claimed, "zip archive"), limits)
        members = zip_members(data) or {}
        if "word/document.xml" in members:
            return "docx"
        if "ppt/presentation.xml" in members:
            return "pptx"
        if "META-INF/container.xml" in members and "mimetype" in members:  # what OpenDocument files lack
            return "epub"
        return None
    # A text file may well hold HTML (a snippet, a Markdown page): only a whole page is one.
    if claimed != "text" and _HTML_START.match(data[:4096].removeprefix(codecs.BOM_UTF8)):
        return "html"
    return None


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
