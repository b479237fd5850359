"""Hostile documents, small on disk and built in memory: each expands far beyond what it looks like."""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib

from tests.documents import make_docx

_W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def docx_bomb(inflated_bytes: int, *, declared_bytes: int | None = 4096) -> bytes:
    """A DOCX whose word/document.xml inflates to about `inflated_bytes` (paragraphs of the same
    thousand characters, again and again) while its zip headers, local and central, declare
    `declared_bytes` (None: the truth). Deflate packs it about 350:1."""
    base = zipfile.ZipFile(io.BytesIO(make_docx([("paragraph", "A letter of no importance.")])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in base.infolist():
            if info.filename != "word/document.xml":
                archive.writestr(info, base.read(info.filename))
        head = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_W_NS}"><w:body>'.encode()
        tail = b"</w:body></w:document>"
        paragraph = b"<w:p><w:r><w:t>" + b"a" * 1000 + b"</w:t></w:r></w:p>"
        block = paragraph * (2**20 // len(paragraph))
        bomb = zipfile.ZipInfo("word/document.xml", date_time=(1980, 1, 1, 0, 0, 0))
        bomb.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(bomb, "w") as member:
            member.write(head)
            for _ in range(max(1, (inflated_bytes - len(head) - len(tail)) // len(block))):
                member.write(block)
            member.write(tail)
    if declared_bytes is None:
        return out.getvalue()
    return _declare_size(out.getvalue(), "word/document.xml", declared_bytes)


def _declare_size(data: bytes, name: str, size: int) -> bytes:
    """Overwrite the uncompressed size of member `name` in its local header and its central entry."""
    patched = bytearray(data)
    encoded = name.encode()
    for signature, size_at, name_length_at, name_at in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        at = patched.find(signature)
        while at >= 0:
            (length,) = struct.unpack_from("<H", patched, at + name_length_at)
            if patched[at + name_at : at + name_at + length] == encoded:
                struct.pack_into("<I", patched, at + size_at, size)
            at = patched.find(signature, at + 4)
    return bytes(patched)


def pdf_sharing_one_content_stream(pages: int, text: str = "The same page again.") -> bytes:
    """A PDF of `pages` pages that all draw the same content stream: a few dozen bytes per page."""
    content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    stream = zlib.compress(content)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (5 + i) for i in range(pages)) + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
        b" /Contents 4 0 R >>"
    )
    objects += [page] * pages
    return _pdf(objects)


def pdf_drawing_strings(pages: list[str]) -> bytes:
    """A PDF whose pages each draw one string (latin-1), line breaks and all: pypdf gives it back as it is,
    blank lines included, which text laid out by fpdf never has."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages)))
        + b"] /Count %d >>" % len(pages),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for number, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").replace("\n", "\\n")
        content = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % (5 + 2 * number)
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    return _pdf(objects)


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the catalog first), with a correct cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def one_line_text(n_bytes: int) -> bytes:
    """Words without a single line break."""
    word = b"endless "
    return word * (n_bytes // len(word))


def pdf_with_wrong_offsets(pages: int) -> bytes:
    """A readable PDF whose cross-reference table points 3 bytes past every object: pypdf repairs it,
    logging two warnings per object."""
    data = pdf_sharing_one_content_stream(pages)
    head, _, table = data.partition(b"xref\n")
    table = re.sub(rb"^(\d{10})(?= 00000 n)", lambda m: b"%010d" % (int(m.group(1)) + 3), table, flags=re.M)
    return head + b"xref\n" + table


def pdf_with_lone_surrogate(text: str = "A glyph maps to a lone surrogate: A, and the words go on.") -> bytes:
    """A one-page PDF whose font's ToUnicode CMap maps the glyph of "A" to <D800>, a lone UTF-16
    surrogate: pypdf decodes it with "surrogatepass", so the extracted text holds U+D800, which UTF-8
    (and PostgreSQL) cannot hold. The other glyphs have no mapping and read as themselves."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"/CMapName /LoneSurrogate def /CMapType 2 def\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n"
        b"1 beginbfchar <41> <D800> endbfchar\n"
        b"endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )
    content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
        b" /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream",
    ]
    return _pdf(objects)


def with_padding_member(document: bytes, name: str, inflated_bytes: int) -> bytes:
    """`document` (a zip: PPTX, EPUB) with one more member, `name`, of `inflated_bytes` zeros: deflate
    packs it about 1000:1, so a small file unpacks past a cap."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(document)) as base, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in base.infolist():
            archive.writestr(info, base.read(info.filename))
        padding = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        padding.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(padding, "w") as member:
            block = bytes(2**20)
            for _ in range(inflated_bytes // len(block)):
                member.write(block)
    return out.getvalue()


def with_many_members(document: bytes, folder: str, count: int) -> bytes:
    """`document` (a zip: PPTX, EPUB) with `count` more empty members under `folder`."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(document)) as base, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in base.infolist():
            archive.writestr(info, base.read(info.filename))
        for n in range(count):
            archive.writestr(zipfile.ZipInfo(f"{folder}/{n}", date_time=(1980, 1, 1, 0, 0, 0)), b"")
    return out.getvalue()
