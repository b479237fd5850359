"""Size levels: how a document's text is cut and merged, decided by its length in characters."""

from enum import StrEnum


class SizeLevel(StrEnum):
    """How a document's text is cut and merged, decided by its length in characters."""

    SMALL = "SMALL"  # one chunk: the chunk summary is the document summary
    MEDIUM = "MEDIUM"
    LARGE = "LARGE"


def size_level(text_chars: int, *, small_max: int = 8_000, medium_max: int = 100_000) -> SizeLevel:
    if text_chars <= small_max:
        return SizeLevel.SMALL
    if text_chars <= medium_max:
        return SizeLevel.MEDIUM
    return SizeLevel.LARGE
