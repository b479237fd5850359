"""Where a level of a hierarchical merge splits its texts into groups: chosen by the texts themselves.

Packed greedily from the first text, a group ends where the budget is full, so one text grown or
shrunk, added or removed, moves the end of every group after it, and every later merge is a new
request. Here a group, once it fills half the room for the texts, also ends after a text whose draw
(a hash of its own words, in [0, 1)) passes (FastCDC's rule with a minimum size, as the chunker
cuts). A group still never holds more than fits the budget, and holds two texts at least whenever
two fit. So an edited document whose chunk summaries changed in one place has new merges only in
that place's group and above it, and the owner's result cache answers every other node of the
tree: about log(n) merges, not a new tree. The same rule serves every level.

A new version of a document (its task names the previous one) also keeps the previous version's groups:
a run of texts that was a group of the previous version's tree, at any level, is that group again
(`kept`), and only the texts between such runs are grouped anew, in as few groups as fit them (a text
left alone joins a neighbouring group). A kept group's answer is in the cache, and the level above sees
the same texts where nothing changed: an edit at the top no longer shifts which texts the levels above
pair, whatever the draws say.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from docsum_llm.base import SummaryRequest
from docsum_llm.budget import (
    TokenCalibration,
    completion_reserve,
    estimate_request_tokens,
    fits,
    group_to_fit,
    part_of,
)
from docsum_shared.text import content_draw

# Past half the room, a group ends after a text whose draw is below this. Measured on trees of 80
# summaries: 1/6 makes 18 merges where packing full makes 15.5, and an edit redoes 3 to 5 of them (packed
# full, a summary inserted first redoes up to 17); a higher share makes smaller groups and more merges.
PASS = 1 / 6


# A text's draw, from its own words: the same wherever the text stands in the level (each summary is
# drawn again at every replan of its merge).
draw = functools.lru_cache(maxsize=4096)(content_draw)


def groups_by_content(
    request: SummaryRequest,
    budget: int,
    calibration: TokenCalibration | None = None,
    kept: Collection[tuple[str, ...]] = (),
) -> list[tuple[int, int]]:
    """`request`'s texts in consecutive [start, end) groups, each of whose merge requests fits
    `budget`, ended where the texts say, or where `kept` (the previous version's groups, as their
    texts) had them (the module docstring). A text that does not fit even alone is a group of its own
    (the caller trims it)."""
    spans = _kept_spans(request, budget, calibration, kept)
    if not spans:
        return _by_draws(request, budget, calibration)
    groups: list[tuple[int, int]] = []
    start = 0
    for kept_start, kept_end in [*spans, (len(request.texts), len(request.texts))]:
        if start < kept_start:  # texts the previous version did not group so: as few groups as fit them
            run = group_to_fit(part_of(request, start, kept_start), budget, calibration)
            groups += [(start + a, start + b) for a, b in run]
        if kept_start < kept_end:
            groups.append((kept_start, kept_end))
        start = kept_end
    return _no_lone_text(request, groups, budget, calibration)


def _kept_spans(
    request: SummaryRequest, budget: int, calibration: TokenCalibration | None, kept: Collection[tuple[str, ...]]
) -> list[tuple[int, int]]:
    """The runs of `request`'s texts, in order and apart, that are each a group of `kept` and still
    fit `budget` (a budget learned lower since may not hold the previous version's groups)."""
    by_first: dict[str, list[tuple[str, ...]]] = {}
    for group in sorted(kept, key=len, reverse=True):  # the longest first, where several start alike
        if len(group) >= 2:
            by_first.setdefault(group[0], []).append(group)
    texts, spans, i = request.texts, [], 0
    while i < len(texts):
        for group in by_first.get(texts[i], ()):
            end = i + len(group)
            if texts[i:end] == group and fits(part_of(request, i, end), budget, calibration):
                spans.append((i, end))
                i = end
                break
        else:
            i += 1
    return spans


def _no_lone_text(
    request: SummaryRequest, groups: list[tuple[int, int]], budget: int, calibration: TokenCalibration | None
) -> list[tuple[int, int]]:
    """`groups` where a text grouped alone that fits with a neighbouring group joins it (the one before,
    else the one after): a merge of one text is no merge, and it would be a text more above."""
    out = list(groups)
    i = 0
    while i < len(out):
        start, end = out[i]
        if end - start == 1 and len(out) > 1:
            if i > 0 and fits(part_of(request, out[i - 1][0], end), budget, calibration):
                out[i - 1 : i + 1] = [(out[i - 1][0], end)]
                continue
            if i + 1 < len(out) and fits(part_of(request, start, out[i + 1][1]), budget, calibration):
                out[i : i + 2] = [(start, out[i + 1][1])]
                continue
        i += 1
    return out


def _by_draws(
    request: SummaryRequest, budget: int, calibration: TokenCalibration | None = None
) -> list[tuple[int, int]]:
    """`request`'s texts in groups ended by their draws past half the room (the module docstring)."""
    n = len(request.texts)
    room = budget - completion_reserve(budget, request)

    def ends_after(start: int, end: int) -> bool:
        if end >= n - 1:
            return False  # a group ended here would leave one text alone: a merge of one is no merge
        return draw(request.texts[end - 1]) < PASS and (
            2 * estimate_request_tokens(part_of(request, start, end), calibration) >= room
        )

    return group_to_fit(request, budget, calibration, ends_after=ends_after)
