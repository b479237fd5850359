"""Sentence splitting, script detection and similarity tokens (docsum_shared.text)."""

from __future__ import annotations

import pytest

from docsum_shared.text import (
    cjk_count,
    cjk_ratio,
    dehyphenate,
    estimate_tokens,
    fold_compatibility,
    is_cjk_char,
    sentence_spans,
    split_sentences,
    tokens_for_similarity,
)


def _assert_spans_rebuild(text: str) -> None:
    """Spans are ordered, trimmed, and only whitespace lies between (and around) them."""
    spans = sentence_spans(text)
    pos = 0
    for s, e in spans:
        assert pos <= s < e
        assert text[pos:s].strip() == ""
        assert not text[s].isspace() and not text[e - 1].isspace()
        pos = e
    assert text[pos:].strip() == ""
    assert [text[s:e] for s, e in spans] == split_sentences(text)


def test_english_abbreviations_and_decimals_do_not_split() -> None:
    text = (
        "Mr. Smith paid 3.50 dollars for coffee, i.e. far too much. Dr. Jones agreed! "
        "Did they complain, e.g. to the manager? Pi is about 3.14159. See Fig. 2 and No. 7 for "
        "details. The U.S. team, led by J. K. Rowling et al. in 2021, won."
    )
    assert split_sentences(text) == [
        "Mr. Smith paid 3.50 dollars for coffee, i.e. far too much.",
        "Dr. Jones agreed!",
        "Did they complain, e.g. to the manager?",
        "Pi is about 3.14159.",
        "See Fig. 2 and No. 7 for details.",
        "The U.S. team, led by J. K. Rowling et al. in 2021, won.",
    ]
    _assert_spans_rebuild(text)


def test_english_quotes_ellipsis_and_lowercase_continuation() -> None:
    text = 'He said "Stop." Then he left... and came back?! Apples, pears, etc. are fruit. The end'
    assert split_sentences(text) == [
        'He said "Stop."',
        "Then he left... and came back?!",
        "Apples, pears, etc. are fruit.",
        "The end",
    ]


def test_chinese_sentence_ends_and_closing_quotes() -> None:
    text = "今天天气很好。我们去公园散步吧！你要一起去吗？他说：“我不去了。”然后离开了；大家都笑了。"
    assert split_sentences(text) == [
        "今天天气很好。",
        "我们去公园散步吧！",
        "你要一起去吗？",
        "他说：“我不去了。”",
        "然后离开了；",
        "大家都笑了。",
    ]
    _assert_spans_rebuild(text)


def test_mixed_english_and_chinese() -> None:
    text = "我们使用Kafka 3.6实现了事件驱动架构。The system is fast. 结果很好!然后呢? It works."
    assert split_sentences(text) == [
        "我们使用Kafka 3.6实现了事件驱动架构。",
        "The system is fast.",
        "结果很好!",
        "然后呢?",
        "It works.",
    ]


def test_paragraphs_headings_lists_and_soft_wraps() -> None:
    text = (
        "# 1. Introduction\n"
        "This line wraps\nonto the next line. Second sentence\n"
        "\n"
        "Paragraph without end punctuation\n\n\n"
        "Steps:\n1. Install the tool.\n2. Run it\n- a bullet\n"
        "| a | b |\n| 1 | 2 |\n"
        "## 第二章\n中文段落。"
    )
    assert split_sentences(text) == [
        "# 1. Introduction",
        "This line wraps\nonto the next line.",
        "Second sentence",
        "Paragraph without end punctuation",
        "Steps:",
        "1. Install the tool.",
        "2. Run it",
        "- a bullet",
        "| a | b |",
        "| 1 | 2 |",
        "## 第二章",
        "中文段落。",
    ]
    _assert_spans_rebuild(text)


@pytest.mark.parametrize("text", ["", "   \n\n  ", "no punctuation at all", "。。。", "...", "\n#\n"])
def test_degenerate_inputs(text: str) -> None:
    _assert_spans_rebuild(text)
    assert "".join("".join(s.split()) for s in split_sentences(text)) == "".join(text.split())


def test_sentence_spans_are_linear_on_a_long_text() -> None:
    text = "Short sentence number one. 中文句子。\n" * 20_000
    spans = sentence_spans(text)
    assert len(spans) == 40_000
    assert text[spans[-1][0] : spans[-1][1]] == "中文句子。"


def test_cjk_characters_and_ratio() -> None:
    assert is_cjk_char("中") and is_cjk_char("の") and is_cjk_char("カ") and is_cjk_char("한")
    assert not is_cjk_char("a") and not is_cjk_char("。") and not is_cjk_char("1") and not is_cjk_char("")
    assert cjk_ratio("") == 0.0
    assert cjk_ratio("abc") == 0.0
    assert cjk_ratio("中文") == 1.0
    assert cjk_ratio("ab中文, 12") == pytest.approx(0.5)
    assert cjk_ratio("café 中文") == pytest.approx(2 / 6)  # not ASCII: letters and CJK counted
    assert cjk_ratio("—, 12 «»") == 0.0  # no letter at all
    assert [cjk_count(t) for t in ("", "abc", "ab中文한の。", "é")] == [0, 0, 4, 0]


def test_tokens_for_similarity_english() -> None:
    assert tokens_for_similarity("The Brokers' replicas of Kafka's topics are in 2023 studies, a test.") == [
        "broker",
        "replica",
        "kafka",
        "topic",
        "2023",
        "study",
        "test",
    ]


def test_tokens_for_similarity_chinese_bigrams() -> None:
    # 的 splits the run; a one-character run gives the character itself.
    assert tokens_for_similarity("数据的处理很快") == ["数据", "处理", "理很", "很快"]
    assert tokens_for_similarity("猫 and 狗") == ["猫", "狗"]
    assert tokens_for_similarity("用Kafka处理") == ["用", "kafka", "处理"]


def test_estimate_tokens_counts_words_and_cjk_characters() -> None:
    assert estimate_tokens("我们使用Kafka和 PostgreSQL 3.14") == 9
    assert estimate_tokens("") == 0


def test_a_heading_line_of_pdf_text_is_not_glued_to_the_next_sentence() -> None:
    text = (
        "Why Logs Survive Crashes\nEvery system that does real work will eventually crash in the middle\n"
        "of it. Consumers and offsets\nA consumer reads records in order and commits its offset after\n"
        "the work. A long line that wraps before a name keeps going on the line after it, as in\nKafka Streams."
    )
    assert split_sentences(text) == [
        "Why Logs Survive Crashes",
        "Every system that does real work will eventually crash in the middle\nof it.",
        "Consumers and offsets",
        "A consumer reads records in order and commits its offset after\nthe work.",
        "A long line that wraps before a name keeps going on the line after it, as in\nKafka Streams.",
    ]


# --------------------------------------------------------------------------------------------------
# Compatibility characters and hyphenation


def test_fold_compatibility_expands_ligatures_and_styled_letters() -> None:
    # XeTeX/LuaTeX PDFs give ligature glyphs as single code points.
    assert fold_compatibility("The misﬁts see things diﬀerently; ﬂow, oﬃce, baﬄe, ﬅ, ﬆ.") == (
        "The misfits see things differently; flow, office, baffle, st, st."
    )
    assert fold_compatibility("Ĳssel ĳs ǆ ǈ ǋ ǲ ſ") == "IJssel ijs dž Lj Nj Dz s"
    assert fold_compatibility("𝐀𝐁𝐂 𝑥 𝟏𝟐") == "ABC x 12"  # mathematical alphanumerics from PDFs
    assert fold_compatibility("\ufedf\ufe8e") == "\u0644\u0627"  # Arabic presentation forms


def test_fold_compatibility_leaves_cjk_punctuation_and_other_symbols_alone() -> None:
    # NFKC would turn these into ASCII ("，" -> ",", "１" -> "1", "ｶ" -> "カ", "①" -> "1", "…" -> "..."),
    # changing what the sentence splitter and the CJK joiner see.
    text = "全角标点，；：！？（）「」１２３ＡＢＣ　ｶﾀｶﾅ ① Ⅱ x² ℃ ™ … café naïve Ω"
    assert fold_compatibility(text) == text
    assert split_sentences(fold_compatibility("第一句！第二句？")) == ["第一句！", "第二句？"]
    assert fold_compatibility("") == ""


def test_dehyphenate_joins_words_split_at_a_line_end() -> None:
    assert dehyphenate("The term is de-\nfined below.") == "The term is defined\nbelow."
    assert dehyphenate("a word that is de-\nfined.\nNext line.") == "a word that is defined.\nNext line."
    assert dehyphenate("environ-\n  ments are") == "environments\nare"
    assert dehyphenate("Straße und Stra-\nßen") == "Straße und Straßen"


def test_dehyphenate_keeps_real_hyphens_and_everything_else() -> None:
    # Ambiguous: a compound split at its own hyphen. Without other evidence it is joined (the
    # documented choice); when the text writes the compound with a hyphen elsewhere and never
    # without, the hyphen stays.
    assert dehyphenate("an event-\ndriven design") == "an eventdriven\ndesign"
    assert dehyphenate("event-driven systems are event-\ndriven.") == "event-driven systems are event-driven."
    unchanged = [
        "see Kafka-\nStreams",  # the next fragment starts upper-case
        "version 3-\n4 of it",  # digits are not a word
        "a list -\nnext",  # a dash after a space
        "intro\n- item one\n- item two",  # list items
        "de-\n\nfined",  # a paragraph break, not a line wrap
        "x_y-\nz",  # not letters only
    ]
    for text in unchanged:
        assert dehyphenate(text) == text, text
