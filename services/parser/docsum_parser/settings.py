"""The parser's settings: the shared ones, the intake's and the size levels, and its own caps and worker."""

from __future__ import annotations

from pydantic import Field

from docsum_shared.settings import IntakeSettings, SizeSettings


class ParserSettings(SizeSettings, IntakeSettings):
    # Caps on what one document may expand into
    # A document over one FAILS, with a message naming it: text extracted (characters), pages of a PDF
    # (counted before any text is read), the bytes a DOCX's, PPTX's or EPUB's parts really inflate to
    # (counted while inflating), the files such an archive holds (counted before inflating any), and the
    # bytes of a web page's HTML. The chunks a document may be cut into are the chunker's cap.
    max_document_chars: int = Field(5_000_000, ge=1_000)
    max_pdf_pages: int = Field(2_000, ge=1)
    max_docx_unzipped_bytes: int = Field(256 * 2**20, ge=2**20)
    max_zip_entries: int = Field(10_000, ge=100)
    max_html_bytes: int = Field(16 * 2**20, ge=2**16)
    # Pages of a PDF drawn from images without text (scans) are read by OCR (Tesseract), each stored as it
    # is read; a PDF with more such pages than this FAILS before the first is read.
    max_ocr_pages: int = Field(500, ge=1)
    # Where Tesseract's trained data is (Debian's, installed by scripts/tesseract.sh), and the languages a
    # scanned page is read in ("+" between two).
    ocr_tessdata: str = "/usr/share/tesseract-ocr/5/tessdata"
    ocr_languages: str = Field("eng+chi_sim", pattern=r"^[a-z_]+(\+[a-z_]+)*$")
    # Each document is parsed in a worker process under these limits (wall clock, address space).
    parse_timeout_s: float = Field(120.0, gt=0)
    parse_memory_bytes: int = Field(2**30, ge=256 * 2**20)
    # The worker starts with the service (~20 MB before its first document) and stops after this long
    # without a document (0: never), so an idle parser holds no worker (with the PDF and Word libraries,
    # ~90 MB); the next document starts another and waits for it (~0.1 s, more with those libraries).
    parse_worker_idle_s: float = Field(300.0, ge=0)
