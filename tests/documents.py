"""Deterministic test-document generators shared by unit and integration tests.

Everything here returns bytes or str built in memory, so tests never depend on files in the repo
(apart from the committed examples, which scripts/make_examples.py builds with these same helpers).
"""

from __future__ import annotations

import io
import random
import re
import unicodedata
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import docx
import pptx
import pypdfium2 as pdfium
from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont
from pptx.util import Inches
from pypdf import PdfReader, PdfWriter
from rapidfuzz.distance import Levenshtein

# A fixed timestamp keeps generated PDFs/DOCX byte-for-byte reproducible.
FIXED_TIME = datetime(2024, 1, 1, tzinfo=UTC)

# ("heading", level, text) | ("paragraph", text) | ("table", rows)
Block = tuple[str, int, str] | tuple[str, str] | tuple[str, Sequence[Sequence[str]]]


# --------------------------------------------------------------------------------------------- PDF


def make_pdf(pages: list[str]) -> bytes:
    """One PDF page per string (text wraps onto extra pages if it does not fit); latin-1 text only.

    Paragraphs are separated by blank lines in the input; multi_cell honours the newlines.
    """
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_TIME)
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 5.5, text)
    return bytes(pdf.output())


class _PrintedReport(FPDF):
    """Pages whose every one has a running title at its top and "Page N of M · printed <date>" at its
    foot, as word processors print them."""

    def __init__(self, title: str, printed: str, pages: int) -> None:
        super().__init__(format="A4")
        self.set_creation_date(FIXED_TIME)
        self.title_line, self.printed, self.total = title, printed, pages

    def header(self) -> None:
        self.set_font("Helvetica", size=9)
        self.cell(0, 6, self.title_line)
        self.ln(10)

    def footer(self) -> None:
        self.set_y(-15)
        self.set_font("Helvetica", size=9)
        self.cell(0, 6, f"Page {self.page_no()} of {self.total} \u00b7 printed {self.printed}", align="C")


def printed_report(bodies: Sequence[str], printed: str, title: str) -> bytes:
    """One page a body (each must fit its page), under a running `title` and over a footer that counts
    the pages and says when it was `printed`; latin-1 text only."""
    pdf = _PrintedReport(title, printed, len(bodies))
    pdf.set_auto_page_break(auto=False)  # one body a page: each page's text is known
    for body in bodies:
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        pdf.multi_cell(0, 5.5, body)
    return bytes(pdf.output())


def make_encrypted_pdf(text: str, user_password: str = "secret", owner_password: str = "owner") -> bytes:
    """A one-page PDF encrypted with AES-256.

    With the default non-empty user password it cannot be opened without the password; with
    user_password="" it is the common "owner-password only" PDF that any viewer opens.
    """
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([text]))))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# Scans: text drawn on a white page image, the pages put in a PDF as images only (no text layer), as a
# scanner's software writes them. DejaVu Serif for Latin text; WenQuanYi Micro Hei (installed by
# scripts/fonts.sh, which `make test` and `make bench` run) for Chinese.
SCAN_DPI = 150
_SCAN_FONTS = {
    False: "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    True: "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
}


def make_scanned_pdf(
    pages: Sequence[str], *, chinese: bool = False, size_in: tuple[float, float] = (5.8, 8.3), dpi: int = SCAN_DPI
) -> bytes:
    """One scanned page (an 8-bit grey image, 11 pt text) per string, A5 by default; paragraphs are separated
    by blank lines. No text layer: only OCR reads it."""
    images = [_scanned_page(text, chinese, size_in, dpi) for text in pages]
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=dpi)
    return out.getvalue()


def scanned_and_digital_pdf(scanned: str, digital: str) -> bytes:
    """A PDF of one scanned page (no text) followed by one born-digital page (a text layer)."""
    writer = PdfWriter()
    for data in (make_scanned_pdf([scanned]), make_pdf([digital])):
        writer.append(PdfReader(io.BytesIO(data)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


A4_IN = (8.27, 11.69)


def paged_scan(text: str, *, chinese: bool = False, size_in: tuple[float, float] = A4_IN) -> tuple[bytes, list[str]]:
    """`text` printed and scanned: its paragraphs laid on as few pages as hold them, as an images-only PDF,
    and the text drawn on each page."""
    pages: list[str] = []
    for paragraph in text.strip().split("\n\n"):
        longer = f"{pages[-1]}\n\n{paragraph}" if pages else paragraph
        if pages and _layout(longer, chinese, size_in, SCAN_DPI) is not None:
            pages[-1] = longer
        else:
            pages.append(paragraph)
    return make_scanned_pdf(pages, chinese=chinese, size_in=size_in), pages


def rendered_scan(pdf: bytes, dpi: int = SCAN_DPI) -> bytes:
    """A born-digital PDF printed and scanned: each page rendered by PDFium to an 8-bit grey image, the
    images put back into a PDF with no text layer."""
    document = pdfium.PdfDocument(pdf)
    try:
        images = [page.render(scale=dpi / 72, grayscale=True).to_pil().convert("L") for page in document]
    finally:
        document.close()
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=dpi)
    return out.getvalue()


@dataclass(frozen=True)
class _Layout:
    font: ImageFont.FreeTypeFont
    margin: int
    step: int
    lines: list[str]


def _layout(text: str, chinese: bool, size_in: tuple[float, float], dpi: int) -> _Layout | None:
    """Where `text` goes on one page at 11 pt, or None when it does not fit."""
    width, height = int(size_in[0] * dpi), int(size_in[1] * dpi)
    font = ImageFont.truetype(_SCAN_FONTS[chinese], round(11 / 72 * dpi))
    margin = round(0.5 * dpi)
    lines = _wrapped(text, font, width - 2 * margin, chinese)
    step = round(font.size * 1.5)
    if margin + step * len(lines) > height - margin // 2:
        return None
    return _Layout(font, margin, step, lines)


def _scanned_page(text: str, chinese: bool, size_in: tuple[float, float], dpi: int) -> Image.Image:
    layout = _layout(text, chinese, size_in, dpi)
    if layout is None:
        raise ValueError("the text does not fit on one scanned page: give less per page")
    page = Image.new("L", (int(size_in[0] * dpi), int(size_in[1] * dpi)), 255)
    draw = ImageDraw.Draw(page)
    for number, line in enumerate(layout.lines):
        draw.text((layout.margin, layout.margin + number * layout.step), line, font=layout.font, fill=0)
    return page


def _wrapped(text: str, font: ImageFont.FreeTypeFont, width: int, chinese: bool) -> list[str]:
    """The text's lines as drawn: words (Chinese: characters) to the width, a blank line between paragraphs."""
    lines: list[str] = []
    sep = "" if chinese else " "
    for paragraph in text.split("\n\n"):
        line = ""
        for token in list(paragraph) if chinese else paragraph.split():
            wider = line + sep + token if line else token
            if line and font.getlength(wider) > width:
                lines.append(line)
                line = token
            else:
                line = wider
        lines.extend([line, ""])
    return lines[:-1]


def character_error_rate(reference: str, read: str) -> float:
    """Edits (insertions, deletions, substitutions) from `reference` to `read` per character of `reference`.
    Both sides are compared with each run of whitespace as one space (OCR cannot know where a line was
    broken) and none beside a Chinese character (Chinese has no spaces between words), full-width forms
    folded (NFKC: an OCR'd "!" for "！" ends the same sentence). A space lost between two English words
    counts."""
    ref, got = (_compared(s) for s in (reference, read))
    return Levenshtein.distance(ref, got) / len(ref)


_SPACE_BY_CJK = re.compile(r" (?=[\u3000-\u9fff])|(?<=[\u3000-\u9fff]) ")


def _compared(text: str) -> str:
    return _SPACE_BY_CJK.sub("", " ".join(unicodedata.normalize("NFKC", text).split()))


def truncate(data: bytes, fraction: float = 0.5) -> bytes:
    """The first `fraction` of the bytes, like an interrupted upload or download."""
    return data[: int(len(data) * fraction)]


# -------------------------------------------------------------------------------------------- DOCX


def make_docx(blocks: Sequence[Block]) -> bytes:
    """Build a DOCX from ("heading", level, text), ("paragraph", text) and ("table", rows) blocks.

    Heading level 0 is the Title style, 1..9 are Heading 1..9.
    """
    document = docx.Document()
    props = document.core_properties
    props.created = props.modified = props.last_printed = FIXED_TIME.replace(tzinfo=None)
    props.author = props.last_modified_by = "docsum tests"
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            _, level, text = cast(tuple[str, int, str], block)
            document.add_heading(text, level=level)
        elif kind == "paragraph":
            document.add_paragraph(cast(tuple[str, str], block)[1])
        elif kind == "table":
            rows = [list(r) for r in cast(tuple[str, Sequence[Sequence[str]]], block)[1]]
            n_cols = max((len(r) for r in rows), default=1)
            table = document.add_table(rows=len(rows), cols=n_cols)
            table.style = "Table Grid"
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = str(value)
        else:
            raise ValueError(f"unknown block kind {kind!r}")
    out = io.BytesIO()
    document.save(out)
    return _fix_zip_timestamps(out.getvalue())


def _fix_zip_timestamps(data: bytes) -> bytes:
    # python-docx stamps every zip member with the current time; rewrite them for reproducibility.
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info.filename))
    return out.getvalue()


# -------------------------------------------------------------------------------------------- PPTX


@dataclass(frozen=True)
class Slide:
    """One slide: a title, text boxes, a table (rows of cells), a group of text boxes, speaker notes."""

    title: str = ""
    texts: Sequence[str] = ()
    table: Sequence[Sequence[str]] = ()
    grouped: Sequence[str] = ()
    notes: str = ""


def make_pptx(slides: Sequence[Slide]) -> bytes:
    """Build a PPTX with python-pptx, one slide (title-only layout) per `Slide`."""
    presentation = pptx.Presentation()
    props = presentation.core_properties
    props.created = props.modified = props.last_printed = FIXED_TIME.replace(tzinfo=None)
    props.author = props.last_modified_by = "docsum tests"
    layout = presentation.slide_layouts[5]  # "Title Only"
    for spec in slides:
        slide = presentation.slides.add_slide(layout)
        if spec.title:
            slide.shapes.title.text = spec.title
        else:
            slide.shapes.title._element.getparent().remove(slide.shapes.title._element)
        top = 1.5
        for text in spec.texts:
            slide.shapes.add_textbox(Inches(0.5), Inches(top), Inches(9), Inches(0.8)).text_frame.text = text
            top += 0.9
        if spec.table:
            n_cols = max(len(row) for row in spec.table)
            frame = slide.shapes.add_table(len(spec.table), n_cols, Inches(0.5), Inches(top), Inches(9), Inches(1))
            for r, row in enumerate(spec.table):
                for c, value in enumerate(row):
                    frame.table.cell(r, c).text = value
            top += 1.2
        if spec.grouped:
            group = slide.shapes.add_group_shape()
            for i, text in enumerate(spec.grouped):
                box = group.shapes.add_textbox(Inches(0.5 + 3 * i), Inches(top), Inches(2.8), Inches(0.8))
                box.text_frame.text = text
        if spec.notes:
            slide.notes_slide.notes_text_frame.text = spec.notes
    out = io.BytesIO()
    presentation.save(out)
    return _fix_zip_timestamps(out.getvalue())


# -------------------------------------------------------------------------------------------- EPUB


def make_epub(chapters: Sequence[tuple[str, Sequence[str]]], *, nav: bool = True) -> bytes:
    """Build an EPUB 3 with zipfile: one XHTML document per (title, paragraphs) chapter, in spine order,
    and (with `nav`) a navigation document, which is in the manifest but is not a chapter. The files are
    listed in the manifest in reverse, so that only the spine gives the reading order."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(_stored("mimetype"), "application/epub+zip")
        archive.writestr(
            _stored("META-INF/container.xml"),
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        items = []
        for n, (title, paragraphs) in enumerate(chapters, start=1):
            body = "".join(f"<p>{p}</p>" for p in paragraphs)
            archive.writestr(
                _stored(f"OEBPS/text/chapter {n}.xhtml"),
                '<?xml version="1.0" encoding="utf-8"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml">'
                f"<head><title>{title}</title><style>p {{ margin: 0 }}</style></head>"
                f"<body><section><h1>{title}</h1>{body}</section></body></html>",
            )
            items.append((f"c{n}", f"text/chapter%20{n}.xhtml"))
        manifest = "".join(
            f'<item id="{i}" href="{href}" media-type="application/xhtml+xml"/>' for i, href in reversed(items)
        )
        if nav:
            archive.writestr(
                _stored("OEBPS/nav.xhtml"),
                '<html xmlns="http://www.w3.org/1999/xhtml"><body><nav><ol>'
                + "".join(f"<li>{title}</li>" for title, _ in chapters)
                + "</ol></nav></body></html>",
            )
            manifest += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
        spine = ('<itemref idref="nav"/>' if nav else "") + "".join(f'<itemref idref="{i}"/>' for i, _ in items)
        archive.writestr(
            _stored("OEBPS/content.opf"),
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">docsum-test</dc:identifier>'
            "<dc:title>A test book</dc:title></metadata>"
            f"<manifest>{manifest}</manifest><spine>{spine}</spine></package>",
        )
    return out.getvalue()


def _stored(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
    return info


# -------------------------------------------------------------------------------------------- HTML


def make_html_page(title: str, sections: Sequence[tuple[str, Sequence[str]]]) -> bytes:
    """A saved web page: the article (a heading and its paragraphs per section) inside the chrome a real
    page has (a header with the site's navigation, a sidebar, a footer, scripts, styles, a frame, an
    image, a cookie banner). CHROME_WORDS are the chrome's words, none of which the article uses."""
    article = "".join(
        f"<h2>{heading}</h2>" + "".join(f"<p>{p}</p>" for p in paragraphs) for heading, paragraphs in sections
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>" + title + " | Harbourside Gazette</title>"
        "<style>body { font-family: Zebracolour; }</style>"
        '<script>window.trackVisitor("quokkametrics");</script></head><body>'
        '<header><a href="/">Harbourside Gazette</a><nav><ul><li><a href="/sport">Sportsdesk</a></li>'
        '<li><a href="/weather">Weatherwatch</a></li><li><a href="/subscribe">Subscribeplus</a></li></ul></nav>'
        "</header>"
        '<div class="cookie-banner">Cookieconsent: accept Cookieconsent to continue.</div>'
        f'<main><article><h1>{title}</h1>{article}<img src="http://127.0.0.1:9/tracker.png" alt="Pixelbeacon">'
        '<iframe src="http://127.0.0.1:9/frame.html">Framefallback</iframe></article></main>'
        '<aside class="sidebar"><h3>Trendingnow</h3><ul><li><a href="/x">Lotterywinner</a></li></ul></aside>'
        "<footer><p>Copyrightnotice Harbourside Gazette. Privacypolicy.</p></footer>"
        '<script>document.write("Scriptwritten");</script></body></html>'
    ).encode()


CHROME_WORDS = (
    "Zebracolour quokkametrics Sportsdesk Weatherwatch Subscribeplus Cookieconsent Pixelbeacon Framefallback"
    " Trendingnow Lotterywinner Copyrightnotice Privacypolicy Scriptwritten Harbourside"
).split()


# ------------------------------------------------------------------------------------ English prose

# Each theme gives the slots a coherent vocabulary, so a paragraph stays on one subject and
# sentence-ranking summarizers see repeated content words instead of uniform noise.
_EN_THEMES: dict[str, dict[str, list[str]]] = {
    "rivers": {
        "subject": ["the river", "the old harbour", "the ferry crossing", "the flood plain", "the canal"],
        "actors": ["the boatmen", "the town council", "the fishermen", "the mill owners", "local farmers"],
        "thing": [
            "the stone embankment",
            "the spring floods",
            "the cargo barges",
            "the water level",
            "the silt on the riverbed",
            "the wooden locks",
        ],
        "quality": ["muddy", "patient", "unpredictable", "generous", "slow", "restless"],
        "place": ["the market square", "the lower town", "the northern bank", "the grain warehouses", "the old bridge"],
    },
    "libraries": {
        "subject": ["the public library", "the reading room", "the county archive", "the lending desk"],
        "actors": [
            "the librarians",
            "students from the college",
            "retired teachers",
            "the volunteers",
            "young parents",
        ],
        "thing": [
            "the card catalogue",
            "the rare map collection",
            "the evening opening hours",
            "the donated books",
            "the heating system",
            "the interlibrary loans",
        ],
        "quality": ["quiet", "crowded", "underfunded", "welcoming", "old-fashioned", "surprisingly busy"],
        "place": ["the upstairs gallery", "the children's corner", "the basement stacks", "the front steps"],
    },
    "railways": {
        "subject": ["the branch line", "the night train", "the junction station", "the signal box"],
        "actors": [
            "the station staff",
            "daily commuters",
            "the track engineers",
            "the timetable planners",
            "the freight companies",
        ],
        "thing": [
            "the single track",
            "the winter timetable",
            "the level crossing",
            "the ticket prices",
            "the old steam locomotives",
            "the weekend engineering works",
        ],
        "quality": ["reliable", "crowded", "slow", "punctual", "noisy", "indispensable"],
        "place": ["the valley villages", "the coastal towns", "the main platform", "the goods yard"],
    },
    "gardens": {
        "subject": ["the community garden", "the allotment", "the orchard", "the greenhouse"],
        "actors": [
            "the gardeners",
            "the neighbours",
            "the beekeepers",
            "a group of schoolchildren",
            "the older residents",
        ],
        "thing": [
            "the tomato harvest",
            "the compost heaps",
            "the late frost",
            "the water butts",
            "the apple trees",
            "the seed exchange",
        ],
        "quality": ["overgrown", "productive", "peaceful", "fragile", "carefully planned", "sunny"],
        "place": ["the back lane", "the shared shed", "the south-facing wall", "the school fence"],
    },
    "software": {
        "subject": ["the billing service", "the deployment pipeline", "the message queue", "the old monolith"],
        "actors": [
            "the on-call engineers",
            "the platform team",
            "the product managers",
            "the new hires",
            "the database administrators",
        ],
        "thing": [
            "the nightly batch job",
            "the retry logic",
            "the error dashboards",
            "the test suite",
            "the configuration files",
            "the database migrations",
        ],
        "quality": [
            "fragile",
            "well tested",
            "slow to change",
            "surprisingly robust",
            "poorly documented",
            "overloaded",
        ],
        "place": ["the staging environment", "the incident channel", "the weekly review", "the shared runbook"],
    },
    "weather": {
        "subject": ["the coastal weather", "the monsoon season", "the mountain climate", "the long winter"],
        "actors": [
            "the forecasters",
            "the harbour pilots",
            "the hill farmers",
            "the road crews",
            "the lighthouse keepers",
        ],
        "thing": [
            "the morning fog",
            "the storm warnings",
            "the snowfall records",
            "the wind patterns",
            "the rain gauges",
            "the sudden thaw",
        ],
        "quality": ["harsh", "changeable", "mild", "dramatic", "gentle", "treacherous"],
        "place": ["the high pass", "the fishing villages", "the airfield", "the weather station"],
    },
}

_EN_TEMPLATES: list[str] = [
    "{actors} had watched {thing} for years before anyone thought to write down what they saw.",
    "In {season}, {subject} became {quality}, and {actors} adjusted their plans accordingly.",
    "Nobody could say exactly when {thing} began to change, but the records kept near {place} "
    "suggest that it happened slowly.",
    "{subject} shaped the daily routine of {actors} far more than any rule or schedule did.",
    "It is easy to forget how much {place} depended on {thing}.",
    "When {thing} caused trouble, {actors} met at {place} to decide what to do next.",
    "Some argued that {thing} brought more good than harm, while others saw only a source of worry.",
    "The most {quality} part of the story, however, is how {actors} learned to live with {subject}.",
    "Over the following decade, {actors} changed their approach to {thing} twice, each time more carefully.",
    "Visitors often describe {subject} as {quality}, yet people who live near {place} tend to disagree.",
    "A careful look at {thing} shows why {actors} were so cautious.",
    "Even today, {subject} is the first thing people mention when they talk about {place}.",
    "Every {season}, {actors} counted the days until they could check {thing} again.",
    "The lesson, if there is one, is that {subject} rewards those who pay attention.",
    "Why did {actors} keep returning to {place}?",
    "The answer has more to do with {thing} than with money.",
    "According to {actors}, {thing} mattered more than any single decision made at {place}.",
    "By the end of {season}, {subject} looked {quality} again, and the arguments faded.",
    "Few outsiders understood that {thing} and {subject} were really two sides of one problem.",
    "{actors} kept a small notebook about {thing}, and its pages are still read at {place}.",
    "What looked like a minor detail, {thing}, turned out to decide the fate of {subject}.",
    "There were years when {subject} seemed {quality} and years when it seemed almost forgotten.",
    "Nothing about {thing} was simple, and {actors} said so openly.",
    "Still, {actors} insisted that {subject} could be improved without losing its character.",
    "If {thing} had been handled differently, {place} might look very different today.",
    "Perhaps the clearest sign of progress is that {actors} now talk about {thing} calmly.",
]

_SEASONS = ["spring", "summer", "autumn", "winter", "the dry months", "the rainy season"]


def _capitalize(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def english_prose(n_chars: int, seed: int = 0) -> str:
    """Readable, varied English paragraphs of at least n_chars characters (overshoots by < 1 sentence).

    Deterministic for a given (n_chars, seed); paragraphs are separated by blank lines.
    """
    rng = random.Random(seed)

    def paragraph() -> list[str]:
        vocab = _EN_THEMES[rng.choice(sorted(_EN_THEMES))]
        sentences = []
        for template in rng.sample(_EN_TEMPLATES, rng.randint(4, 7)):
            slots = {key: rng.choice(words) for key, words in vocab.items()}
            sentences.append(_capitalize(template.format(season=rng.choice(_SEASONS), **slots)))
        return sentences

    return _assemble(paragraph, n_chars, sentence_sep=" ")


def _assemble(paragraph: Callable[[], list[str]], n_chars: int, sentence_sep: str) -> str:
    # Add whole sentences until the joined text reaches n_chars; `length` tracks len(result) exactly.
    paragraphs: list[str] = []
    length = -2  # no "\n\n" before the first paragraph
    while length < n_chars:
        taken: list[str] = []
        length += 2 - len(sentence_sep)
        for sentence in paragraph():
            taken.append(sentence)
            length += len(sentence_sep) + len(sentence)
            if length >= n_chars:
                break
        paragraphs.append(sentence_sep.join(taken))
    return "\n\n".join(paragraphs)


# ------------------------------------------------------------------------------------ Chinese prose

_ZH_THEMES: dict[str, dict[str, list[str]]] = {
    "河流": {
        "subject": ["这条河", "老码头", "渡口", "河边的堤岸", "城南的水闸"],
        "actors": ["船工们", "沿河的居民", "老渔民", "水利站的工程师", "住在桥边的人"],
        "thing": ["春天的汛期", "河面上的货船", "水位的变化", "两岸的柳树", "河底的淤泥"],
        "quality": ["安静", "浑浊", "温和", "难以预料", "慷慨"],
        "place": ["石桥下", "河湾里", "老街口", "码头旁的茶馆"],
    },
    "读书": {
        "subject": ["那间小书店", "学校的图书馆", "旧书摊", "社区阅览室"],
        "actors": ["学生们", "退休的老师", "年轻的父母", "图书管理员", "爱书的人"],
        "thing": ["借书的规矩", "泛黄的旧书", "夜里的阅读时间", "读书笔记", "一本难懂的书"],
        "quality": ["安静", "拥挤", "朴素", "温暖", "有些陈旧"],
        "place": ["窗边的座位上", "楼上的角落里", "巷子深处", "公园的长椅上"],
    },
    "城市": {
        "subject": ["这座城市", "老城区", "新修的地铁", "城东的菜市场"],
        "actors": ["上班族", "街坊邻居", "城市规划师", "外地来的年轻人", "小店的老板"],
        "thing": ["早高峰的人流", "老房子的改造", "街边的小吃", "公交线路的调整", "夜晚的灯光"],
        "quality": ["热闹", "忙碌", "包容", "嘈杂", "有活力"],
        "place": ["十字路口", "老街两旁", "广场中央", "地铁站门口"],
    },
    "四季": {
        "subject": ["山里的天气", "江南的梅雨季", "北方的冬天", "海边的秋天"],
        "actors": ["农民们", "护林员", "赶路的人", "渔村的老人", "孩子们"],
        "thing": ["清晨的薄雾", "突如其来的暴雨", "第一场雪", "田里的庄稼", "山坡上的茶树"],
        "quality": ["寒冷", "多变", "温润", "干燥", "清爽"],
        "place": ["山脚下", "田埂上", "村口的大树下", "半山腰的小路上"],
    },
}

_ZH_TEMPLATES: list[str] = [
    "{actors}常常在{place}谈起{thing}。",
    "到了{season}，{subject}就变得格外{quality}。",
    "没有人说得清{thing}是从什么时候开始改变的。",
    "对{actors}来说，{subject}比任何规定都更能影响日常生活。",
    "人们很容易忘记，{actors}的日子其实离不开{thing}。",
    "每当{thing}出了问题，{actors}就会聚在{place}商量办法。",
    "有人认为{thing}是一种福气，也有人觉得它是无尽的烦恼。",
    "最让人感慨的，是{actors}如何学会与{subject}相处。",
    "在后来的十年里，{actors}一点一点地改变了{thing}。",
    "外地人常说{subject}很{quality}，本地的{actors}却不这么看。",
    "仔细想想{thing}，就能明白{actors}为什么那样小心。",
    "直到今天，说起{subject}，{actors}首先想到的还是{thing}。",
    "为什么{actors}总是回到{place}呢？",
    "答案也许就藏在{thing}里！",
    "{actors}把关于{thing}的事情记在一个小本子上。",
    "看似不起眼的{thing}，最终决定了{subject}的命运。",
    "有些年份，{subject}显得很{quality}；有些年份，它几乎被人遗忘。",
    "{actors}坦白地说，{thing}从来都不简单。",
    "如果当初换一种方式对待{thing}，{subject}今天也许会完全不同。",
    "{season}的{subject}多么{quality}啊！",
    "{actors}相信，{subject}可以变得更好，同时又不失去原来的味道。",
    "也许最明显的变化是，{actors}如今谈起{thing}时已经很平静了。",
]

_ZH_SEASONS = ["春天", "夏天", "秋天", "冬天", "雨季", "农忙时节"]


def chinese_prose(n_chars: int, seed: int = 0) -> str:
    """Readable Chinese paragraphs (sentences end in 。！？) of at least n_chars characters.

    Deterministic for a given (n_chars, seed); paragraphs are separated by blank lines.
    """
    rng = random.Random(seed)

    def paragraph() -> list[str]:
        vocab = _ZH_THEMES[rng.choice(sorted(_ZH_THEMES))]
        sentences = []
        for template in rng.sample(_ZH_TEMPLATES, rng.randint(4, 7)):
            slots = {key: rng.choice(words) for key, words in vocab.items()}
            sentences.append(template.format(season=rng.choice(_ZH_SEASONS), **slots))
        return sentences

    return _assemble(paragraph, n_chars, sentence_sep="")
