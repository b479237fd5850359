"""How far one document may expand, and the refusal of a document over a limit."""

from __future__ import annotations

from dataclasses import dataclass

from .parse_error import ParseError

SPLIT_IT = "split it into smaller files and try again"


@dataclass(frozen=True)
class Limits:
    """How far one document may expand; each is checked as early as it can be measured.

        `max_chars`: characters of text (as extracted, and again once normalized); extraction stops as
        soon as it is passed. `max_pdf_pages`: pages of a PDF, checked before any text is extracted.
        `max_docx_unzipped_bytes`: the bytes all parts of a zip-based document (DOCX, PPTX, EPUB) really
        inflate to, counted while inflating them (the sizes a zip declares are not trusted); `max_zip_entries`:
        the files such an archive may hold, counted before any is inflated. `max_html_bytes`: the size of a
        web page's HTML, checked before it is parsed. `max_ocr_pages`: the pages of a PDF without text that are
    read by OCR, counted before the first is read. The defaults are the settings'.
    """

    max_chars: int = 5_000_000
    max_pdf_pages: int = 2_000
    max_docx_unzipped_bytes: int = 256 * 2**20
    max_zip_entries: int = 10_000
    max_html_bytes: int = 16 * 2**20
    max_ocr_pages: int = 500


@dataclass(frozen=True)
class OcrConfig:
    """Where Tesseract's trained data is, and which of them a scanned page is read with."""

    tessdata: str = "/usr/share/tesseract-ocr/5/tessdata"
    languages: str = "eng+chi_sim"


DEFAULT_LIMITS = Limits()


def size_label(n: int) -> str:
    """A byte count as a person would write it: 256 MiB, 1 GiB, 1,500 bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


def too_many_chars(limits: Limits) -> ParseError:
    return ParseError(
        f"the document's text is longer than the limit of {limits.max_chars:,} characters "
        f"(DOCSUM_MAX_DOCUMENT_CHARS); {SPLIT_IT}",
        "too_large",
    )
