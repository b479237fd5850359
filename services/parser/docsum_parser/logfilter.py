"""Library warnings, collapsed per document.

pypdf logs one line for every broken object it repairs or skips: one malformed PDF can write tens of
thousands of them. While a document is parsed (`one_document`), the first `KEEP` records of each library
pass; the rest are counted, and one line says how many were left out:

    pypdf: 16,583 more warnings suppressed for document 3f2a...

Records logged outside a document pass untouched.

URIs, in every record the parser's log handlers write (`redact_uris`), are shown without userinfo,
query or fragment: a presigned URL's signature or a password in a `source_uri` never reaches the log,
whether the parser, httpx or an exception's text wrote it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from .uris import URI_IN_TEXT, shown

KEEP = 5
LIBRARIES = ("pypdf",)

log = logging.getLogger("docsum_parser")


@dataclass
class _Document:
    label: str
    seen: Counter[str] = field(default_factory=Counter)
    suppressed: Counter[str] = field(default_factory=Counter)


# Per thread of execution (asyncio.to_thread copies it), so documents parsed side by side count apart.
_current: ContextVar[_Document | None] = ContextVar("docsum_parser_document", default=None)


class CollapseWarnings(logging.Filter):
    """Lets the first `keep` records of each library through per document and counts the others."""

    def __init__(self, keep: int = KEEP) -> None:
        super().__init__()
        self.keep = keep

    def filter(self, record: logging.LogRecord) -> bool:
        document = _current.get()
        if document is None:
            return True
        library = record.name.partition(".")[0]
        document.seen[library] += 1
        if document.seen[library] <= self.keep:
            return True
        document.suppressed[library] += 1
        return False


class _ToRoot(logging.Handler):
    """pypdf logs through its modules' loggers ("pypdf._reader", "pypdf.generic._data_structures"), and a
    filter on the "pypdf" logger itself never sees records that only propagate through it. So "pypdf"
    gets this handler instead, with the filter on it: it passes what the filter lets through to the root
    logger's handlers, and "pypdf" stops propagating."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger().handle(record)


def install(keep: int = KEEP) -> None:
    """Collapse the libraries' warnings in this process (idempotent)."""
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        if any(isinstance(h, _ToRoot) for h in logger.handlers):
            continue
        handler = _ToRoot()
        handler.addFilter(CollapseWarnings(keep))
        logger.addHandler(handler)
        logger.propagate = False


@contextmanager
def one_document(label: str) -> Iterator[None]:
    """Count the libraries' warnings for document `label`; on the way out, say how many were suppressed."""
    document = _Document(label)
    token = _current.set(document)
    try:
        yield
    finally:
        _current.reset(token)
        for library, count in sorted(document.suppressed.items()):
            log.warning("%s: %s more warnings suppressed for document %s", library, f"{count:,}", label)


class RedactUris(logging.Filter):
    """Rewrites each URI of a record's message as `uris.shown` gives it (no userinfo, no query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = URI_IN_TEXT.sub(lambda m: shown(m.group()), message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def redact_uris() -> None:
    """Put `RedactUris` on every handler of the root logger (idempotent): call it once logging is
    configured, so that it sees every library's records too."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactUris) for f in handler.filters):
            handler.addFilter(RedactUris())
