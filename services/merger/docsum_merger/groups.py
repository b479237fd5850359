"""Where a level of a hierarchical merge splits its texts into groups: chosen by the texts themselves.

Packed greedily from the first text, a group ends where the budget is full, so one text grown or
shrunk, added or removed, moves the end of every group after it, and every later merge is a new
request. Here a group, once it fills half the room for the texts, also ends after a text whose draw
(a hash of its own words, in [0, 1)) passes (FastCDC's rule with a minimum size, as the chunker
cuts). A group still never holds more than fits the budget, and holds two texts at least whenever
two fit. So an edited document whose chunk summaries changed in one place has new merges only in
that place's group and above it, and the owner's result cache answers every other node of the
tree: about log(n) merges, not a new tree. The same rule serves every level.
"""

from __future__ import annotations

import functools

from docsum_llm.base import SummaryRequest
from docsum_llm.budget import TokenCalibration, completion_reserve, estimate_request_tokens, group_to_fit, part_of
from docsum_shared.text import content_draw

# Past half the room, a group ends after a text whose draw is below this. Measured on trees of 80
# summaries: 1/6 makes 18 merges where packing full makes 15.5, and an edit redoes 3 to 5 of them (packed
# full, a summary inserted first redoes up to 17); a higher share makes smaller groups and more merges.
PASS = 1 / 6


# A text's draw, from its own words: the same wherever the text stands in the level (each summary is
# drawn again at every replan of its merge).
draw = functools.lru_cache(maxsize=4096)(content_draw)


def groups_by_content(
    request: SummaryRequest, budget: int, calibration: TokenCalibration | None = None
) -> list[tuple[int, int]]:
    """`request`'s texts in consecutive [start, end) groups, each of whose merge requests fits
    `budget`, ended where the texts say (the module docstring). A text that does not fit even alone
    is a group of its own (the caller trims it)."""
    n = len(request.texts)
    room = budget - completion_reserve(budget, request)

    def ends_after(start: int, end: int) -> bool:
        if end >= n - 1:
            return False  # a group ended here would leave one text alone: a merge of one is no merge
        return draw(request.texts[end - 1]) < PASS and (
            2 * estimate_request_tokens(part_of(request, start, end), calibration) >= room
        )

    return group_to_fit(request, budget, calibration, ends_after=ends_after)
