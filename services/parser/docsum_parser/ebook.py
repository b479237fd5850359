"""E-books (EPUB): the chapters' text in reading order, read with zipfile and lxml.

The package document (OPF, found through META-INF/container.xml) lists the book's files (manifest)
and the order they are read in (spine): each spine item is a chapter, the unit its citations count.
About sixty lines of lxml do this; ebooklib would read every file of the book (pictures, fonts) into
memory for the same spine and manifest.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Iterator
from urllib.parse import unquote

import lxml.html
from lxml import etree

from .limits import Limits, too_many_chars
from .parse_error import ParseError, short_reason
from .zips import DAMAGED, check_archive

CONTAINER = "META-INF/container.xml"
EPUB_MIMETYPE = b"application/epub+zip"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF_NS = "{http://www.idpf.org/2007/opf}"
_XHTML_TYPES = frozenset({"application/xhtml+xml", "text/html"})
# No DTD loaded, no entity expanded, nothing fetched: the files are the book author's.
_XML_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
_HTML_PARSER = lxml.html.HTMLParser(no_network=True, remove_comments=True, huge_tree=False)


# Not text: skipped with what they hold.
_SKIPPED = frozenset({"script", "style", "head", "title", "nav", "svg", "math", "object", "iframe", "template"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# Elements that make a block of their own; inline ones (span, a, em) are part of their block's text.
_BLOCKS = frozenset(
    {"p", "div", "section", "article", "aside", "header", "footer", "blockquote", "pre", "li", "dt", "dd",
     "figcaption", "caption", "tr", "ul", "ol", "dl", "table", "tbody", "thead", "tfoot", "figure", "main",
     "body", "hr", "address", "center"}
)  # fmt: skip


def invalid_epub(reason: str) -> ParseError:
    return ParseError(
        f"EPUB is not a valid e-book ({reason}); export it again as EPUB from the program that made it and try again",
        "invalid_epub",
    )


def is_epub(members: dict[str, int]) -> bool:
    return CONTAINER in members and "mimetype" in members


def extract_epub(data: bytes, limits: Limits) -> tuple[str, list[int]]:
    """The book's text, chapter after chapter in spine order, and where each chapter starts in it. A
    chapter's blocks (headings as Markdown heading lines, paragraphs, list items, table rows) are joined
    by a blank line. A chapter without text still counts, so that chapter numbers follow the spine."""
    check_archive(data, "EPUB", CONTAINER, limits, invalid_epub)
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for path in _spine(archive):
                starts.append(length)
                root = lxml.html.document_fromstring(archive.read(path), parser=_HTML_PARSER)
                text = "\n\n".join(block for block in _chapter_blocks(root) if block.strip())
                if text:
                    parts.append(text)
                    length += len(text) + 2
                    if length > limits.max_chars:
                        raise too_many_chars(limits)
    except DAMAGED as exc:
        raise invalid_epub(short_reason(exc)) from exc
    if not starts:
        raise invalid_epub("its spine lists no chapter")
    return "\n\n".join(parts), starts


def _spine(archive: zipfile.ZipFile) -> list[str]:
    """The archive paths of the spine's XHTML documents, in reading order; the table of contents
    (the EPUB 3 navigation document) and items the book marks as not part of the reading order are
    left out."""
    container = etree.fromstring(archive.read(CONTAINER), _XML_PARSER)
    rootfile = container.find(f"{_CONTAINER_NS}rootfiles/{_CONTAINER_NS}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise ValueError(f"{CONTAINER} names no package document")
    opf_path = str(rootfile.get("full-path"))
    package = etree.fromstring(archive.read(opf_path), _XML_PARSER)
    base = posixpath.dirname(opf_path)
    manifest = {}
    for item in package.iterfind(f"{_OPF_NS}manifest/{_OPF_NS}item"):
        properties = (item.get("properties") or "").split()
        if item.get("media-type") in _XHTML_TYPES and "nav" not in properties and item.get("href"):
            href = unquote(str(item.get("href")).split("#")[0])
            manifest[item.get("id")] = posixpath.normpath(posixpath.join(base, href))
    spine = package.find(f"{_OPF_NS}spine")
    if spine is None:
        raise ValueError("the package document has no spine")
    return [
        manifest[ref.get("idref")]
        for ref in spine.iterfind(f"{_OPF_NS}itemref")
        if ref.get("idref") in manifest and ref.get("linear") != "no"
    ]


def _chapter_blocks(root: lxml.html.HtmlElement) -> Iterator[str]:
    body = root.find("body")
    yield from _blocks(body if body is not None else root)


def _blocks(element: lxml.html.HtmlElement) -> Iterator[str]:
    """The blocks of text under `element`: each heading, and each run of inline text between blocks."""
    run: list[str] = [element.text or ""]
    for child in element:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag in _SKIPPED or not tag:
            pass
        elif tag in _HEADINGS:
            yield _joined(run)
            run = []
            yield "#" * _HEADINGS[tag] + " " + " ".join(child.text_content().split())
        elif tag in _BLOCKS:
            yield _joined(run)
            run = []
            if tag == "tr":
                yield " | ".join(" ".join(cell.text_content().split()) for cell in child if isinstance(cell.tag, str))
            elif tag == "pre":
                yield child.text_content()
            else:
                yield from _blocks(child)
        elif tag == "br":
            run.append("\n")
        else:
            run.append(" ".join(_inline(child)))
        run.append(child.tail or "")
    yield _joined(run)


def _inline(element: lxml.html.HtmlElement) -> Iterator[str]:
    if element.tag not in _SKIPPED:
        yield element.text_content()


def _joined(run: list[str]) -> str:
    """Inline text as one block: spaces collapsed, line breaks (<br>) kept."""
    return "\n".join(" ".join(line.split()) for line in "".join(run).split("\n")).strip()
