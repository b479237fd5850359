"""Token budgets without a tokenizer: estimate a request's prompt size, and make requests fit.

The estimate is per script and deliberately on the high side — about 1 token per 3.2 Latin-script
characters (real tokenizers give ~4) and 1 per CJK character — so that a request we judge to fit
does fit. `TokenCalibration` narrows it with the usage the provider reports, never below the
provider's own count.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import replace

from docsum_shared.text import estimate_tokens_upper, sentence_spans

from .base import SummaryKind, SummaryRequest
from .openai.prompts import build_messages

_PER_MESSAGE = 4  # role and framing tokens of the chat format
# What a summary answer costs at most, reserved in the budget and the rate limiter (a quarter of a
# small budget at most, so that a small window still has room for the prompt).
COMPLETION_RESERVE = 600
# A chunk too long for the budget is summarized in parts; a part shorter than this is no summary
# worth paying for, so a budget that cannot hold it fails the chunk instead.
MIN_PART_CHARS = 100


class TokenCalibration:
    """Ratio of the provider's reported prompt tokens to our estimate, learnt per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ratio = 1.0

    def observe(self, estimated: int, reported: int) -> None:
        if estimated <= 0 or reported <= 0:
            return
        with self._lock:
            seen = reported / estimated
            # Drift towards what the provider reports, but follow an under-estimate at once.
            self.ratio = min(2.0, max(0.5, seen, self.ratio * 0.9 + seen * 0.1))


def completion_reserve(budget: int | None, request: SummaryRequest | None = None) -> int:
    """The room kept for the answer: the request's bound (or COMPLETION_RESERVE), at most a quarter of
    the budget, so that a small window still has room for the prompt."""
    wanted = request.max_tokens if request is not None and request.max_tokens else COMPLETION_RESERVE
    return wanted if budget is None else min(wanted, budget // 4)


def estimate_request_tokens(request: SummaryRequest, calibration: TokenCalibration | None = None) -> int:
    ratio = max(1.0, calibration.ratio) if calibration else 1.0
    return math.ceil(_prompt_tokens(request) * ratio)


@functools.lru_cache(maxsize=256)
def _prompt_tokens(request: SummaryRequest) -> int:
    """The upper estimate of `request`'s prompt (kept for the requests in hand: planned, then sent)."""
    return sum(estimate_tokens_upper(str(m.get("content", ""))) + _PER_MESSAGE for m in build_messages(request))


def fits(request: SummaryRequest, budget: int | None, calibration: TokenCalibration | None = None) -> bool:
    return (
        budget is None or estimate_request_tokens(request, calibration) + completion_reserve(budget, request) <= budget
    )


def plan_chunk(
    request: SummaryRequest, budget: int | None, calibration: TokenCalibration | None = None
) -> list[SummaryRequest] | None:
    """The requests that summarize a chunk within the budget: the request itself when it fits, else
    without its contexts, else its text in consecutive parts (at sentence ends where it can) whose
    summaries together are the chunk's. No text is ever dropped: None when even a part of
    MIN_PART_CHARS does not fit — the budget cannot summarize this chunk."""
    if fits(request, budget, calibration):
        return [request]
    bare = replace(request, context_before="", context_after="")
    if fits(bare, budget, calibration):
        return [bare]
    text = request.texts[0]

    def fits_text(start: int, end: int) -> bool:
        return fits(replace(bare, texts=(text[start:end],)), budget, calibration)

    parts: list[SummaryRequest] = []
    spans = sentence_spans(text) or [(0, len(text))]
    start = 0
    i = 0
    while start < len(text):
        # Take whole sentences while they fit; a part still short of MIN_PART_CHARS is filled up with
        # as much of the next sentence as fits (a sentence too long alone is cut where it fits).
        end = start
        while i < len(spans) and fits_text(start, spans[i][1]):
            end = spans[i][1]
            i += 1
        # (the whitespace after the last sentence is no text: counted, a short last sentence followed
        # by a blank line could never reach it, and the chunk would fail)
        wanted = min(MIN_PART_CHARS, len(text.rstrip()) - start)
        if end - start < wanted:
            low, high = end, spans[i][1] if i < len(spans) else len(text)
            while high - low > 1:  # the longest prefix of the next sentence that fits
                middle = (low + high) // 2
                low, high = (middle, high) if fits_text(start, middle) else (low, middle)
            end = low
            if end - start < wanted:
                return None
        if i >= len(spans):
            end = len(text)  # trailing whitespace after the last sentence
        parts.append(replace(bare, texts=(text[start:end].strip(),)))
        start = end
    return parts


def group_to_fit(
    request: SummaryRequest,
    budget: int,
    calibration: TokenCalibration | None = None,
    *,
    ends_after: Callable[[int, int], bool] | None = None,
) -> list[tuple[int, int]]:
    """Split a merge request's texts into consecutive groups whose merge requests each fit the budget,
    each as full as fits, or ended sooner where `ends_after(start, end)` says [start, end) is a group.

    Returns [start, end) index ranges. A text that does not fit even alone is a group of its own
    (the caller trims it).
    """
    groups: list[tuple[int, int]] = []
    start = 0
    n = len(request.texts)
    while start < n:
        end = start + 1
        while end < n and fits(part_of(request, start, end + 1), budget, calibration):
            end += 1
            if ends_after is not None and ends_after(start, end):
                break
        groups.append((start, end))
        start = end
    return groups


def trim_to_fit(request: SummaryRequest, budget: int, calibration: TokenCalibration | None = None) -> SummaryRequest:
    """Cut every text by the same share until the request fits: the last resort that makes merging end."""
    texts = list(request.texts)
    while not fits(replace(request, texts=tuple(texts)), budget, calibration):
        if all(len(t) <= 20 for t in texts):
            break
        texts = [_cut_at_word(t, max(20, int(len(t) * 0.8))) for t in texts]
    return replace(request, texts=tuple(texts))


def _cut_at_word(text: str, chars: int) -> str:
    """The first `chars` of `text`, less the word cut in two at its end (if a space comes before it): a
    model shown half a word may quote it."""
    if len(text) <= chars or text[chars].isspace():
        return text[:chars]
    space = max(text.rfind(" ", 0, chars), text.rfind("\n", 0, chars))
    return text[:space] if space > 0 else text[:chars]


def part_of(request: SummaryRequest, start: int, end: int) -> SummaryRequest:
    """The merge request of one group of texts (with their labels, for a task merge)."""
    labels = request.labels[start:end] if request.labels else ()
    return replace(request, texts=request.texts[start:end], labels=labels)


def next_level(request: SummaryRequest, results: list[str]) -> SummaryRequest:
    """The merge request over the groups' results; a task merge labels them by part."""
    labels = tuple(f"part {i + 1}" for i in range(len(results))) if request.kind is SummaryKind.TASK else ()
    return replace(request, texts=tuple(results), labels=labels)


def lowered_budget(current: int | None, tried: int, *, stated_limit: int | None, floor: int = 256) -> int | None:
    """The budget to plan under after the provider refused, as too long, a request we estimated at
    `tried` tokens (prompt and the room kept for its answer); None when it cannot usefully go lower.

    The window the provider states is taken as it is — unless the refused request was already
    planned under it (our estimate ran low), then it goes a safe factor below what was tried.
    Without a stated window, a safe factor below the refused request.
    """
    if stated_limit is not None and (current is None or stated_limit < current):
        new = stated_limit
    else:
        new = int(min(tried, current if current is not None else tried) * 0.75)
    if current is not None:
        new = min(new, current)
    if new < floor or (current is not None and new >= current):
        return None
    return new
