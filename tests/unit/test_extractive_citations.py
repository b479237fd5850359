"""The extractive backend cites exactly: every sentence of a chunk's, document's or task's summary comes
with the range of its request's text it quotes, and `supports` holds between the two."""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest

from docsum_llm.base import Span, SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.citations import supports
from docsum_llm.extractive import ExtractiveBackend
from docsum_parser.extract import extract_text
from tests.documents import chinese_prose, english_prose
from tests.unit.test_extractive import CHINESE_CHUNK, CHINESE_TECHNICAL, ENGLISH_CHUNK, LATEX_PDF

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHUNK_CHARS = 1500

WRAPPED = (
    "Distributed logs keep every record in the order it was writ-\nten, and a consumer reads them at its own\n"
    "pace.\n- The broker stores each partition on several disks.\n- [3] Replicas that fall be-\nhind are "
    "dropped from the in-sync set.\n3. Leaders serve reads and writes for their par-\n12\ntitions alone.\n"
    "\n```\nconsumer.poll(timeout=1.0)\n```\n\nAn event-\ndriven design decouples services, and event-driven "
    "systems scale out.\n"
)
CODE_LINES = (
    "The scheduler keeps its queue in memory and flushes it on every commit.\n"
    "def flush(queue):\n    for item in queue:\n        store(item)\n"
    "A crash loses at most one second of accepted work, which the producer sends again.\n"
    "if retries > 3 and not done:\n    raise Timeout()\n"
    "Operators watch the lag of each consumer group on a dashboard.\n"
)
NOTHING_BUT_CODE = "x = compute(a, b)\ny = x * 2\nprint(y)\n"


@functools.cache
def corpus() -> dict[str, str]:
    texts = {path.name: extract_text(path.read_bytes(), path.name).text for path in sorted(EXAMPLES.iterdir())}
    texts |= {
        "english_prose": english_prose(5000, seed=3),
        "chinese_prose": chinese_prose(3000, seed=5),
        "english_chunk": ENGLISH_CHUNK,
        "chinese_chunk": CHINESE_CHUNK,
        "chinese_technical": CHINESE_TECHNICAL,
        "latex_pdf": LATEX_PDF,
        "wrapped": WRAPPED,
        "code_lines": CODE_LINES,
        "nothing_but_code": NOTHING_BUT_CODE,
        "long_sentence": "Every " + "word " * 200 + "counts.",
    }
    return texts


def chunks(text: str) -> tuple[str, ...]:
    return tuple(text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS))[:8]


def requests(text: str, length: str, style: str) -> list[SummaryRequest]:
    parts = chunks(text)
    out = [SummaryRequest(SummaryKind.CHUNK, (part,)) for part in parts[:4]]
    out.append(SummaryRequest(SummaryKind.CHUNK, (parts[-1],), context_before=parts[0]))
    out.append(SummaryRequest(SummaryKind.DOCUMENT, parts))
    out.append(SummaryRequest(SummaryKind.DOCUMENT, ("", *parts[:3], "  ")))
    out.append(SummaryRequest(SummaryKind.TASK, (text, "", parts[0]), labels=("one.pdf", "two.txt", "three.docx")))
    out.append(SummaryRequest(SummaryKind.TASK, (parts[-1], text)))
    return [replace(r, length=length, style=style) for r in out]


def only(sentence: SummarySentence) -> Span:
    """The one range an extractive sentence quotes (it is cited: it quotes it)."""
    (span,) = sentence.spans
    assert sentence.support == "cited", sentence
    return span


def assert_cites_exactly(request: SummaryRequest, result: SummaryResult) -> None:
    assert result.sentences or not result.text
    for sentence in result.sentences:
        span = only(sentence)
        source = request.texts[span.source]
        assert 0 <= span.start < span.end <= len(source), sentence
        quoted = source[span.start : span.end]
        assert supports(quoted, sentence.text), (quoted, sentence.text)
    assert re.fullmatch(layout(request, result.sentences), result.text), (result.text, result.sentences)


def layout(request: SummaryRequest, sentences: tuple[SummarySentence, ...]) -> str:
    """The pattern the summary text must match: its sentences in order, and nothing but the way they are
    joined (a space or nothing, "- " bullets one a line) and, in a task, each document's name above."""
    bullets = request.style == "bullets"

    def paragraph(group: list[SummarySentence]) -> str:
        quoted = [re.escape(s.text) for s in group]
        return "- " + "\n- ".join(quoted) if bullets else " ?".join(quoted)

    if request.kind is not SummaryKind.TASK:
        return paragraph(list(sentences))
    names = list(request.labels) if len(request.labels) == len(request.texts) else []
    parts = []
    for index in sorted({only(s).source for s in sentences}):
        name = names[index] if names else f"Document {index + 1}"
        parts.append(re.escape(name) + "\n" + paragraph([s for s in sentences if only(s).source == index]))
    return "\n\n".join(parts)


@pytest.mark.parametrize("style", ["", "bullets"])
@pytest.mark.parametrize("length", ["brief", "", "detailed"])
@pytest.mark.parametrize("name", sorted(corpus()))
def test_every_sentence_cites_the_range_it_quotes(name: str, length: str, style: str) -> None:
    backend = ExtractiveBackend()
    for request in requests(corpus()[name], length, style):
        assert_cites_exactly(request, backend.summarize_sync(request))


def test_a_merge_of_summaries_cites_the_summaries() -> None:
    backend = ExtractiveBackend()
    parts = chunks(corpus()["kafka-overview.pdf"])
    summaries = tuple(backend.summarize_sync(SummaryRequest(SummaryKind.CHUNK, (p,))).text for p in parts)
    for kind in (SummaryKind.DOCUMENT, SummaryKind.TASK):
        request = SummaryRequest(kind, summaries)
        result = backend.summarize_sync(request)
        assert len({only(s).source for s in result.sentences}) > 1
        assert_cites_exactly(request, result)


# ---------------------------------------------------------------------------------------------- exact


def cited(request: SummaryRequest) -> list[tuple[int, str, str]]:
    """Each sentence's source, the text it cites and its own text."""
    result = ExtractiveBackend().summarize_sync(request)
    spans = [only(s) for s in result.sentences]
    return [
        (x.source, request.texts[x.source][x.start : x.end], s.text)
        for x, s in zip(spans, result.sentences, strict=True)
    ]


def test_marks_stay_out_of_the_range() -> None:
    text = "- Kafka stores records in topics.\n- [2] Consumers read records from topics.\n3. Brokers replicate them."
    result = ExtractiveBackend().summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,), style="bullets"))
    assert result.sentences == (
        SummarySentence.quoting("Kafka stores records in topics.", 0, 2, 33),
        SummarySentence.quoting("Consumers read records from topics.", 0, 40, 75),
        SummarySentence.quoting("Brokers replicate them.", 0, 79, 102),
    )


def test_a_wrapped_sentence_cites_its_lines_and_the_page_number_between_them() -> None:
    text = "Leaders serve reads and writes for their par-\n12\ntitions alone. Followers copy the leader's log."
    assert cited(SummaryRequest(SummaryKind.DOCUMENT, (text,))) == [
        (
            0,
            "Leaders serve reads and writes for their par-\n12\ntitions alone.",
            "Leaders serve reads and writes for their partitions alone.",
        ),
        (0, "Followers copy the leader's log.", "Followers copy the leader's log."),
    ]


def test_chinese_lines_join_without_a_space_and_blank_texts_keep_their_index() -> None:
    request = SummaryRequest(SummaryKind.DOCUMENT, ("", "调度器把任务写入\n数据库。执行器按顺序\n执行任务。"))
    assert cited(request) == [
        (1, "调度器把任务写入\n数据库。", "调度器把任务写入数据库。"),
        (1, "执行器按顺序\n执行任务。", "执行器按顺序执行任务。"),
    ]


def test_a_cut_sentence_cites_the_part_it_shows() -> None:
    text = "Every " + "word " * 200 + "counts."
    [(source, quoted, shown)] = cited(SummaryRequest(SummaryKind.CHUNK, (text,)))
    assert shown.endswith("…") and quoted == shown[:-1]
    assert text.startswith(quoted) and len(quoted) < len(text)


def test_the_fallback_cites_a_heading_without_its_marks() -> None:
    assert cited(SummaryRequest(SummaryKind.CHUNK, ("## Release notes ##",))) == [(0, "Release notes", "Release notes")]
    assert cited(SummaryRequest(SummaryKind.CHUNK, (NOTHING_BUT_CODE,))) == [
        (0, NOTHING_BUT_CODE.strip(), NOTHING_BUT_CODE.strip())
    ]


def test_a_task_cites_each_document() -> None:
    request = SummaryRequest(
        SummaryKind.TASK,
        ("Kafka stores records in topics.", "", "Brokers replicate partitions."),
        labels=("a", "b", "c"),
    )
    result = ExtractiveBackend().summarize_sync(request)
    assert result.text == "a\nKafka stores records in topics.\n\nc\nBrokers replicate partitions."
    assert result.sentences == (
        SummarySentence.quoting("Kafka stores records in topics.", 0, 0, 31),
        SummarySentence.quoting("Brokers replicate partitions.", 2, 0, 29),
    )


# ------------------------------------------------------------------------------------------ supports


@pytest.mark.parametrize(
    ("quoted", "sentence"),
    [
        ("Kafka stores records.", "Kafka stores records."),
        ("Kafka  stores\n  records.", "Kafka stores records."),
        ("Kafka stores\nrecords.", "Kafka stores\nrecords."),  # the fallback keeps line breaks
        ("records are de-\n  fined here.", "records are defined here."),
        ("an event-\ndriven design.", "an event-driven design."),
        ("an event-\ndriven design.", "an event-\ndriven design."),
        ("Leaders serve their par-\n12\ntitions.", "Leaders serve their partitions."),
        ("Leaders serve\nPage 3 of 9\ntheir partitions.", "Leaders serve their partitions."),
        ("- [2] Consumers read topics.", "Consumers read topics."),
        ("3. Consumers read topics.", "Consumers read topics."),
        ("## Release notes ##", "Release notes"),
        ("调度器把任务写入\n数据库。", "调度器把任务写入数据库。"),
        ("调度器把任务写入\n数据库。", "调度器把任务写入 数据库。"),
        ("Every word", "Every word…"),
        ("It ends here…", "It ends here…"),
    ],
)
def test_supports_what_the_backend_does(quoted: str, sentence: str) -> None:
    assert supports(quoted, sentence)


@pytest.mark.parametrize(
    ("quoted", "sentence"),
    [
        ("Kafka stores records.", "Kafka stores logs."),
        ("Kafka stores records.", "kafka stores records."),
        ("Kafka stores records.", "Kafka stores records"),
        ("Kafka stores records.", "Kafka stores records. And more."),
        ("Kafka stores records.", ""),
        ("Kafkastores records.", "Kafka stores records."),  # no space where the text has none
        ("Kafka stores records.", "Kafkastores records."),  # nor a space dropped between words
        ("an event-driven design.", "an eventdriven design."),  # a hyphen not at a line end stays
        ("the x_y-\nz value.", "the x_yz value."),  # not a word of letters
        ("Kafka-\nStreams runs.", "KafkaStreams runs."),  # upper case after the break
        ("Leaders serve 12 their partitions.", "Leaders serve their partitions."),  # not a line of its own
        ("Leaders serve\nthe first\ntheir partitions.", "Leaders serve their partitions."),  # not furniture
        ("Kafka stores - records.", "Kafka stores records."),  # a mark only in front
        ("调度器把任务写入 数据库。", "调度器把任务写入数据库。"),  # a space, not a line break
        ("Kafka stores\nrecords.", "Kafka storesrecords."),  # a line break between Latin words
        ("Every word", "Every wor…"),  # the part kept is cited whole
    ],
)
def test_supports_nothing_else(quoted: str, sentence: str) -> None:
    assert not supports(quoted, sentence)
