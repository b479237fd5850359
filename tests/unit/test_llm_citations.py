"""An LLM's citations: the request's sentences numbered, the schema that holds an answer to them, the
answer read leniently, and each sentence labelled by what supports it."""

from __future__ import annotations

import json

import pytest

from docsum_llm.base import Span, SummaryKind, SummaryRequest, SummarySentence
from docsum_llm.openai.citations import cited_sentences, claims, numbered, response_format, summary_text
from docsum_llm.openai.prompts import build_messages

CHUNK = SummaryRequest(
    SummaryKind.CHUNK,
    ("Kafka stores events in topics. Brokers replicate partitions.\n\nConsumers read events from topics.",),
)
MERGE = SummaryRequest(SummaryKind.DOCUMENT, ("Kafka stores events.", "Brokers replicate partitions. Consumers read."))


def test_sentences_are_numbered_over_all_the_texts_of_a_request() -> None:
    assert numbered(MERGE).spans == {"S1": Span(0, 0, 20), "S2": Span(1, 0, 29), "S3": Span(1, 30, 45)}
    shown = numbered(CHUNK).shown(0)
    assert shown == (
        "[S1] Kafka stores events in topics.\n[S2] Brokers replicate partitions.\n\n"
        "[S3] Consumers read events from topics."
    )
    user = str(build_messages(MERGE, "text")[1]["content"])
    assert "<part n=2>\n[S2] Brokers replicate partitions.\n[S3] Consumers read.\n</part>" in user
    assert "[S<id>][S<id>]" in user and "JSON" not in user
    assert '"sources"' in str(build_messages(MERGE, "json_schema")[1]["content"])
    off = str(build_messages(MERGE, "off")[1]["content"])
    assert "[S1]" not in off and "<part n=1>\nKafka stores events.\n</part>" in off


def test_the_schema_allows_only_this_requests_ids() -> None:
    held = response_format(numbered(MERGE).ids)
    assert held["type"] == "json_schema" and held["json_schema"]["strict"] is True
    schema = held["json_schema"]["schema"]
    sentence = schema["properties"]["sentences"]["items"]
    assert sentence["properties"]["sources"]["items"]["enum"] == ["S1", "S2", "S3"]
    assert sentence["required"] == ["text", "sources"] and sentence["additionalProperties"] is False
    assert schema["required"] == ["sentences"] and schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ("Kafka stores events. [S2][S5]", [("Kafka stores events.", ("S2", "S5"))]),
        ("Kafka stores events. [S2, S5]", [("Kafka stores events.", ("S2", "S5"))]),
        ("Kafka stores events (S2)", [("Kafka stores events", ("S2",))]),
        ("Kafka stores events [s2].", [("Kafka stores events.", ("S2",))]),  # ids in lower case, before the stop
        ("Kafka stores events. S2", [("Kafka stores events.", ("S2",))]),
        ("Kafka stores events S2, S5.", [("Kafka stores events.", ("S2", "S5"))]),
        (
            "- Kafka stores events. [S1]\n* Brokers copy. [S3]",
            [("Kafka stores events.", ("S1",)), ("Brokers copy.", ("S3",))],
        ),
        (
            "1. Kafka stores events. [S1]\n\n2) Brokers copy. [S3]",
            [("Kafka stores events.", ("S1",)), ("Brokers copy.", ("S3",))],
        ),
        ("Here is the summary:\n\nKafka stores events. [S1]", [("Kafka stores events.", ("S1",))]),
        ("**Summary:**\n## Kafka\nKafka stores events. [S1]", [("Kafka stores events.", ("S1",))]),
        (
            "Kafka stores events. [S1] Brokers copy. [S3]",
            [("Kafka stores events.", ("S1",)), ("Brokers copy.", ("S3",))],
        ),
        ("Kafka stores events. [S1]\nBrokers copy.", [("Kafka stores events.", ("S1",)), ("Brokers copy.", ())]),
        ("Kafka is a log. It stores events.", [("Kafka is a log.", ()), ("It stores events.", ())]),  # free prose
        ("卡夫卡存储事件。【S1】", [("卡夫卡存储事件。", ("S1",))]),
    ],
)
def test_the_text_format_is_read_leniently(answer: str, read: list[tuple[str, tuple[str, ...]]]) -> None:
    assert claims(answer) == read


def test_a_json_answer_is_read_whole_fenced_or_cut_at_its_bound() -> None:
    whole = {"sentences": [{"text": "Kafka  stores\nevents.", "sources": ["S1", "s3"]}, {"text": "", "sources": []}]}
    assert claims(json.dumps(whole)) == [("Kafka stores events.", ("S1", "S3"))]
    assert claims(f"```json\n{json.dumps(whole)}\n```") == [("Kafka stores events.", ("S1", "S3"))]
    cut = '{"sentences": [{"text": "Kafka stores events.", "sources": ["S1"]}, {"text": "Brokers co'
    assert claims(cut) == [("Kafka stores events.", ("S1",))]  # a half sentence is not shown beside whole ones
    assert claims('{"sentences": [{"text": "Kafka stores ev') == [("Kafka stores ev", ())]  # unless it is all
    assert claims('{"sentences": []}') == []


def test_each_sentence_is_cited_aligned_or_unsupported_and_an_invented_id_is_dropped() -> None:
    numbers = numbered(CHUNK)
    found = [
        ("Kafka keeps its events in topics.", ("S1", "S9")),  # S9 is not in the request
        ("Brokers replicate partitions.", ("S3",)),  # the wrong id: S2 says it
        ("Consumers read topics; brokers replicate partitions.", ()),  # two sentences together
        ("Kafka is written in Scala and Java.", ("S1",)),  # nothing shown says it
        ("Brokers replicate partitions.", ("S42",)),  # only an invented id
    ]
    assert cited_sentences(found, numbers) == (
        SummarySentence("Kafka keeps its events in topics.", (Span(0, 0, 30),), "cited"),
        SummarySentence("Brokers replicate partitions.", (Span(0, 31, 60),), "aligned"),
        SummarySentence(
            "Consumers read topics; brokers replicate partitions.", (Span(0, 31, 60), Span(0, 62, 96)), "aligned"
        ),
        SummarySentence("Kafka is written in Scala and Java.", (), "unsupported"),
        SummarySentence("Brokers replicate partitions.", (Span(0, 31, 60),), "aligned"),
    )


def test_a_sentence_naming_code_no_sentence_shown_names_is_unsupported_and_one_that_does_takes_it_along() -> None:
    # A manual's page; a local model's sentence about it named a function the page does not (idn2_malloc).
    page = SummaryRequest(
        SummaryKind.CHUNK,
        ("Memory handling frees the given pointer. The library heap may differ from the caller heap. Use idn2_free.",),
    )
    numbers = numbered(page)
    found: list[tuple[str, tuple[str, ...]]] = [
        # Its words are the first two sentences' together, but the name is made up: no sentence has it.
        ("Memory handling frees the library heap pointer with idn2_malloc.", ()),
        # The same with the name the page has: the sentence that names it is one of its sources too.
        ("Memory handling frees the library heap pointer with idn2_free.", ()),
    ]
    made_up, put_together = cited_sentences(found, numbers)
    assert made_up == SummarySentence(found[0][0], (), "unsupported")
    assert put_together == SummarySentence(found[1][0], tuple(numbers.spans.values()), "synthesis")


def test_the_summary_holds_each_sentence_verbatim_in_the_style_asked() -> None:
    sentences = (SummarySentence("One.", ()), SummarySentence("两个。", ()), SummarySentence("Three.", ()))
    assert summary_text(sentences, "") == "One. 两个。Three."
    assert summary_text(sentences, "bullets") == "- One.\n- 两个。\n- Three."
