"""What changed in a summary against the previous version's: each of its sentences marked new, changed or
unchanged, and the previous sentences that are gone. Words compared, no LLM asked (difflib's ratio on word
sequences), so a new version's view costs nothing more than its reading.

Rules, in order: a sentence the previous summary has word for word (spacing aside) is unchanged; else one
whose words match a previous sentence's by at least CHANGED_RATIO (difflib.SequenceMatcher.ratio: twice the
matching words over the words of both) is changed, paired with the closest such sentence; else it is new.
Each previous sentence is paired once at most: exact pairs first, then the closest pairs first. The previous
sentences left unpaired were removed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

Change = Literal["new", "changed", "unchanged"]
# At least this share of matching words (of both sentences' words) makes a sentence a changed one rather than
# a new one: one word of ten changed is about 0.9, half the words 0.5.
CHANGED_RATIO = 0.6
# A word: a run of letters or digits; each CJK character (and kana) a word of its own, as they are written
# without spaces; a punctuation mark its own.
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+|[^\w\s]")


@dataclass(frozen=True)
class Changes:
    marks: tuple[Change, ...]  # one per sentence of the summary, in order
    was: tuple[str | None, ...]  # a changed sentence's previous wording, else None
    removed: tuple[str, ...]  # the previous sentences paired with none, in their order


def words(sentence: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(sentence.casefold()))


def changes(sentences: Sequence[str], previous: Sequence[str], threshold: float = CHANGED_RATIO) -> Changes:
    """Each of `sentences` marked against the `previous` version's sentences (see the module's rules)."""
    paired: dict[int, int] = {}  # sentence -> previous sentence
    taken: set[int] = set()
    spaced = [" ".join(s.split()) for s in previous]
    for i, sentence in enumerate(sentences):
        flat = " ".join(sentence.split())
        j = next((j for j, p in enumerate(spaced) if p == flat and j not in taken), None)
        if j is not None:
            paired[i] = j
            taken.add(j)
    exact = set(paired)
    close: list[tuple[float, int, int]] = []
    previous_words = [words(p) for p in previous]
    for i, sentence in enumerate(sentences):
        if i in exact:
            continue
        matcher = SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(words(sentence))  # the sequence SequenceMatcher indexes: set once per sentence
        for j, before in enumerate(previous_words):
            if j in taken:
                continue
            matcher.set_seq1(before)
            # The cheap upper bounds first: most pairs are far apart.
            if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
                if (ratio := matcher.ratio()) >= threshold:
                    close.append((ratio, i, j))
    for _, i, j in sorted(close, key=lambda c: (-c[0], c[1], c[2])):
        if i not in paired and j not in taken:
            paired[i] = j
            taken.add(j)
    marks: list[Change] = []
    was: list[str | None] = []
    for i in range(len(sentences)):
        if i in exact:
            marks.append("unchanged")
            was.append(None)
        elif i in paired:
            marks.append("changed")
            was.append(previous[paired[i]])
        else:
            marks.append("new")
            was.append(None)
    removed = tuple(p for j, p in enumerate(previous) if j not in taken)
    return Changes(tuple(marks), tuple(was), removed)
