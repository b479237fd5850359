"""Pure text extraction: bytes in, normalized text out (or a ParseError a user can act on).

No IO happens here besides reading the bytes we are given, so everything is unit-testable and the
service layer only has to map ParseError to a failed-document event.
"""

from __future__ import annotations

import codecs
import copy
import io
import re
import struct
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

import docx
from docx.exceptions import PythonDocxError
from docx.opc.exceptions import OpcError
from docx.text.paragraph import Paragraph
from lxml import etree
from pypdf import PasswordType, PdfReader
from pypdf.errors import PyPdfError
from pypdf.generic import DictionaryObject, NullObject

from docsum_shared.text import dehyphenate, fold_compatibility

Format = Literal["pdf", "docx", "text"]


class ParseError(Exception):
    """The document cannot be turned into text; str(e) tells the user what to do about it.

    `kind` is a stable machine-readable tag (empty, unsupported, encrypted, damaged, invalid_docx,
    encoding, no_text, too_large; from the parse worker: timeout, out_of_memory, worker_stopped) for
    metrics and tests; the message is what the user sees.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ExtractedText:
    text: str
    format: Format
    pages: int | None = None  # PDFs only


@dataclass(frozen=True)
class Limits:
    """How far one document may expand; each is checked as early as it can be measured.

    `max_chars`: characters of text (as extracted, and again once normalized); extraction stops as
    soon as it is passed. `max_pdf_pages`: pages of a PDF, checked before any text is extracted.
    `max_docx_unzipped_bytes`: the bytes all parts of a DOCX really inflate to, counted while
    inflating them (the sizes a zip declares are not trusted). The defaults are the settings'.
    """

    max_chars: int = 5_000_000
    max_pdf_pages: int = 2_000
    max_docx_unzipped_bytes: int = 256 * 2**20


def size_label(n: int) -> str:
    """A byte count as a person would write it: 256 MiB, 1 GiB, 1,500 bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


_SPLIT_IT = "split it into smaller files and try again"


def _too_many_chars(limits: Limits) -> ParseError:
    return ParseError(
        f"the document's text is longer than the limit of {limits.max_chars:,} characters "
        f"(DOCSUM_MAX_DOCUMENT_CHARS); {_SPLIT_IT}",
        "too_large",
    )


SUPPORTED = "PDF, DOCX, TXT, Markdown"
MSG_EMPTY = "file is empty"
MSG_ENCRYPTED = "PDF is encrypted; remove the password (or submit an unencrypted copy) and try again"
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
    if data.startswith(b"PK\x03\x04") and "word/document.xml" in (_zip_members(data) or ()):
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
    data: bytes, filename: str, content_type: str | None = None, limits: Limits = Limits()
) -> ExtractedText:
    """Extract normalized plain text; raises ParseError with a user-facing message on any failure,
    including a document over one of `limits`."""
    if not data:
        raise ParseError(MSG_EMPTY, "empty")
    fmt = detect_format(data, filename, content_type)
    pages: int | None = None
    if fmt == "pdf":
        text, pages = _extract_pdf(data, limits)
    elif fmt == "docx":
        text = _extract_docx(data, limits)
    else:
        text = _decode_text(data, limits)
    text = normalize(text)
    if not text:
        raise ParseError(MSG_NO_TEXT[fmt], "no_text")
    if len(text) > limits.max_chars:  # normalizing can expand (tabs, ligatures)
        raise _too_many_chars(limits)
    return ExtractedText(text=text, format=fmt, pages=pages)


# ---------------------------------------------------------------------------------------- helpers

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]")  # NUL etc.; keeps \t \n \v \f \r for below
_HSPACE = re.compile(r"[^\S\n]+")  # any whitespace except newline (incl. NBSP, ideographic space)
_BLANK_RUNS = re.compile(r"\n{3,}")
_SOFT_HYPHEN_AT_EOL = re.compile(r"\u00ad[^\S\n]*\n")


def normalize(text: str) -> str:
    """Unix newlines, no control chars, single spaces, at most one blank line in a row.

    Leading indentation survives (as spaces) so indented code such as "    # comment" is not
    mistaken for a Markdown heading downstream. Ligatures and other presentation forms are folded
    (`fold_compatibility`; CJK full-width punctuation is kept). A soft hyphen shows only where a line
    breaks, so it becomes "-" there and disappears elsewhere.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n").replace("\v", "\n")
    text = _SOFT_HYPHEN_AT_EOL.sub("-\n", text).replace("\u00ad", "")
    text = fold_compatibility(_CONTROL.sub("", text)).expandtabs(4)
    text = "\n".join(_normalize_line(line) for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip("\n")


def _normalize_line(line: str) -> str:
    body = line.lstrip()
    if not body:
        return ""
    indent = len(line) - len(body)
    return " " * indent + _HSPACE.sub(" ", body).rstrip()


def _label(ext: str, ctype: str) -> str:
    if ext:
        return f"'{ext}'"
    return f"'{ctype}'" if ctype else "(no file extension)"


def _zip_members(data: bytes) -> dict[str, int] | None:
    """Member name -> declared uncompressed size, or None if this is not a readable zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        return None


def _short(exc: BaseException) -> str:
    """One line of an exception, short enough to show a user."""
    lines = str(exc).strip().splitlines()
    # pypdf likes to append raw bytes (b'\x8c...' @offset) that mean nothing to a user.
    line = re.split(r" (?:starting with )?b['\"]", lines[0])[0].rstrip(" .:") if lines else ""
    line = line or type(exc).__name__
    return line if len(line) <= 100 else line[:97] + "..."


# -------------------------------------------------------------------------------------------- PDF

# With strict=False pypdf repairs what it can and otherwise fails with its own errors or with plain
# Python errors from deep inside the parser (bad offsets, broken streams, odd object types).
_PDF_ERRORS = (
    PyPdfError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    AssertionError,
    RecursionError,
    NotImplementedError,  # e.g. "Unsupported filter" when a filter name is garbled
    zlib.error,
    struct.error,
)


_OBJECT_HEADER = re.compile(rb"\d+\s+\d+\s+obj\b")


def _damaged(reason: str) -> ParseError:
    return ParseError(f"PDF is damaged or truncated: {reason}; re-export it and try again", "damaged")


def _extract_pdf(data: bytes, limits: Limits) -> tuple[str, int]:
    if b"%PDF-" not in data[:1024]:
        raise _damaged("it does not start with a %PDF header")
    # pypdf searches the *whole* file backwards for %%EOF, so a cut-off file that contains an
    # earlier revision (incremental update, linearized PDF) "opens" and silently loses pages.
    # Readers require the marker in the last 1024 bytes, and objects after it mean the last
    # update was cut off.
    eof = data.rfind(b"%%EOF")
    if eof < 0 or len(data) - eof > 1024 or _OBJECT_HEADER.search(data, eof):
        raise _damaged("the end of the file is missing (no final %%EOF marker)")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            _decrypt_with_empty_password(reader)
        _check_page_count(reader, limits)
        page_texts = []
        chars = 0
        for page in reader.pages:
            page_texts.append(page.extract_text() or "")
            chars += len(page_texts[-1])
            if chars > limits.max_chars:
                raise _too_many_chars(limits)
        if not any(t.strip() for t in page_texts):
            # extract_text() swallows some errors and returns "", which would turn a damaged file
            # into a misleading "run OCR" message; make sure the page content is really there.
            _check_page_contents(reader)
    except _PDF_ERRORS as exc:
        raise _damaged(_short(exc)) from exc
    # Normalize per page so a page of only whitespace does not leave a double separator.
    pages = [normalize(p) for p in page_texts]
    if len(pages) >= _RUNNING_MIN_PAGES:
        pages = _drop_running_lines(pages)
    text = "\n\n".join(t for t in (dehyphenate(p) for p in pages) if t)
    return text, len(page_texts)


# Running headers and footers: a line among the first or last `_EDGE_LINES` lines of a page whose
# shape (digits as "#", a Roman page number at either end as "#") is on the edge of more than half
# of the pages - or of at least 75% of the odd or of the even pages, for left/right headers - is
# dropped; the top lines of the first page are kept, as a running header usually repeats the
# document's title there. A line that is only a page number ("7", "- 7 -", "Page 7 of 9", "iv") is
# dropped from page edges. Short documents are left alone: with fewer than four pages "most pages"
# means too little.
_RUNNING_MIN_PAGES = 4
_EDGE_LINES = 2
_ROMAN = r"(?:x{0,3}(?:ix|iv|vi{0,3}|i{1,3})|x{1,3}|X{0,3}(?:IX|IV|VI{0,3}|I{1,3})|X{1,3})"
_PAGE_NUMBER_LINE = re.compile(
    rf"[-–—\s]*(?:(?:page|p\.)\s*)?(?:\d{{1,4}}|{_ROMAN})(?:\s*(?:/|of)\s*\d{{1,4}})?[-–—\s]*", re.IGNORECASE
)
_EDGE_ROMAN = re.compile(rf"^{_ROMAN}(?=\s)|(?<=\s){_ROMAN}$")
_DIGITS = re.compile(r"\d+")


def _running_key(line: str) -> str:
    key = _DIGITS.sub("#", " ".join(line.split()))
    return _EDGE_ROMAN.sub("#", key).casefold()


def _drop_running_lines(pages: list[str]) -> list[str]:
    lines = [page.split("\n") for page in pages]
    edges: list[list[int]] = []
    counts: Counter[str] = Counter()
    parity_counts: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
    for number, page_lines in enumerate(lines):
        filled = [i for i, line in enumerate(page_lines) if line.strip()]
        edge = sorted(set(filled[:_EDGE_LINES] + filled[-_EDGE_LINES:]))
        edges.append(edge)
        for key in {_running_key(page_lines[i]) for i in edge}:
            counts[key] += 1
            parity_counts[number % 2][key] += 1
    parity_pages = ((len(pages) + 1) // 2, len(pages) // 2)

    def running(key: str) -> bool:
        if counts[key] > len(pages) / 2:
            return True
        return any(c[key] >= max(3, 0.75 * n) for c, n in zip(parity_counts, parity_pages, strict=True))

    out = []
    for number, (page_lines, edge) in enumerate(zip(lines, edges, strict=True)):
        keep_top = edge[:_EDGE_LINES] if number == 0 else []
        drop = {
            i
            for i in edge
            if _PAGE_NUMBER_LINE.fullmatch(page_lines[i])
            or (i not in keep_top and running(_running_key(page_lines[i])))
        }
        out.append("\n".join(line for i, line in enumerate(page_lines) if i not in drop).strip("\n"))
    return out


def _check_page_count(reader: PdfReader, limits: Limits) -> None:
    """Before any page is read: the count the page tree declares (a number, nothing walked), else the
    pages really found."""
    tree = reader.root_object["/Pages"].get_object()
    count = tree.get("/Count") if isinstance(tree, DictionaryObject) else None
    if not (isinstance(count, int) and count > limits.max_pdf_pages):
        count = len(reader.pages)
    if count > limits.max_pdf_pages:
        raise ParseError(
            f"the PDF has {count:,} pages, over the limit of {limits.max_pdf_pages:,} (DOCSUM_MAX_PDF_PAGES); "
            f"{_SPLIT_IT}",
            "too_large",
        )


def _check_page_contents(reader: PdfReader) -> None:
    # A broken page tree makes pypdf return fewer (or bogus) pages instead of failing.
    tree = reader.root_object["/Pages"].get_object()
    declared = tree.get("/Count") if isinstance(tree, DictionaryObject) else None
    if len(reader.pages) == 0:
        raise _damaged("it has no readable pages")
    if isinstance(declared, int) and declared != len(reader.pages):
        raise _damaged(f"only {len(reader.pages)} of {declared} pages could be read")
    for number, page in enumerate(reader.pages, start=1):
        reference = page.get("/Contents")  # unresolved: None means a legitimately blank page
        if reference is None:
            continue
        if isinstance(reference.get_object(), NullObject) or page.get_contents() is None:
            raise _damaged(f"the content of page {number} is missing")


def _decrypt_with_empty_password(reader: PdfReader) -> None:
    # Many PDFs are encrypted with only an owner password (to restrict printing/copying) and an
    # empty user password: every viewer opens them, so we must too.
    try:
        if reader.decrypt("") != PasswordType.NOT_DECRYPTED:
            return
    except (PyPdfError, NotImplementedError) as exc:  # e.g. an unsupported security handler
        raise ParseError(MSG_ENCRYPTED, "encrypted") from exc
    raise ParseError(MSG_ENCRYPTED, "encrypted")


# ------------------------------------------------------------------------------------------- DOCX

_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)
# Damaged members surface from zipfile/zlib (bad CRC, unknown compression), bad XML from lxml.
_DOCX_ERRORS = (
    PythonDocxError,
    OpcError,
    KeyError,
    ValueError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RecursionError,
    etree.LxmlError,
)


def _invalid_docx(reason: str) -> ParseError:
    return ParseError(
        f"DOCX is not a valid Word document ({reason}); open it in Word or LibreOffice, save it as .docx and try again",
        "invalid_docx",
    )


def _extract_docx(data: bytes, limits: Limits) -> str:
    members = _zip_members(data)
    if members is None:
        raise _invalid_docx("it is not a readable zip archive; it may be truncated or another format")
    if "word/document.xml" not in members:
        raise _invalid_docx("the archive has no word/document.xml")
    # python-docx inflates every part in memory: first make sure they really fit.
    _check_unzipped_size(data, limits.max_docx_unzipped_bytes)
    blocks: list[str] = []
    chars = 0
    try:
        document = docx.Document(io.BytesIO(data))
        for block in _DocxReader(document).blocks(document.element.body):
            if block.strip():
                blocks.append(block)
                chars += len(block) + 2
                if chars > limits.max_chars:
                    raise _too_many_chars(limits)
    except _DOCX_ERRORS as exc:
        raise _invalid_docx(_short(exc)) from exc
    # A blank line between blocks keeps paragraph boundaries visible to the chunker.
    return "\n\n".join(blocks)


_INFLATE_BLOCK = 2**20


def _check_unzipped_size(data: bytes, limit: int) -> None:
    """Inflate every member in blocks, counting the bytes that really come out, and stop as soon as
    they pass `limit`. The sizes in the zip's headers are whatever the file's author wrote there."""
    total = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    # Word writes only these two; zipfile inflates the others without a bound per read.
                    raise _invalid_docx(f"{info.filename} is compressed with an unsupported method")
                # zipfile stops reading at the declared size (and then checks the CRC): declare more
                # than can be read before the count passes the limit.
                probe = copy.copy(info)
                probe.file_size = limit + 2 * _INFLATE_BLOCK
                with archive.open(probe) as member:
                    while block := member.read(_INFLATE_BLOCK):
                        total += len(block)
                        if total > limit:
                            raise ParseError(
                                f"the DOCX unpacks to more than the limit of {size_label(limit)} "
                                f"(DOCSUM_MAX_DOCX_UNZIPPED_BYTES); {_SPLIT_IT}",
                                "too_large",
                            )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError, RuntimeError) as exc:
        raise _invalid_docx(_short(exc)) from exc


# We walk the body XML ourselves: python-docx's paragraphs and tables skip content controls (w:sdt,
# e.g. every section of a resume template) and tracked insertions (w:ins).
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_P, _TBL, _TR, _TC, _R = _W + "p", _W + "tbl", _W + "tr", _W + "tc", _W + "r"
_SDT, _SDT_CONTENT, _CUSTOM_XML = _W + "sdt", _W + "sdtContent", _W + "customXml"
_PLACEHOLDER = f"{_W}sdtPr/{_W}showingPlcHdr"
_TEXT_BOX, _ALTERNATE, _CHOICE, _FALLBACK = (
    _W + "txbxContent",
    _MC + "AlternateContent",
    _MC + "Choice",
    _MC + "Fallback",
)
# Inside a paragraph: wrappers whose runs are part of the text. Not listed, hence skipped: w:del and
# w:moveFrom (tracked deletions; the text is read as if all changes were accepted), w:pPr, bookmarks,
# comments, and math (m:oMath).
_INLINE_WRAPPERS = frozenset(
    _W + tag for tag in ("hyperlink", "ins", "moveTo", "smartTag", "fldSimple", "customXml", "dir", "bdo")
)
# The characters of a run (w:delText, w:instrText, w:softHyphen, w:sym are not text).
_RUN_TEXT = {_W + "t": None, _W + "tab": "\t", _W + "ptab": "\t", _W + "br": "\n", _W + "cr": "\n"}
_RUN_TEXT[_W + "noBreakHyphen"] = "-"
# Run children that may hold text boxes (w:txbxContent) deep inside a shape.
_RUN_SHAPES = frozenset({_W + "drawing", _W + "pict", _W + "object", _ALTERNATE})


class _DocxReader:
    """The text blocks of a WordprocessingML body: paragraphs, tables, content controls, in order.

    A content control that shows its placeholder prompt ("Click here to enter text.") is skipped.
    Text boxes are read once (a shape comes as a DrawingML choice and a VML fallback holding the
    same box; only the choice is read) and follow the paragraph they are anchored in.
    """

    def __init__(self, document: docx.document.Document) -> None:
        self._document = document
        self._styles: dict[str | None, str] = {}  # w:pStyle value -> style name

    def blocks(self, container: etree._Element | list[etree._Element], *, in_cell: bool = False) -> Iterator[str]:
        for child in container:
            tag = child.tag
            if tag == _P:
                boxes: list[etree._Element] = []
                text = self._inline_text(child, boxes)
                yield text if in_cell else self._heading(child, text)
                for box in boxes:
                    yield from self.blocks(box, in_cell=in_cell)
            elif tag == _TBL:
                yield self._table_text(child, nested=in_cell)
            elif tag == _SDT:
                yield from self.blocks(_sdt_content(child), in_cell=in_cell)
            elif tag == _CUSTOM_XML:
                yield from self.blocks(child, in_cell=in_cell)

    def _inline_text(self, element: etree._Element | list[etree._Element], boxes: list[etree._Element]) -> str:
        parts: list[str] = []
        for child in element:
            tag = child.tag
            if tag == _R:
                for item in child:
                    if item.tag in _RUN_SHAPES:
                        boxes.extend(_text_boxes(item))
                        continue
                    value = _RUN_TEXT.get(item.tag, "")
                    parts.append(value if value is not None else item.text or "")
            elif tag in _INLINE_WRAPPERS:
                parts.append(self._inline_text(child, boxes))
            elif tag == _SDT:
                parts.append(self._inline_text(_sdt_content(child), boxes))
        return "".join(parts)

    def _heading(self, p: etree._Element, text: str) -> str:
        if not text.strip():
            return text
        style = self._style_name(p)
        level = 1 if style == "Title" else None
        if match := _HEADING_STYLE.fullmatch(style):
            level = min(int(match.group(1)), 6)
        if level is None:
            return text
        # Headings become Markdown-style lines so the chunker can split on document structure.
        return "#" * level + " " + " ".join(text.split())

    def _style_name(self, p: etree._Element) -> str:
        style_id = p.find(f"{_W}pPr/{_W}pStyle")
        key = style_id.get(_W + "val") if style_id is not None else None
        if key not in self._styles:
            # python-docx resolves the id (falling back to the default paragraph style) and the name.
            style = Paragraph(p, self._document).style  # type: ignore[arg-type]
            self._styles[key] = (style.name if style is not None else None) or ""
        return self._styles[key]

    def _table_text(self, table: etree._Element, *, nested: bool) -> str:
        lines = []
        for row in _unwrap_controls(table, _TR):
            # A horizontally merged cell is one w:tc (with w:gridSpan); a vertically merged one
            # continues in empty w:tc elements below it.
            cells = [" ".join(" ".join(self.blocks(tc, in_cell=True)).split()) for tc in _unwrap_controls(row, _TC)]
            if any(cells):
                # Inside a cell a nested table is just more of the cell's words.
                lines.append(" ".join(c for c in cells if c) if nested else " | ".join(cells))
        return " ".join(lines) if nested else "\n".join(lines)


def _sdt_content(sdt: etree._Element) -> etree._Element | list[etree._Element]:
    content = sdt.find(_SDT_CONTENT)
    if content is None or sdt.find(_PLACEHOLDER) is not None:
        return []
    return content


def _unwrap_controls(parent: etree._Element | list[etree._Element], tag: str) -> Iterator[etree._Element]:
    """The `tag` children of `parent`, including those wrapped in content controls or custom XML."""
    for child in parent:
        if child.tag == tag:
            yield child
        elif child.tag == _SDT:
            yield from _unwrap_controls(_sdt_content(child), tag)
        elif child.tag == _CUSTOM_XML:
            yield from _unwrap_controls(child, tag)


def _text_boxes(element: etree._Element) -> Iterator[etree._Element]:
    """The outermost w:txbxContent elements in a shape; of alternate content only the first choice."""
    if element.tag == _TEXT_BOX:
        yield element
        return
    if element.tag == _ALTERNATE:
        chosen = element.find(_CHOICE)
        element = chosen if chosen is not None else element.find(_FALLBACK)
        if element is None:
            return
    for child in element:
        if isinstance(child.tag, str):  # not a comment or processing instruction
            yield from _text_boxes(child)


# ------------------------------------------------------------------------------------------- text

_BAD_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ue000-\uf8ff]")  # controls, private use
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef\u2014\u2018-\u201d\u2026]")


def _decode_text(data: bytes, limits: Limits) -> str:
    # Every encoding read here takes at most 4 bytes per character (a BOM takes at most 4 more).
    if len(data) - 4 > 4 * limits.max_chars:
        raise _too_many_chars(limits)
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
            raise _too_many_chars(limits)
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
