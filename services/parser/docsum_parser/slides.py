"""PowerPoint (PPTX) text, slide by slide, with python-pptx: what extract.extract_text calls for a PPTX."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

import pptx
from pptx.exc import PythonPptxError
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.slide import Slide

from .limits import Limits, too_many_chars
from .parse_error import ParseError, short_reason
from .zips import DAMAGED, check_archive

PRESENTATION_PART = "ppt/presentation.xml"
_PPTX_ERRORS = (PythonPptxError, AttributeError, TypeError, *DAMAGED)


def invalid_pptx(reason: str) -> ParseError:
    return ParseError(
        f"PPTX is not a valid PowerPoint presentation ({reason}); open it in PowerPoint or LibreOffice, save it"
        " as .pptx and try again",
        "invalid_pptx",
    )


def extract_pptx(data: bytes, limits: Limits) -> tuple[str, list[int]]:
    """The presentation's text, slide after slide, and where each slide starts in it.

    A slide is its title (as a Markdown heading, so the chunker can cut between slides), then the text
    of its shapes in the order the slide lists them (text frames, tables a row a line, the shapes inside
    groups), then its speaker notes. Blocks are joined by a blank line; a slide without text still counts,
    so that slide numbers stay those PowerPoint shows. Pictures, charts and SmartArt are not read.
    """
    # python-pptx inflates every part (pictures too) in memory: first make sure they really fit.
    check_archive(data, "PPTX", PRESENTATION_PART, limits, invalid_pptx)
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
        for slide in presentation.slides:
            starts.append(length)
            text = "\n\n".join(block for block in _slide_blocks(slide) if block.strip())
            if text:
                parts.append(text)
                length += len(text) + 2
                if length > limits.max_chars:
                    raise too_many_chars(limits)
    except _PPTX_ERRORS as exc:
        raise invalid_pptx(short_reason(exc)) from exc
    return "\n\n".join(parts), starts


def _slide_blocks(slide: Slide) -> Iterator[str]:
    title = slide.shapes.title
    if title is not None and title.has_text_frame and title.text_frame.text.strip():
        yield "# " + " ".join(title.text_frame.text.split())
    yield from _shape_blocks(shape for shape in slide.shapes if title is None or shape.shape_id != title.shape_id)
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        if notes is not None and notes.text.strip():
            yield "Speaker notes: " + notes.text


def _shape_blocks(shapes: Iterable[BaseShape]) -> Iterator[str]:
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shape_blocks(shape.shapes)
        elif getattr(shape, "has_table", False):
            # A merged cell's text is in its first cell; the cells it spans over are empty.
            rows = (
                " | ".join(" ".join(cell.text.split()) for cell in row.cells if not cell.is_spanned)
                for row in shape.table.rows  # type: ignore[attr-defined]
            )
            yield "\n".join(row for row in rows if row.strip(" |"))
        elif shape.has_text_frame:
            yield shape.text_frame.text  # type: ignore[attr-defined]
