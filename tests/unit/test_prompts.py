"""What the prompts show a model of the citation format, and what becomes of an answer that copies the
prompt: a small model (Qwen2.5-Coder-1.5B through llama.cpp's server) put the format's example sentence,
"Kafka stores events in topics.", into every summary it wrote, and a one-page document's summary was that
sentence alone. The format is shown with placeholders; an answer's sentence that repeats the prompt is
dropped, and counted."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client import REGISTRY

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.citations import CitationMode, claims
from docsum_llm.openai.client import OpenAIBackend
from docsum_llm.openai.prompts import build_messages, echoes_instructions, text_language
from docsum_shared.errors import ProviderUnavailable

MODEL = "prompt-copier-1"
CHUNK = SummaryRequest(SummaryKind.CHUNK, ("The river rose overnight. The bridge held until noon.",))
REQUESTS = [
    CHUNK,
    SummaryRequest(SummaryKind.CHUNK, CHUNK.texts, context_before="Rain fell.", style="bullets", max_tokens=200),
    SummaryRequest(SummaryKind.DOCUMENT, ("The river rose.", "The bridge held."), title="flood.txt", length="brief"),
    SummaryRequest(SummaryKind.TASK, ("The river rose.", "Crops failed."), labels=("a.txt", "b.txt"), language="en"),
]


def _instructions(request: SummaryRequest, citations: CitationMode) -> str:
    """The prompt less what it shows (the texts' numbered sentences, the context, the tags around them):
    what the model is told."""
    prompt = "\n".join(str(m["content"]) for m in build_messages(request, citations))
    shown = {request.context_before, request.context_after}
    told = [
        line
        for line in prompt.splitlines()
        if not re.match(r"\[S\d+\] ", line) and line not in shown and not re.fullmatch(r"</?\w+( [^>]*)?>", line)
    ]
    return "\n".join(told)


def _count() -> float:
    return REGISTRY.get_sample_value("docsum_llm_instruction_echoes_total", {"model": MODEL}) or 0.0


def _answered(content: str, request: SummaryRequest = CHUNK) -> tuple[list[str], float]:
    """The sentences a batch line answered with `content` keeps, and how many were dropped for echoing."""
    before = _count()
    backend = OpenAIBackend(MODEL, base_url="http://127.0.0.1:9/v1", api_key="k")  # no call is made
    result = backend.read_answer({"choices": [{"message": {"content": content}}]}, request)
    return [s.text for s in result.sentences], _count() - before


@pytest.mark.parametrize("citations", ["text", "json_schema"])
@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.kind}-{r.style or 'prose'}")
def test_the_prompt_shows_no_sentence_that_could_pass_for_a_summary(
    request_: SummaryRequest, citations: CitationMode
) -> None:
    told = _instructions(request_, citations)
    assert "Kafka" not in told and "S<id>" in told  # the format, shown with placeholders
    # A model that copies every word it is told back, in the format it was asked for, gives no sentence
    # a summary keeps: each is one of the instructions, or a placeholder.
    copied = claims(told)
    assert copied and all(echoes_instructions(text, request_) for text, _ in copied), [
        text for text, _ in copied if not echoes_instructions(text, request_)
    ]


def test_an_answer_that_copies_the_format_or_the_instructions_loses_those_sentences_and_counts_them() -> None:
    text_answer = (
        "The river rose overnight. [S1]\n"
        "<sentence> [S<id>][S<id>]\n"
        "Use only the ids shown above.\n"
        "Summarize the text between <text> tags in a few sentences.\n"
        "The bridge held until noon. [S2]"
    )
    assert _answered(text_answer) == (["The river rose overnight.", "The bridge held until noon."], 3)
    json_answer = {
        "sentences": [
            {"text": "<sentence>", "sources": ["S1", "S2"]},
            {"text": "The river rose overnight.", "sources": ["S1"]},
        ]
    }
    assert _answered(json.dumps(json_answer)) == (["The river rose overnight."], 1)


@pytest.mark.parametrize(
    ("sentence", "request_"),
    [
        ("<text>", CHUNK),  # SmolLM2-135M's whole answer to a one-chunk PDF, aligned to a source saying "text"
        ("</text>", CHUNK),
        ("<previous_context> </previous_context>", CHUNK),
        ("<part n=2>", REQUESTS[2]),
        ('<document name="a.txt">', REQUESTS[3]),
    ],
)
def test_an_answer_sentence_that_is_only_a_tag_of_the_prompt_is_dropped(
    sentence: str, request_: SummaryRequest
) -> None:
    assert echoes_instructions(sentence, request_)
    assert _answered(f"The river rose overnight. [S1]\n{sentence} [S1]", request_) == (["The river rose overnight."], 1)


def test_an_answer_that_is_only_the_format_is_a_failed_attempt_not_a_summary() -> None:
    # The one-page document whose summary was the example sentence alone: now no summary at all, and the
    # call is tried again as any failed attempt is.
    before = _count()
    with pytest.raises(ProviderUnavailable, match="no sentence"):
        _answered("- <sentence> [S<id>][S<id>]", SummaryRequest(CHUNK.kind, CHUNK.texts, style="bullets"))
    assert _count() - before == 1


@pytest.mark.parametrize(
    "sentence",
    [
        "The river rose overnight.",  # what the text says, quoted
        "The guide asks writers to keep it concise.",  # a few of the instructions' words
        "Keep it concise, the guide says.",  # a short instruction inside a longer sentence
        "The text says.",  # a short part of an instruction's sentence
        "Each chapter starts with its number in brackets.",
    ],
)
def test_a_summary_sentence_that_shares_words_with_the_instructions_is_kept(sentence: str) -> None:
    assert not echoes_instructions(sentence, CHUNK)
    assert _answered(f"{sentence} [S1]") == ([sentence], 0)


ESSAY = "我出生的城市沿着一条河展开。小时候，我以为所有的城市都应该有一条河。河流是城市最早的道路。"


@pytest.mark.parametrize("citations", ["text", "json_schema", "off"])
@pytest.mark.parametrize(
    "request_",
    [
        SummaryRequest(SummaryKind.CHUNK, (ESSAY,), context_before="Rain fell."),
        SummaryRequest(SummaryKind.DOCUMENT, (ESSAY, "河流是城市最早的道路。"), title="essay.txt"),
    ],
    ids=["chunk", "document"],
)
def test_a_chinese_text_asked_in_no_language_is_asked_for_a_chinese_summary_by_name_last(
    request_: SummaryRequest, citations: CitationMode
) -> None:
    # Qwen2.5-Coder-1.5B, told in English to write "in the same language as the text", summarized the
    # Chinese example essay in English.
    system, user = (str(m["content"]) for m in build_messages(request_, citations))
    assert "Write in Chinese." in system
    assert user.endswith("\n\nWrite your summary in Chinese.")
    # An answer that repeats that line is no summary sentence.
    assert echoes_instructions("Write your summary in Chinese.", request_)
    assert not echoes_instructions("河流是城市最早的道路。", request_)


@pytest.mark.parametrize(
    ("texts", "language"),
    [
        ((ESSAY,), "Chinese"),
        (("東京は日本の首都です。ここには多くの人が住んでいます。",), "Japanese"),
        (("서울은 한국의 수도입니다.",), "Korean"),
        (("The river rose overnight.", "河流"), ""),  # mostly Latin letters: left to the model
        (("La rivière a monté pendant la nuit.",), ""),
    ],
)
def test_the_language_named_is_the_one_of_the_texts_script(texts: tuple[str, ...], language: str) -> None:
    assert text_language(texts) == language
    system, user = (str(m["content"]) for m in build_messages(SummaryRequest(SummaryKind.CHUNK, texts)))
    assert user.endswith(f"Write your summary in {language}.") == bool(language)
    # A language the submitter asked for is the one named, whatever the text's.
    asked = build_messages(SummaryRequest(SummaryKind.CHUNK, texts, language="French"))
    assert str(asked[1]["content"]).endswith("Write your summary in French.")
