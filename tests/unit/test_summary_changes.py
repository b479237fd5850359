"""What changed in a new version's summary (docsum_shared.readmodel.changes): each rule on its own."""

from __future__ import annotations

from docsum_shared.readmodel.changes import CHANGED_RATIO, changes, words

BEFORE = [
    "Revenue rose 4% in the third quarter.",
    "The Lisbon plant closed in August.",
    "Staff numbers stayed at 1,200.",
]


def test_the_same_sentences_are_all_unchanged() -> None:
    found = changes(BEFORE, BEFORE)
    assert found.marks == ("unchanged",) * 3 and found.was == (None,) * 3 and found.removed == ()


def test_a_sentence_the_previous_summary_has_word_for_word_is_unchanged_wherever_it_is() -> None:
    found = changes([BEFORE[2], "  Revenue rose 4%\nin the third quarter. "], BEFORE)
    assert found.marks == ("unchanged", "unchanged")  # moved, and spaced otherwise: the same words
    assert found.removed == (BEFORE[1],)


def test_a_close_sentence_is_changed_and_says_what_it_was() -> None:
    found = changes([BEFORE[0], "The Lisbon plant closed in September.", BEFORE[2]], BEFORE)
    assert found.marks == ("unchanged", "changed", "unchanged")
    assert found.was == (None, BEFORE[1], None) and found.removed == ()


def test_a_sentence_close_to_none_is_new() -> None:
    found = changes([*BEFORE, "A new warehouse opens in Porto next spring."], BEFORE)
    assert found.marks == ("unchanged", "unchanged", "unchanged", "new")


def test_the_previous_sentences_paired_with_none_are_removed_in_their_order() -> None:
    found = changes([BEFORE[1]], BEFORE)
    assert found.marks == ("unchanged",) and found.removed == (BEFORE[0], BEFORE[2])


def test_the_threshold_divides_changed_from_new() -> None:
    before = "one two three four five six seven eight nine ten."
    half = "one two three four five alpha beta gamma delta epsilon."  # 6 of 11 words shared: ratio 6/11
    assert changes([half], [before]).marks == ("new",)
    assert changes([half], [before], threshold=0.5).marks == ("changed",)
    assert 0.5 < 6 / 11 < CHANGED_RATIO


def test_each_previous_sentence_is_paired_once_the_closest_first() -> None:
    before = ["The plant closed in August after a long strike."]
    closer = "The plant closed in August after a short strike."
    farther = "The plant closed in May after a short strike by staff."
    found = changes([farther, closer], before)
    assert found.marks == ("new", "changed") and found.was == (None, before[0])
    # An exact pair comes before any close one, even a closer-looking sentence earlier in the summary.
    assert changes([closer, before[0]], before).marks == ("new", "unchanged")


def test_cjk_sentences_are_compared_character_by_character() -> None:
    assert words("收入增长了百分之四。") == ("收", "入", "增", "长", "了", "百", "分", "之", "四", "。")
    found = changes(["收入增长了百分之五。"], ["收入增长了百分之四。"])
    assert found.marks == ("changed",)


def test_no_previous_sentences_make_every_sentence_new() -> None:
    assert changes(BEFORE, []).marks == ("new",) * 3 and changes([], BEFORE).removed == tuple(BEFORE)
