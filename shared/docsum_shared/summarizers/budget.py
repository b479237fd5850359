"""Token budgets without a tokenizer: estimate a request's prompt size, and make requests fit.

The estimate is per script and deliberately on the high side — about 1 token per 3.2 Latin-script
characters (real tokenizers give ~4) and 1 per CJK character — so that a request we judge to fit
does fit. `TokenCalibration` narrows it with the usage the provider reports, never below the
provider's own count.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace

from ..text import estimate_tokens_upper
from .base import SummaryKind, SummaryRequest
from .prompts import build_messages

_PER_MESSAGE = 4  # role and framing tokens of the chat format
# What a summary answer costs at most, reserved in the budget and the rate limiter.
COMPLETION_RESERVE = 600


estimate_text_tokens = estimate_tokens_upper


class TokenCalibration:
    """Ratio of the provider's reported prompt tokens to our estimate, learnt per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ratio = 1.0
        self._observed = 0

    def observe(self, estimated: int, reported: int) -> None:
        if estimated <= 0 or reported <= 0:
            return
        with self._lock:
            seen = reported / estimated
            self._observed += 1
            # Drift towards what the provider reports, but follow an under-estimate at once.
            self.ratio = min(2.0, max(0.5, seen, self.ratio * 0.9 + seen * 0.1))


def estimate_request_tokens(request: SummaryRequest, calibration: TokenCalibration | None = None) -> int:
    raw = 0
    for message in build_messages(request):
        raw += estimate_text_tokens(str(message.get("content", ""))) + _PER_MESSAGE
    ratio = max(1.0, calibration.ratio) if calibration else 1.0
    return math.ceil(raw * ratio)


def fits(request: SummaryRequest, budget: int | None, calibration: TokenCalibration | None = None) -> bool:
    return budget is None or estimate_request_tokens(request, calibration) + COMPLETION_RESERVE <= budget


def fit_chunk_request(
    request: SummaryRequest, budget: int | None, calibration: TokenCalibration | None = None
) -> SummaryRequest:
    """Shrink a chunk request until it fits: first the contexts, then the chunk text itself."""
    if fits(request, budget, calibration):
        return request
    request = replace(request, context_before="", context_after="")
    text = request.texts[0]
    while not fits(request, budget, calibration) and len(text) > 20:
        text = text[: int(len(text) * 0.8)]
        request = replace(request, texts=(text,))
    return request


def group_to_fit(
    request: SummaryRequest, budget: int, calibration: TokenCalibration | None = None
) -> list[tuple[int, int]]:
    """Split a merge request's texts into consecutive groups whose merge requests each fit the budget.

    Returns [start, end) index ranges. A text that does not fit even alone is a group of its own
    (the caller trims it).
    """
    groups: list[tuple[int, int]] = []
    start = 0
    n = len(request.texts)
    while start < n:
        end = start + 1
        while end < n and fits(_part(request, start, end + 1), budget, calibration):
            end += 1
        groups.append((start, end))
        start = end
    return groups


def trim_to_fit(request: SummaryRequest, budget: int, calibration: TokenCalibration | None = None) -> SummaryRequest:
    """Cut every text by the same share until the request fits: the last resort that makes merging end."""
    texts = list(request.texts)
    while not fits(replace(request, texts=tuple(texts)), budget, calibration):
        if all(len(t) <= 20 for t in texts):
            break
        texts = [t[: max(20, int(len(t) * 0.8))] for t in texts]
    return replace(request, texts=tuple(texts))


def _part(request: SummaryRequest, start: int, end: int) -> SummaryRequest:
    labels = request.labels[start:end] if request.labels else ()
    return replace(request, texts=request.texts[start:end], labels=labels)


def part_of(request: SummaryRequest, start: int, end: int) -> SummaryRequest:
    """The merge request of one group of texts (with their labels, for a task merge)."""
    return _part(request, start, end)


def next_level(request: SummaryRequest, results: list[str]) -> SummaryRequest:
    """The merge request over the groups' results; a task merge labels them by part."""
    labels = tuple(f"part {i + 1}" for i in range(len(results))) if request.kind is SummaryKind.TASK else ()
    return replace(request, texts=tuple(results), labels=labels)
