"""Word (DOCX) text, block by block, with python-docx and lxml: what extract.extract_text calls for a DOCX."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import docx
from docx.exceptions import PythonDocxError
from docx.opc.exceptions import OpcError
from docx.text.paragraph import Paragraph
from lxml import etree

from .limits import Limits, too_many_chars
from .parse_error import ParseError, short_reason
from .zips import DAMAGED, check_archive

_HEADING_STYLE = re.compile(r"heading ([1-9])", re.IGNORECASE)
_DOCX_ERRORS = (PythonDocxError, OpcError, *DAMAGED)


def _invalid_docx(reason: str) -> ParseError:
    return ParseError(
        f"DOCX is not a valid Word document ({reason}); open it in Word or LibreOffice, save it as .docx and try again",
        "invalid_docx",
    )


def extract_docx(data: bytes, limits: Limits) -> tuple[str, list[int]]:
    """The document's text, its blocks (paragraphs, tables, text boxes) joined by a blank line, and where
    each block starts in it. Blocks of only whitespace are left out."""
    # python-docx inflates every part in memory: first make sure they really fit.
    check_archive(data, "DOCX", "word/document.xml", limits, _invalid_docx)
    blocks: list[str] = []
    chars = 0
    try:
        document = docx.Document(io.BytesIO(data))
        for block in _DocxReader(document).blocks(document.element.body):
            if block.strip():
                blocks.append(block)
                chars += len(block) + 2
                if chars > limits.max_chars:
                    raise too_many_chars(limits)
    except _DOCX_ERRORS as exc:
        raise _invalid_docx(short_reason(exc)) from exc
    # A blank line between blocks keeps paragraph boundaries visible to the chunker.
    starts = []
    start = 0
    for block in blocks:
        starts.append(start)
        start += len(block) + 2
    return "\n\n".join(blocks), starts


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
