"""PDF text, page by page, with pypdf: what extract.extract_text imports and calls for a PDF."""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import PyPdfError
from pypdf.generic import DictionaryObject, NullObject

from docsum_shared.text import dehyphenate

from .limits import SPLIT_IT, Limits, too_many_chars
from .normalize import normalize
from .parse_error import ParseError, short_reason
from .running_lines import drop_running_lines

MSG_ENCRYPTED = "PDF is encrypted; remove the password (or submit an unencrypted copy) and try again"

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


@dataclass(frozen=True)
class PdfText:
    text: str  # the pages joined by a blank line
    starts: list[int]  # where each page starts (a page left without text: where the next page with text does)
    # Pages (from 0) drawn from images with (almost) no text, not among the OCR'd texts given: to be read
    # by OCR first; `text` and `starts` are then not the document's.
    scanned: tuple[int, ...] = ()
    pages: int = 0  # the PDF's pages (with `scanned`)


# A page with fewer characters than this besides whitespace (a page number, a stamp's date) that shows an
# image is a scan: OCR reads it.
SCANNED_MAX_CHARS = 16


def extract_pdf(data: bytes, limits: Limits, ocr_texts: Mapping[int, str] | None = None) -> PdfText:
    """The PDF's text, its pages joined by a blank line, and where each page starts in it. `ocr_texts`:
    the OCR'd text of its scanned pages (by page, from 0), read in place of their text layer."""
    ocr_texts = ocr_texts or {}
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
        scanned = []
        chars = 0
        for number, page in enumerate(reader.pages):
            page_texts.append(page.extract_text() or "")
            if number in ocr_texts:
                page_texts[-1] = ocr_texts[number]
            elif _scanned(page, page_texts[-1]):
                scanned.append(number)
            chars += len(page_texts[-1])
            if chars > limits.max_chars:
                raise too_many_chars(limits)
        if scanned:
            _check_ocr_pages(len(scanned) + len(ocr_texts), limits)
            return PdfText("", [], tuple(scanned), len(page_texts))
        if not any(t.strip() for t in page_texts):
            # extract_text() swallows some errors and returns "", which would turn a damaged file
            # into a misleading "no text" message; make sure the page content is really there.
            _check_page_contents(reader)
    except _PDF_ERRORS as exc:
        raise _damaged(short_reason(exc)) from exc
    # Normalize per page so a page of only whitespace does not leave a double separator. Running headers
    # and footers go page by page, before the pages are joined, so each page's start is where its own
    # text does; and before words hyphenated at a line end are joined, so none is joined to a footer.
    pages = drop_running_lines([normalize(p) for p in page_texts])
    return PdfText(*_joined([dehyphenate(p) for p in pages]))


def _scanned(page: PageObject, text: str) -> bool:
    """Almost no text, and an image (or a form drawing one) on the page: a scanned page."""
    if len("".join(text.split())) >= SCANNED_MAX_CHARS:
        return False
    resources = page.get("/Resources")
    resources = resources.get_object() if resources is not None else None
    xobjects = resources.get("/XObject") if isinstance(resources, DictionaryObject) else None
    xobjects = xobjects.get_object() if xobjects is not None else None
    return isinstance(xobjects, DictionaryObject) and len(xobjects) > 0


def _joined(pages: list[str]) -> tuple[str, list[int]]:
    """The pages with text, a blank line between two; and where each page starts, an empty page where
    the next page with text does (or at the end)."""
    text = "\n\n".join(page for page in pages if page)
    starts = []
    following = 0  # where the next page with text starts
    for page in pages:
        starts.append(min(following, len(text)))
        if page:
            following += len(page) + 2
    return text, starts


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
            f"{SPLIT_IT}",
            "too_large",
        )


def _check_ocr_pages(count: int, limits: Limits) -> None:
    """Before the first scanned page is read: the pages OCR would read."""
    if count > limits.max_ocr_pages:
        raise ParseError(
            f"the PDF has {count:,} scanned pages (images without text) to read by OCR, over the limit of "
            f"{limits.max_ocr_pages:,} (DOCSUM_MAX_OCR_PAGES); split it into smaller files, or submit a copy with"
            " a text layer (most scanners' software can add one), and try again",
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
