"""The one error of text extraction: what the user sees when a document cannot be turned into text."""

from __future__ import annotations

import re


class ParseError(Exception):
    """The document cannot be turned into text; str(e) tells the user what to do about it.

    `kind` is a stable machine-readable tag (empty, unsupported, encrypted, damaged, invalid_docx,
    encoding, no_text, too_large; from the parse worker: timeout, out_of_memory, worker_stopped) for
    metrics and tests; the message is what the user sees.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def short_reason(exc: BaseException) -> str:
    """One line of a library's exception, short enough to show a user."""
    lines = str(exc).strip().splitlines()
    # pypdf likes to append raw bytes (b'\x8c...' @offset) that mean nothing to a user.
    line = re.split(r" (?:starting with )?b['\"]", lines[0])[0].rstrip(" .:") if lines else ""
    line = line or type(exc).__name__
    return line if len(line) <= 100 else line[:97] + "..."
