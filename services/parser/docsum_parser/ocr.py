"""OCR of one scanned PDF page: PDFium renders it, Tesseract reads it (English and Simplified Chinese).

Imported in the parse worker only, for a page pdf.py found without text: the parser's own process never
loads PDFium or Tesseract. Tesseract's library comes inside the tesserocr wheel and its trained data from
Debian's packages (scripts/tesseract.sh): nothing is downloaded at run time.

Measured on the scans the tests make (pages of generated English and Chinese prose drawn with Pillow at
150 and 200 dpi, put in a PDF as images only), against rapidocr-onnxruntime 1.4.4 (its models inside
the wheel): Tesseract 0.0% character errors in English and 1.0-1.2% in Chinese, 1-3.5 s a page on a
shared 2-core machine; rapidocr 18.5% in English (it drops the spaces between words) and 0.0% in
Chinese, 9.5 s a page.
"""

from __future__ import annotations

import os
import re
from functools import cache

# Tesseract's OpenMP threads would compete with the parser and the other services for the cores: one
# page is read by one thread (set before the library loads).
os.environ.setdefault("OMP_THREAD_LIMIT", "1")

import pypdfium2 as pdfium  # noqa: E402
import tesserocr  # noqa: E402

from .limits import OcrConfig  # noqa: E402
from .parse_error import ParseError  # noqa: E402

# The resolution a page is drawn at for Tesseract: 200 dpi reads 10-11 pt text of 150-300 dpi scans
# within 1.5% (300 dpi took 40% longer for nothing better).
RENDER_DPI = 200
# Pixels a page may be drawn with at most (an A4 page at 200 dpi is 3.9 million): a page declared
# metres wide would otherwise ask for gigabytes.
MAX_PIXELS = 40_000_000

# Whitespace Tesseract puts between two Chinese characters (or a character and its punctuation) is no
# space of the text.
_CJK = r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]"
_CJK_GAP = re.compile(rf"(?<={_CJK})[ \t]+(?={_CJK})")


def read_page(data: bytes, index: int, config: OcrConfig) -> str:
    """The text of page `index` (from 0) of the PDF `data`, as Tesseract reads it."""
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise ParseError(f"PDF is damaged or truncated: {exc}; re-export it and try again", "damaged") from exc
    try:
        page = document[index]
        width, height = page.get_size()  # points, 1/72 inch
        scale = RENDER_DPI / 72
        if width * height * scale * scale > MAX_PIXELS:
            scale = (MAX_PIXELS / (width * height)) ** 0.5
        image = page.render(scale=scale, grayscale=True).to_pil()
    finally:
        document.close()
    api = _engine(config.tessdata, config.languages)
    api.SetImage(image)
    text = api.GetUTF8Text()
    api.Clear()
    return _CJK_GAP.sub("", text)


@cache
def _engine(tessdata: str, languages: str) -> tesserocr.PyTessBaseAPI:
    """One engine per worker, kept between pages: loading the Chinese data takes longer than a page."""
    if not all(os.path.isfile(os.path.join(tessdata, f"{lang}.traineddata")) for lang in languages.split("+")):
        # An installation fault, not the document's: retried, then dead-lettered with this reason.
        raise RuntimeError(
            f"Tesseract's data for {languages} is not in {tessdata} (DOCSUM_OCR_TESSDATA): run scripts/tesseract.sh"
        )
    # One block of text per page: Tesseract's automatic page layout dropped whole lines of the Chinese
    # scans (5-14% character errors where one block kept them, 1.0-1.2%).
    return tesserocr.PyTessBaseAPI(path=tessdata, lang=languages, psm=tesserocr.PSM.SINGLE_BLOCK)
