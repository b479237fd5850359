"""Token estimates and fitting requests into the model's input budget, without a tokenizer."""

from __future__ import annotations

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.budget import (
    MIN_PART_CHARS,
    TokenCalibration,
    completion_reserve,
    estimate_request_tokens,
    fits,
    group_to_fit,
    lowered_budget,
    next_level,
    part_of,
    plan_chunk,
    trim_to_fit,
)
from docsum_shared.text import estimate_tokens_upper as estimate_text_tokens
from tests.documents import chinese_prose, english_prose
from tests.fake_llm import estimate_tokens as provider_count


def test_estimates_are_never_below_what_the_stand_in_provider_counts() -> None:
    for text in (english_prose(5_000, seed=1), chinese_prose(3_000, seed=2), "mixed 中文 and English, 2026."):
        assert estimate_text_tokens(text) >= provider_count(text)


def test_chinese_costs_a_token_a_character() -> None:
    text = chinese_prose(1_000, seed=3)
    assert estimate_text_tokens(text) >= len([c for c in text if "\u4e00" <= c <= "\u9fff"])


def test_calibration_follows_an_under_estimate_at_once_and_drifts_back_slowly() -> None:
    calibration = TokenCalibration()
    calibration.observe(estimated=100, reported=150)
    assert calibration.ratio == 1.5
    calibration.observe(estimated=100, reported=80)
    assert 1.4 < calibration.ratio < 1.5
    request = SummaryRequest(SummaryKind.CHUNK, ("word " * 200,))
    assert estimate_request_tokens(request, calibration) > estimate_request_tokens(request)


def _merge(n: int, chars: int) -> SummaryRequest:
    return SummaryRequest(SummaryKind.DOCUMENT, tuple(english_prose(chars, seed=i) for i in range(n)), title="book")


def test_groups_are_consecutive_cover_everything_and_each_fits() -> None:
    request, budget = _merge(40, 600), 1_500
    assert not fits(request, budget)
    groups = group_to_fit(request, budget)
    assert groups[0][0] == 0 and groups[-1][1] == 40
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:], strict=False))
    assert len(groups) > 1
    for start, end in groups:
        assert fits(part_of(request, start, end), budget)
        assert estimate_request_tokens(part_of(request, start, end)) + completion_reserve(budget) <= budget


def test_task_merges_keep_their_labels_and_label_parts_above() -> None:
    request = SummaryRequest(SummaryKind.TASK, ("a", "b", "c"), labels=("x.pdf", "y.pdf", "z.pdf"))
    assert part_of(request, 1, 3).labels == ("y.pdf", "z.pdf")
    assert next_level(request, ["r1", "r2"]).labels == ("part 1", "part 2")


def test_a_text_too_big_for_any_request_is_trimmed_until_it_fits() -> None:
    request, budget = _merge(1, 20_000), 1_000
    trimmed = trim_to_fit(request, budget)
    assert fits(trimmed, budget) and trimmed.texts[0] and request.texts[0].startswith(trimmed.texts[0])
    # Cut between words, never inside one: a model shown half a word may quote it.
    assert request.texts[0][len(trimmed.texts[0])].isspace()


def test_a_chunk_request_drops_its_contexts_before_its_text() -> None:
    text = english_prose(2_000, seed=5)
    request = SummaryRequest(SummaryKind.CHUNK, (text,), context_before="b " * 400, context_after="a " * 400)
    bare = SummaryRequest(SummaryKind.CHUNK, (text,))
    budget = estimate_request_tokens(bare) + completion_reserve(estimate_request_tokens(bare) * 2)
    budget = next(b for b in range(budget, budget * 2) if fits(bare, b))
    assert plan_chunk(request, budget) == [bare]
    assert plan_chunk(request, None) == [request]


def test_a_chunk_too_long_for_the_budget_is_summarized_in_parts_that_cover_all_of_it() -> None:
    for text in (english_prose(2_000, seed=6), chinese_prose(2_000, seed=7)):
        request = SummaryRequest(SummaryKind.CHUNK, (text,), context_before="before " * 30)
        budget = 700
        parts = plan_chunk(request, budget)
        assert parts is not None and len(parts) > 1
        assert all(fits(p, budget) and not p.context_before for p in parts)
        assert "".join("".join(p.texts[0].split()) for p in parts) == "".join(text.split())  # nothing dropped


def test_a_budget_that_cannot_hold_a_part_of_a_few_sentences_plans_nothing() -> None:
    request = SummaryRequest(SummaryKind.CHUNK, (english_prose(2_000, seed=8),))
    framing = estimate_request_tokens(SummaryRequest(SummaryKind.CHUNK, ("",)))
    assert plan_chunk(request, framing + 10) is None
    roomy = framing + estimate_text_tokens("x" * MIN_PART_CHARS) + 40
    assert plan_chunk(request, int(roomy / 0.75) + 10) is not None


def test_a_refusal_lowers_the_budget_to_the_stated_window_then_below_it() -> None:
    assert lowered_budget(None, 3_000, stated_limit=2_048) == 2_048
    assert lowered_budget(8_000, 3_000, stated_limit=2_048) == 2_048
    # Refused although planned under the stated window: our estimate ran low, go a safe factor below.
    again = lowered_budget(2_048, 1_500, stated_limit=2_048)
    assert again is not None and again < 2_048
    # No window stated: a safe factor below what was tried.
    unstated = lowered_budget(None, 3_000, stated_limit=None)
    assert unstated is not None and unstated < 3_000
    # Never below the floor, never up.
    assert lowered_budget(300, 100, stated_limit=None) is None
    higher = lowered_budget(1_000, 500, stated_limit=4_000)
    assert higher is not None and higher < 1_000


def test_a_chunk_ending_in_a_short_sentence_and_a_blank_line_is_planned_in_parts() -> None:
    # A chunk cut at a paragraph start ends with the blank line before it; here its last part is one
    # short sentence. Counted with that blank line, the sentence never reached the part's minimum, and
    # the chunk failed as "does not fit the model's context window, not even in parts".
    text = chinese_prose(1_900, seed=7).replace("\n\n", "")
    last = "孩子们常常在村口的大树下谈起突如其来的暴雨。"
    assert len(last) < MIN_PART_CHARS
    # a budget that holds `text` to the token, so the last sentence is a part of its own
    budget = estimate_request_tokens(SummaryRequest(SummaryKind.CHUNK, (text,))) + 600
    assert budget >= 2_400  # the room kept for the answer is then 600 tokens
    request = SummaryRequest(SummaryKind.CHUNK, (text + last + "\n\n",))
    parts = plan_chunk(request, budget)
    assert parts is not None
    assert [p.texts[0] for p in parts] == [text, last]
