"""The summarizer backends' interface: one request shape for chunk, document and task summaries.

A backend turns a `SummaryRequest` into a `SummaryResult`. The chunk summarizer calls it once per chunk;
the merger calls it to merge chunk summaries into a document summary and document summaries into a
task summary. Backends are stateless and safe to share between concurrent calls.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from docsum_shared.cited import Support
from docsum_shared.options import Mode, TaskOptions


class SummaryKind(StrEnum):
    CHUNK = "chunk"  # summarize one chunk of a document's text
    DOCUMENT = "document"  # merge chunk summaries into one document summary
    TASK = "task"  # merge document summaries into one task summary


@dataclass(frozen=True)
class SummaryRequest:
    kind: SummaryKind
    # CHUNK: one element, the chunk text. DOCUMENT/TASK: the summaries to merge, in order.
    texts: tuple[str, ...]
    # CHUNK only: the text just before the chunk (already summarized elsewhere) and just after it.
    context_before: str = ""
    context_after: str = ""
    # A title for DOCUMENT/TASK merges (file name or task title); TASK: the file names of `texts`.
    title: str = ""
    labels: tuple[str, ...] = field(default_factory=tuple)
    # What the submitter asked for. language: "" = the text's own language, else e.g. "en", "zh", "French";
    # length: "brief" | "" (standard) | "detailed"; style: "" (prose) | "bullets".
    language: str = ""
    length: str = ""
    style: str = ""
    # The answer's bound in tokens (0: the backend's default), and whether this asks again, shorter,
    # after an answer was cut at that bound.
    max_tokens: int = 0
    shorter: bool = False

    def asked(self, options: TaskOptions) -> SummaryRequest:
        """This request as the task's submitter asked for it (language, length, style)."""
        return replace(
            self,
            language=options.language or "",
            length="" if options.length == "standard" else options.length,
            style="" if options.style == "prose" else options.style,
        )


@dataclass(frozen=True)
class Span:
    """A range of a request's text: `texts[source][start:end]`."""

    source: int  # the index in `SummaryRequest.texts`
    start: int
    end: int


@dataclass(frozen=True)
class SummarySentence:
    """A sentence of a summary and the ranges of its request's texts it rests on (none: it is unsupported,
    or nothing could be told)."""

    text: str
    spans: tuple[Span, ...]
    support: Support = "cited"

    @classmethod
    def quoting(cls, text: str, source: int, start: int, end: int) -> SummarySentence:
        """A sentence that quotes one range, `texts[source][start:end]`."""
        return cls(text, (Span(source, start, end),))


@dataclass(frozen=True)
class SummaryResult:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False  # cut at max_tokens even when asked for a shorter answer
    # The tier the provider answered at, which is what it costs: "realtime" (its default), "flex", or
    # "batch" (a line of the provider's batch).
    tier: str = "realtime"
    # The provider requests it took: an answer cut at its bound is asked for again, shorter (both paid).
    requests: int = 1
    # Each sentence of `text`, in order, with its source; empty when the backend does not say.
    sentences: tuple[SummarySentence, ...] = ()
    # How long the provider took to answer (0 for an answer from the cache): not part of the answer.
    seconds: float = field(default=0.0, compare=False)


class SummarizerBackend(abc.ABC):
    #: Identifies what produced a summary (stored beside it, part of the cache key).
    model: str
    #: What else it sends that changes an answer (e.g. a frequency penalty): part of the cache key too.
    sampling: Mapping[str, object] = MappingProxyType({})

    @abc.abstractmethod
    async def summarize(self, request: SummaryRequest, mode: Mode = "realtime") -> SummaryResult: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default backend holds none."""
