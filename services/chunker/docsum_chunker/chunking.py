"""The chunking core: cut a document's text into overlapping, structure-aware chunks. Pure and deterministic.

Offsets and overlap
    Every chunk owns a slice of the document, and the owned slices partition it: the first chunk's
    owned slice starts at 0, each next one starts where the previous chunk ends (``chunk[i].end``),
    and the last one ends at ``len(text)``. On top of that, each chunk but the first repeats a short
    stretch of the previous chunk's end (the *overlap*), so the LLM sees the sentences leading in:

    * ``start`` - where ``text`` begins, overlap included: ``chunk[i].start <= chunk[i - 1].end``.
      The overlap is ``chunk[i - 1].end - chunk[i].start`` characters, never more than the
      ``overlap_chars`` in effect (``min(overlap_chars, chunk_chars // 4)``), and it starts at the
      earliest sentence start inside that window (else after a whitespace, else a hard cut). It is
      empty (``start == chunk[i - 1].end``) when the chunk begins at a Markdown heading: a new
      section needs no lead-in.
    * ``end`` - exclusive; where the next chunk's owned slice begins. The trailing whitespace before
      the next sentence belongs to this chunk, so chunks usually start with a non-space character.
    * ``text == document[start:end]`` - the overlap plus the owned slice; ``end - start`` is at most
      ``1.25 * chunk_chars``.
    * ``context_before`` - up to the overlap in effect of text just before ``start`` (not part of
      ``text``), ``document[start - len(context_before):start]``, beginning at a sentence start when
      one lies in the window (else after a whitespace). Empty for the first chunk.
    * ``context_after`` - up to ``context_after_chars`` of text just after ``end`` (not part of
      ``text``), ``document[end:end + len(context_after)]``, ending at a sentence end when one lies in
      the window (else at a whitespace). Empty for the last chunk.

    So the document is ``chunks[0].text`` followed by ``chunks[i].text[chunks[i - 1].end -
    chunks[i].start:]`` for every next chunk: nothing is lost, and nothing repeats beyond the overlap.

Where cuts go
    A SMALL document (``len(text) <= small_max``) is one chunk, the whole text, with empty contexts.
    Otherwise each chunk aims at ``chunk_chars`` characters (overlap included) and may end anywhere
    between half that and ``1.25 * chunk_chars``; inside that window a cut prefers, in this order: the
    start of a Markdown heading line (``# ...``), the start of a paragraph (after a blank line), the
    start of a sentence (``docsum_shared.text.sentence_spans``, Chinese 。！？； included), the start of
    a line. Among headings, the one nearest the target wins. Among cuts of any other kind, the
    content chooses (FastCDC's idea, applied to sentences and paragraphs): each position draws a
    number from a hash of the 64 characters around it. A *landmark* is a position whose draw is the
    lowest of its kind within ``0.75 * chunk_chars`` on either side: whether a position is one
    depends on the text around it alone, never on where the previous cut fell. The first landmark of
    the best kind in the window is the cut; with none there, the lowest draw from ``0.75 *
    chunk_chars`` past the chunk's start (so sizes still gather near the target), else the lowest in
    the window. So after an edit, both versions mostly cut at the first landmark past it and are in
    step from there: a page inserted at the top of a 100-page text of one-paragraph pages changes the
    chunk that holds it and mostly one more, and leaves every later one as it was (cut greedily by
    the count, every later chunk changed; cut at the first position whose draw passed a threshold
    that grew with the size, the two versions paired the pages otherwise for one to six chunks,
    because the windows of chunks one page apart hold different paragraph ends). Only a window
    with none of those (a giant table row, unpunctuated text) is cut after a whitespace, or, with no
    whitespace either, at the target exactly. No cut leaves a tail shorter than ``chunk_chars / 5``:
    the last chunk takes it instead (it then may grow up to ``1.25 * chunk_chars``).

    All candidate positions are found by a few linear passes up front and looked up by bisection, so
    cutting a 1,000,000-character document is linear (a fraction of a second).

A new version of a document (`previous`)
    Given the owned slices of the previous version's chunks, in order, each one found again in the text
    (after the one before it, whole, as it was) keeps its chunk: its start and end are cuts, and only the
    stretches between them (what the edit changed, and what is new) are cut by the rules above, their
    last chunk ending where the next kept slice begins, however short. So a page inserted at the top is
    a chunk of its own, and every later chunk is owned as before: only the first kept one after an edit
    reads a new overlap (the new text before it), the rest are the same chunks with the same contexts.
    The content-defined cuts already put most versions in step after an edit, but not all: where a
    chunk of the first version ended beyond the reach of the new text's first window, the new version
    cut inside it, and held its later pages under new starts.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from docsum_shared.text import content_draw, sentence_spans

__all__ = ["Chunk", "TooManyChunks", "owned_slices", "split_into_chunks"]

MAX_CHUNK_FACTOR = 1.25  # a chunk (overlap included) is at most this many times chunk_chars
MIN_CHUNK_FACTOR = 0.5  # ... and, except the last, at least this many times
MIN_TAIL_FACTOR = 0.2  # no cut leaves less than this many times chunk_chars after it
# A position is a landmark (a cut wherever a window reaches it) when its draw is the lowest of its kind
# within this many times chunk_chars on each side. Landmarks are then at least that far apart, so a
# window rarely holds two, and a window that reaches one cuts there whatever its own start: two versions
# of a text fall in step at the first landmark after the edit. Tuned on generated texts of paragraphs of
# 300, 950 and 2,000-3,000 characters: smaller, the early landmarks make more, smaller chunks; larger,
# more windows have none and fall in step later.
LANDMARK_FACTOR = 0.75
# A window with no landmark cuts at the lowest draw from this many times chunk_chars on (the target is 1):
# late enough that sizes gather near the target, wide enough that windows from nearby starts share most
# of their candidates and choose the same one (a narrower stretch, the cuts of two versions one page
# apart may never meet: with pages of ~950 characters, every chunk would hold two, paired otherwise).
SETTLE_FACTOR = 0.75
HASH_RADIUS = 32  # characters on each side of a cut that its hash reads
KEPT_SCANS = 32  # a new version looks for its previous version's chunks over at most this many passes of its text

# A Markdown heading line (what the parser emits for DOCX headings); group 1 is where it starts.
_HEADING_RE = re.compile(r"\n[ \t]{0,3}(#{1,6})(?=[ \t\r\n]|\Z)")
_FIRST_HEADING_RE = re.compile(r"[ \t]{0,3}(#{1,6})(?=[ \t\r\n]|\Z)")
_PARAGRAPH_RE = re.compile(r"\n[ \t\r]*\n\s*")
_LINE_RE = re.compile(r"\n[ \t\r]*(?=\S)")
_SPACE_RUN_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class Chunk:
    """One chunk; see the module docstring for what the offsets and contexts mean exactly."""

    index: int
    start: int  # where `text` begins in the document, overlap included
    end: int  # exclusive; the next chunk's owned slice begins here
    text: str  # document[start:end]
    context_before: str  # document just before `start` (not in `text`)
    context_after: str  # document just after `end` (not in `text`)


class TooManyChunks(ValueError):
    """The text needs more than `limit` chunks; `at_least` is how many it needs at least (the count
    is not finished once the limit is passed)."""

    def __init__(self, limit: int, at_least: int) -> None:
        super().__init__(f"more than {limit} chunks (at least {at_least})")
        self.limit = limit
        self.at_least = at_least


class _Cuts:
    """Sorted candidate cut positions of one kind, with nearest-to-target lookup in a range."""

    def __init__(self, positions: list[int]) -> None:
        self.positions = positions
        self.landmark: dict[int, bool] = {}  # by index in `positions`, decided once

    def nearest(self, lo: int, hi: int, target: int) -> int | None:
        """The position in [lo, hi] closest to `target` (the earlier one on a tie), or None."""
        ps = self.positions
        i = bisect.bisect_left(ps, target)
        best: int | None = None
        for j in (i - 1, i):
            if 0 <= j < len(ps) and lo <= ps[j] <= hi:
                if best is None or abs(ps[j] - target) < abs(best - target):
                    best = ps[j]
        if best is not None:
            return best
        # target may lie outside [lo, hi]: fall back to the range's end nearest to it
        if target < lo:
            j = bisect.bisect_left(ps, lo)
            return ps[j] if j < len(ps) and ps[j] <= hi else None
        j = bisect.bisect_right(ps, hi) - 1
        return ps[j] if j >= 0 and ps[j] >= lo else None

    def by_content(self, lo: int, hi: int, settle: int, radius: int, draws: _Draws) -> int | None:
        """The position in [lo, hi] the text chooses (None if there is none): the first landmark (see
        `is_landmark`), else the lowest draw from `settle` on, else the lowest draw in [lo, hi].

        What decides is the text around each position, not how far it lies from the document's start
        or from the previous cut, so two versions of a document that differ before `lo` mostly choose
        the same cut here, and once one cut is the same, every later one is."""
        ps = self.positions
        first, end = bisect.bisect_left(ps, lo), bisect.bisect_right(ps, hi)
        if first >= end:
            return None
        for k in range(first, end):
            if self.is_landmark(k, radius, draws):
                return ps[k]
        late = max(first, bisect.bisect_left(ps, settle))
        return min(ps[late:end] if late < end else ps[first:end], key=draws.draw)

    def is_landmark(self, k: int, radius: int, draws: _Draws) -> bool:
        """Whether the `k`-th position's draw is lower than every other's within `radius` characters
        (ties count against: repeated text has none). Two landmarks are thus more than `radius` apart."""
        found = self.landmark.get(k)
        if found is None:
            ps, draw = self.positions, draws.draw(self.positions[k])
            i = k - 1
            while i >= 0 and ps[k] - ps[i] <= radius and draws.draw(ps[i]) > draw:
                i -= 1
            j = k + 1
            while j < len(ps) and ps[j] - ps[k] <= radius and draws.draw(ps[j]) > draw:
                j += 1
            found = (i < 0 or ps[k] - ps[i] > radius) and (j >= len(ps) or ps[j] - ps[k] > radius)
            self.landmark[k] = found
        return found

    def first_in(self, lo: int, hi: int) -> int | None:
        """The smallest position in [lo, hi), or None."""
        j = bisect.bisect_left(self.positions, lo)
        if j < len(self.positions) and self.positions[j] < hi:
            return self.positions[j]
        return None

    def last_in(self, lo: int, hi: int) -> int | None:
        """The largest position in (lo, hi], or None."""
        j = bisect.bisect_right(self.positions, hi) - 1
        if j >= 0 and self.positions[j] > lo:
            return self.positions[j]
        return None


class _Draws:
    """A number in [0, 1) per position, drawn from the text around it (HASH_RADIUS characters on
    each side): the same wherever that text moves in the document. Drawn once per position."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.drawn: dict[int, float] = {}

    def draw(self, pos: int) -> float:
        value = self.drawn.get(pos)
        if value is None:
            value = content_draw(self.text[max(0, pos - HASH_RADIUS) : pos + HASH_RADIUS])
            self.drawn[pos] = value
        return value


def _whitespace_cut(text: str, lo: int, hi: int, target: int) -> int | None:
    """The word start in [lo, hi] (just after whitespace) nearest to `target`, the earlier on a tie."""
    found: list[int] = []
    a = max(lo - 1, 0)
    k = max(text.rfind(" ", a, target), text.rfind("\n", a, target), text.rfind("\t", a, target))
    if k >= 0 and lo <= k + 1 <= hi and k + 1 < len(text) and not text[k + 1].isspace():
        found.append(k + 1)
    m = _SPACE_RUN_RE.search(text, target, hi)
    if m is not None and m.end() <= hi and m.end() < len(text):
        found.append(m.end())
    if not found:
        return None
    return min(found, key=lambda p: (abs(p - target), p))


def split_into_chunks(
    text: str,
    *,
    chunk_chars: int = 2000,
    overlap_chars: int = 200,
    context_after_chars: int = 200,
    small_max: int = 8000,
    max_chunks: int | None = None,
    previous: Sequence[str] = (),
) -> list[Chunk]:
    """Cut `text` into chunks as the module docstring describes. Deterministic.

    With `max_chunks`, a text that needs more raises TooManyChunks, as early as that is known: at once
    when even chunks of the greatest length could not cover it, else as soon as the cut passes it. With
    `previous` (the owned slices of the previous version's chunks, in order), each slice found again
    keeps its chunk.
    """
    if chunk_chars < 20:
        raise ValueError("chunk_chars must be at least 20")
    n = len(text)
    if n <= small_max:
        return [Chunk(0, 0, n, text, "", "")]

    overlap = max(0, min(overlap_chars, chunk_chars // 4))
    context_after_chars = max(0, context_after_chars)
    max_len = int(chunk_chars * MAX_CHUNK_FACTOR)
    min_len = int(chunk_chars * MIN_CHUNK_FACTOR)
    min_tail = int(chunk_chars * MIN_TAIL_FACTOR)
    if max_chunks is not None and -(-n // max_len) > max_chunks:  # owned slices are at most max_len long
        raise TooManyChunks(max_chunks, -(-n // max_len))

    spans = sentence_spans(text)
    sentence_starts = _Cuts([s for s, _ in spans])
    sentence_ends = _Cuts([e for _, e in spans])
    first = _FIRST_HEADING_RE.match(text)
    heading_positions = ([first.start(1)] if first else []) + [m.start(1) for m in _HEADING_RE.finditer(text)]
    headings = _Cuts(heading_positions)
    heading_set = set(heading_positions)
    paragraphs = _Cuts([m.end() for m in _PARAGRAPH_RE.finditer(text) if m.end() < n])
    lines = _Cuts([m.end() for m in _LINE_RE.finditer(text)])
    by_preference = (paragraphs, sentence_starts, lines)
    draws = _Draws(text)
    radius = int(chunk_chars * LANDMARK_FACTOR)

    def lead_in(pos: int, width: int, floor: int) -> int:
        """Where a stretch of at most `width` chars ending at `pos` should begin (>= floor)."""
        lo = max(floor, pos - width)
        if lo >= pos:
            return pos
        s = sentence_starts.first_in(lo, pos)
        if s is not None:
            return s
        m = _SPACE_RUN_RE.search(text, lo, pos)
        if m is not None and m.end() < pos:
            return m.end()
        return lo

    # 1. The owned slices: each cut chosen by the content around it, from where the chunk starts; a slice
    # of the previous version found again is kept whole, and a stretch between two ends where the next begins.
    kept = _kept(text, previous)
    kept_ends = dict(kept)
    kept_starts = [a for a, _ in kept]
    owned: list[tuple[int, int]] = []  # (chunk start incl. overlap, cut) per chunk
    own_start = 0
    prev_own_start = 0
    while True:
        if own_start == 0 or own_start in heading_set:
            start = own_start
        else:
            start = lead_in(own_start, overlap, prev_own_start + 1)
        j = bisect.bisect_right(kept_starts, own_start)
        bound = kept_starts[j] if j < len(kept_starts) else n  # where the next kept slice begins
        forced = kept_ends.get(own_start)
        if forced is None and bound < n and bound - start <= max_len:
            forced = bound  # the rest of a stretch before a kept slice: one chunk, however short
        if forced is not None:
            owned.append((start, forced))
            if forced >= n:
                break
            if max_chunks is not None and len(owned) >= max_chunks:
                raise TooManyChunks(max_chunks, len(owned) + -(-(n - forced) // max_len))
            prev_own_start, own_start = own_start, forced
            continue
        remaining = n - start
        if remaining <= chunk_chars:
            owned.append((start, n))
            break
        lo = max(start + min_len, own_start + 1)
        hi = min(start + max_len, n - min_tail, bound - min_tail)
        target = start + chunk_chars
        settle = start + int(chunk_chars * SETTLE_FACTOR)
        cut: int | None = None
        if lo <= hi:
            # A section starts a chunk: the heading nearest the target. Else the best kind of cut
            # in reach, chosen by the text around it (so an edit elsewhere does not move it).
            cut = headings.nearest(lo, hi, target)
            for kind in by_preference:
                if cut is not None:
                    break
                cut = kind.by_content(lo, hi, settle, radius, draws)
        if cut is None and remaining <= max_len:
            owned.append((start, n))
            break
        if cut is None:  # no structure in reach (a giant table row, unpunctuated text)
            cut = _whitespace_cut(text, lo, hi, target)
            if cut is None:
                cut = min(max(target, lo), hi)
        owned.append((start, cut))
        if max_chunks is not None and len(owned) >= max_chunks:  # and the rest still needs one at least
            raise TooManyChunks(max_chunks, len(owned) + -(-(n - cut) // max_len))
        prev_own_start = own_start
        own_start = cut

    # 2. The chunks, with their contexts.
    chunks: list[Chunk] = []
    last = len(owned) - 1
    for i, (start, end) in enumerate(owned):
        before = ""
        if start > 0 and overlap > 0:
            before = text[lead_in(start, overlap, 0) : start]
        after = ""
        if end < n and context_after_chars > 0:
            limit = min(n, end + context_after_chars)
            stop = sentence_ends.last_in(end, limit)
            if stop is None:  # no sentence ends in the window: stop before its last whitespace run
                runs = [m.start() for m in _SPACE_RUN_RE.finditer(text, end + 1, limit)]
                stop = runs[-1] if runs else limit
            after = text[end:stop]
        chunks.append(Chunk(i, start, end, text[start:end], before, after if i < last else ""))
    return chunks


def owned_slices(chunks: Sequence[Chunk]) -> list[str]:
    """Each chunk's owned slice (its text after the overlap), in order: what a new version's cut is given
    as `previous` (joined, they are the document)."""
    return [c.text[chunks[i - 1].end - c.start if i else 0 :] for i, c in enumerate(chunks)]


def _kept(text: str, previous: Sequence[str]) -> list[tuple[int, int]]:
    """The previous version's owned slices found again in `text`, in order, each whole and after the one
    before it: (start, end) of each. A slice is looked for from where the last one found ended, so repeated
    text is matched to its own place and nothing is found twice; an empty slice is never found. A slice
    not found costs a scan of the rest of the text: once the scans add up to KEPT_SCANS times the text,
    the rest is left to the content-defined cuts (a text that matches little of its previous version
    costs a few passes over it, not one per chunk)."""
    found: list[tuple[int, int]] = []
    at = 0
    budget = KEPT_SCANS * len(text)
    for piece in previous:
        if not piece:
            continue
        i = text.find(piece, at)
        budget -= (i + len(piece) if i >= 0 else len(text)) - at
        if i >= 0:
            found.append((i, i + len(piece)))
            at = i + len(piece)
        if budget < 0:
            break
    return found
