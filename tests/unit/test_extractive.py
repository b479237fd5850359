"""The offline extractive summarizer: TextRank over sentences, English and Chinese, merges."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from docsum_shared.summarizers.base import SummaryKind, SummaryRequest, SummaryResult
from docsum_shared.summarizers.extractive import ExtractiveBackend, _is_candidate, textrank
from docsum_shared.text import detect_language, split_sentences, tokens_for_similarity

ENGLISH_CHUNK = """# Kafka basics
Apache Kafka is a distributed event streaming platform that stores records in topics. Producers write \
records to Kafka topics, and consumers read records from those topics. Each Kafka topic is split into \
partitions, and every partition is replicated across several brokers. The weather in Paris was \
pleasant last spring. Consumer groups let several consumers share the partitions of one topic. Kafka \
keeps records for a configurable retention period, e.g. seven days. My neighbour's cat likes to sleep \
on the sofa all afternoon. Brokers elect a leader for each partition, and followers replicate the \
leader's records. Offsets record how far each consumer group has read in a partition. The bakery \
around the corner sells excellent croissants on Sundays."""

OFF_TOPIC = (
    "The weather in Paris was pleasant last spring.",
    "My neighbour's cat likes to sleep on the sofa all afternoon.",
    "The bakery around the corner sells excellent croissants on Sundays.",
)

CHINESE_CHUNK = """# 系统概述
本系统使用消息队列处理文档摘要任务。每个文档首先被解析服务解析为纯文本。解析后的文本被切分为多个分块，\
每个分块由摘要服务单独生成摘要。今天中午我在楼下吃了一碗牛肉面。分块摘要最后被合并为文档摘要，文档摘要再合并为\
任务摘要！系统同时支持中文文档和英文文档。消息队列保证摘要任务不会丢失；失败的摘要任务会自动重试。窗外的梧桐树叶\
已经变黄了。"""


def run(backend: ExtractiveBackend, kind: SummaryKind, *texts: str, labels: tuple[str, ...] = ()) -> SummaryResult:
    return backend.summarize_sync(SummaryRequest(kind, tuple(texts), labels=labels))


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(any(p == w for w in it) for p in part)


@pytest.fixture
def backend() -> ExtractiveBackend:
    return ExtractiveBackend()


def test_english_chunk_summary_is_an_ordered_subset_of_the_input(backend: ExtractiveBackend) -> None:
    result = run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK)
    assert result.model == "extractive-textrank-v1"
    summary_sentences = split_sentences(result.text)
    input_sentences = split_sentences(ENGLISH_CHUNK)
    assert 1 <= len(summary_sentences) <= 3  # ceil(25% of 11 candidates)
    assert is_subsequence(summary_sentences, input_sentences)
    assert len(result.text) < len(ENGLISH_CHUNK) / 2
    assert not any(s in result.text for s in OFF_TOPIC)
    assert "#" not in result.text
    assert "Kafka" in result.text or "partition" in result.text
    assert "  " not in result.text


def test_chinese_chunk_gives_a_chinese_summary_of_input_sentences(backend: ExtractiveBackend) -> None:
    result = run(backend, SummaryKind.CHUNK, CHINESE_CHUNK)
    assert result.text
    assert detect_language(result.text) == "zh"
    summary_sentences = split_sentences(result.text)
    assert is_subsequence(summary_sentences, split_sentences(CHINESE_CHUNK))
    assert " " not in result.text, "Chinese sentences are joined without spaces"
    assert "牛肉面" not in result.text and "梧桐" not in result.text
    assert "摘要" in result.text
    assert len(result.text) < len(CHINESE_CHUNK) / 2


def test_the_central_sentence_is_chosen() -> None:
    sentences = [
        "Apples grow in the northern orchard.",
        "Bicycles need regular chain lubrication.",
        "Copper wires conduct electricity well.",
        "The hub report links apples, bicycles, copper, dolphins and engines together.",
        "Dolphins communicate with clicks underwater.",
        "Engines convert fuel into motion.",
        "Granite is a common igneous rock.",
    ]
    backend = ExtractiveBackend(chunk_max_sentences=1)
    result = run(backend, SummaryKind.CHUNK, " ".join(sentences))
    assert result.text == sentences[3]


def test_lead_sentence_wins_only_when_nothing_else_differs() -> None:
    # No sentence shares a content word with another: the position prior decides.
    text = "Alpha bravo charlie delta. Echo foxtrot golf hotel. India juliet kilo lima. Mike oscar papa quebec."
    result = run(ExtractiveBackend(chunk_max_sentences=1), SummaryKind.CHUNK, text)
    assert result.text == "Alpha bravo charlie delta."


def test_deterministic_within_and_across_processes(backend: ExtractiveBackend) -> None:
    first = run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK)
    assert run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK) == first
    assert run(ExtractiveBackend(), SummaryKind.CHUNK, ENGLISH_CHUNK) == first
    # String hashing differs between processes; the result must not.
    code = (
        "from docsum_shared.summarizers.extractive import ExtractiveBackend\n"
        "from docsum_shared.summarizers.base import SummaryKind, SummaryRequest\n"
        "import sys\n"
        "text = sys.stdin.read()\n"
        "print(ExtractiveBackend().summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,))).text)\n"
    )
    long_text = _english_sentences(200, seed=4)
    outputs = set()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=long_text,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        outputs.add(out)
    assert len(outputs) == 1
    assert outputs.pop().strip() == run(backend, SummaryKind.DOCUMENT, long_text).text


def test_document_merge_deduplicates_repeated_sentences(backend: ExtractiveBackend) -> None:
    shared = "Kafka replicates every partition across three brokers for durability."
    parts = (
        "Kafka stores records in partitioned topics. " + shared,
        shared + " Consumers in a group share the partitions of a topic.",
        "Kafka replicates every partition across three brokers for safety. Offsets mark progress.",
        "KAFKA  replicates every partition across three brokers, for durability!",
    )
    result = run(backend, SummaryKind.DOCUMENT, *parts)
    assert result.text.count("eplicates every partition") == 1, "exact and near repeats dropped"
    assert "Offsets mark progress." in result.text
    assert "Kafka stores records in partitioned topics." in result.text
    assert "Consumers in a group share the partitions of a topic." in result.text


def test_document_merge_compresses_long_input_to_the_budget(backend: ExtractiveBackend) -> None:
    parts = [_english_sentences(6, seed=k) for k in range(30)]
    # neighbouring chunk summaries repeat a sentence (chunks overlap)
    for k in range(1, 30):
        parts[k] = split_sentences(parts[k - 1])[-1] + " " + parts[k]
    result = run(backend, SummaryKind.DOCUMENT, *parts)
    sentences = split_sentences(result.text)
    assert 1 <= len(sentences) <= 8
    assert len(result.text) <= 1200
    assert len(set(sentences)) == len(sentences)
    assert is_subsequence(sentences, [s for p in parts for s in split_sentences(p)])


def test_task_merge_over_chinese_and_english_documents(backend: ExtractiveBackend) -> None:
    chinese_summary = run(backend, SummaryKind.CHUNK, CHINESE_CHUNK).text
    english_summary = run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK).text
    result = run(backend, SummaryKind.TASK, chinese_summary, english_summary, labels=("a.docx", "b.pdf"))
    # short inputs already fit the merge budget: everything is kept, in order
    assert result.text.startswith(chinese_summary)
    assert result.text.endswith(english_summary)


def test_chunk_summary_respects_the_char_budget(backend: ExtractiveBackend) -> None:
    text = _english_sentences(40, seed=9)
    result = run(backend, SummaryKind.CHUNK, text)
    assert 0 < len(result.text) <= 600
    assert len(split_sentences(result.text)) <= 5


def test_never_empty_for_non_empty_input(backend: ExtractiveBackend) -> None:
    assert run(backend, SummaryKind.CHUNK, "# Title\n\nOk.").text == "Ok."
    assert run(backend, SummaryKind.CHUNK, "# Only a heading").text == "Only a heading"
    long_word = "x" * 5000
    assert run(backend, SummaryKind.CHUNK, long_word).text.startswith("xxx")
    assert 0 < len(run(backend, SummaryKind.CHUNK, long_word).text) <= 301
    huge_sentence = " ".join(["streaming"] * 400) + "."
    assert 0 < len(run(backend, SummaryKind.CHUNK, huge_sentence).text) <= 601
    assert run(backend, SummaryKind.CHUNK, "").text == ""
    assert run(backend, SummaryKind.DOCUMENT, "", "  ").text == ""


def test_token_estimates(backend: ExtractiveBackend) -> None:
    result = run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK)
    assert result.prompt_tokens > 100
    assert 0 < result.completion_tokens < result.prompt_tokens
    zh = run(backend, SummaryKind.CHUNK, CHINESE_CHUNK)
    assert zh.prompt_tokens >= len([c for c in CHINESE_CHUNK if "\u4e00" <= c <= "\u9fff"])


async def test_async_interface(backend: ExtractiveBackend) -> None:
    result = await backend.summarize(SummaryRequest(SummaryKind.CHUNK, (ENGLISH_CHUNK,)))
    assert result == run(backend, SummaryKind.CHUNK, ENGLISH_CHUNK)


def test_textrank_scores() -> None:
    assert textrank([]) == []
    assert textrank([["a"]]) == [1.0]
    scores = textrank([["hub", "x"], ["hub", "y"], ["hub", "z"], ["hub", "x", "y", "z"], ["lonely"]])
    assert sum(scores) == pytest.approx(1.0)
    assert max(range(5), key=scores.__getitem__) == 3
    assert scores[4] == min(scores)


def test_two_thousand_sentences_rank(backend: ExtractiveBackend) -> None:
    text = _english_sentences(2000, seed=1)
    token_lists = [tokens_for_similarity(s) for s in split_sentences(text)]
    assert len(token_lists) == 2000
    scores = textrank(token_lists)
    assert len(scores) == 2000 and sum(scores) == pytest.approx(1.0)
    result = run(backend, SummaryKind.DOCUMENT, text)
    assert 0 < len(result.text) <= 1200


_VOCAB = (
    "kafka broker topic partition replica leader follower offset consumer producer message record batch "
    "latency throughput retention schema stream window cluster network storage index cache timeout retry"
).split()


def _english_sentences(count: int, *, seed: int) -> str:
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        words = [rng.choice(_VOCAB) for _ in range(rng.randint(6, 14))]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def test_repeats_do_not_boost_a_sentence() -> None:
    # Overlapping chunks repeat sentences in neighbouring summaries; five copies of an off-topic
    # sentence must not outrank the sentences the rest of the text is about.
    on_topic = split_sentences(ENGLISH_CHUNK)[1:]
    off = "The bakery around the corner sells excellent croissants on Sundays."
    on_topic = [s for s in on_topic if s not in OFF_TOPIC]
    parts = [f"{on_topic[k]} {off}" for k in range(5)] + on_topic[5:]
    result = run(ExtractiveBackend(merge_max_sentences=2, merge_max_chars=300), SummaryKind.DOCUMENT, *parts)
    assert result.text and off not in result.text


def _reference_textrank(token_lists: list[list[str]], prior: list[float], damping: float = 0.85) -> list[float]:
    """A dense O(n²) TextRank with the same TF-IDF weighting, to check the sparse factorisation."""
    import math

    n = len(token_lists)
    df: dict[str, int] = {}
    for tokens in token_lists:
        for t in set(tokens):
            df[t] = df.get(t, 0) + 1
    vectors = []
    for tokens in token_lists:
        counts: dict[str, int] = {}
        for t in tokens:
            counts[t] = counts.get(t, 0) + 1
        v = {t: (1 + math.log(c)) * (math.log((1 + n) / (1 + df[t])) + 1) for t, c in counts.items()}
        norm = math.sqrt(sum(x * x for x in v.values()))
        vectors.append({t: x / norm for t, x in v.items()})
    w = [
        [0.0 if i == j else sum(x * vectors[j].get(t, 0.0) for t, x in vectors[i].items()) for j in range(n)]
        for i in range(n)
    ]
    p = [x / sum(prior) for x in prior]
    rank = list(p)
    for _ in range(500):
        new = [(1 - damping) * p[i] for i in range(n)]
        for j in range(n):
            out = sum(w[j])
            if out == 0:
                for i in range(n):
                    new[i] += damping * rank[j] * p[i]
            else:
                for i in range(n):
                    new[i] += damping * rank[j] * w[j][i] / out
        rank = new
    return rank


def test_textrank_matches_a_dense_reference() -> None:
    rng = random.Random(5)
    token_lists = [[rng.choice(_VOCAB) for _ in range(rng.randint(1, 8))] for _ in range(40)]
    token_lists.append(["unique", "words", "only"])
    prior = [1.0 + 0.5 / (1 + (i % 7)) for i in range(len(token_lists))]
    expected = _reference_textrank(token_lists, prior)
    got = textrank(token_lists, prior, tolerance=1e-12, max_iterations=1000)
    assert got == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------------------------------- real text


@pytest.mark.parametrize(
    "line",
    [
        # tables of contents
        "2.4 Creating document commands and environments . . . . . . . . . 4",
        "Table 1: Table1 Caption..............................................................2",
        "4 2.4 Creating document commands and environments .",
        "1 Introduction 2\n2 Creating document commands and environments 2\n3 Copying and showing commands 16",
        "3.1.5 Toponymy (external package) 18",
        # mostly digits and punctuation
        "2 2020 1 2021 3 2022 4 2023 5 2024 (6) [7] 8.",
        "192.168.0.1 - - [10/Oct/2023:13:55:36] 200 2326 0.004 0.118.",
        # code
        "\\IfBlankTF {⟨arg⟩} {⟨true code⟩} {⟨false code⟩} \\IfBlankT {⟨arg⟩} {⟨true code⟩} returns it.",
        '#include <stdio.h> int main(void) { return printf("%d\\n", x); }',
        "def summarize(request): return backend.summarize_sync(request) if request else None.",
        "} else { node = node.next; count = count + 1; total = total - 1; }",
        "261 \\bbl@exp{\\def\\<bbl@@#1>{#2}} and then more code follows here.",
        "1137\\def\\main@language#1{% 1138 \\def\\bbl@main@language{#1}% and so on for many lines.",
        '<magic priority="50"> <match type="string" offset="0"/> </magic> In practice this is rare.',
        "for (i = 0; i < n; i++) { a[i] = b[i] * c[i]; if (a[i] > m) m = a[i]; }",
        # fragments of a sentence whose start was lost
        "and the consumer group rebalances its partitions across the remaining members.",
        "which means that every record is written to three brokers before it is acknowledged.",
        "of the partitions that the leader still holds after the failure of a broker.",
    ],
)
def test_non_prose_lines_are_not_candidates(line: str) -> None:
    assert not _is_candidate(line, 3)


@pytest.mark.parametrize(
    "sentence",
    [
        "Apache Kafka is a distributed event streaming platform that stores records in topics.",
        "Kafka keeps records for a configurable retention period, e.g. seven days.",
        "In 2023 the cluster served 1,200 requests per second (p99 latency: 15 ms) across 3 regions.",
        "The function f(x) = 2x + 1 is linear, and g(x) = x^2 is not.",
        "Use the --verbose flag (or set LOG_LEVEL=debug) to see every request.",
        "iPhone sales grew by 12% in the third quarter of the year.",
        "The \\section command starts a new section and the \\label command names it.",
        "本系统使用消息队列处理文档摘要任务。",
        "分块摘要最后被合并为文档摘要，文档摘要再合并为任务摘要！",
        "消息队列保证摘要任务不会丢失；",
        "系统支持（中文）和【英文】文档，版本号为 2.1。",
        "系统支持(中文)和[英文]文档，配置写在 {config} 中。",
        "等号 = 右边的词被同终端的全名和名称中第一个 - 前面的一部分相比较。",
        "until 命令和 while 命令等价，除了对条件的测试恰好相反；",
        "This section explains chapter 3 of the guide in 5 steps.",
    ],
)
def test_prose_stays_a_candidate(sentence: str) -> None:
    assert _is_candidate(sentence, 3)


def test_table_of_contents_and_code_stay_out_of_a_summary(backend: ExtractiveBackend) -> None:
    text = (
        "Contents\n1 Introduction . . . . . . . . . . . . . . . . . . . 2\n"
        "2 Kafka partitions and replicas . . . . . . . . . . . . . 4\n3 Kafka consumer groups . . . . . . . 9\n\n"
        + ENGLISH_CHUNK.split("\n", 1)[1]
        + "\n\n\\kafka@topic{#1}{\\partition@count{#2}}\\kafka@replicas{#3} % Kafka partition topic records.\n"
        "}\n\n} Kafka topics store partition records for consumers.\n"
    )
    result = run(backend, SummaryKind.DOCUMENT, text)
    assert ". ." not in result.text
    assert "\\" not in result.text and "@" not in result.text
    assert not result.text.startswith(("}", ")", "]"))
    assert "Kafka" in result.text


def test_a_summary_never_starts_with_a_stray_closing_bracket(backend: ExtractiveBackend) -> None:
    result = run(backend, SummaryKind.CHUNK, ") The broker stores every record of a topic on disk.")
    assert result.text == "The broker stores every record of a topic on disk."
    result = run(backend, SummaryKind.CHUNK, "】」 The broker stores every record. }")
    assert result.text == "The broker stores every record."


def test_words_hyphenated_at_a_line_end_are_joined(backend: ExtractiveBackend) -> None:
    text = "The schema is de-\nfined by the producer and read by every consumer."
    assert (
        run(backend, SummaryKind.CHUNK, text).text
        == "The schema is defined by the producer and read by every consumer."
    )


_DOC_TOPICS = [
    ("rivers", "barges", "floods"),
    ("libraries", "catalogues", "readers"),
    ("railways", "signals", "timetables"),
    ("orchards", "apples", "harvests"),
    ("bakeries", "ovens", "loaves"),
    ("harbours", "cranes", "tides"),
    ("museums", "exhibits", "curators"),
    ("vineyards", "grapes", "cellars"),
    ("observatories", "telescopes", "comets"),
    ("hospitals", "wards", "nurses"),
    ("bridges", "cables", "pylons"),
    ("forests", "rangers", "wildfires"),
]


def _document_summary(k: int) -> str:
    a, b, c = _DOC_TOPICS[k]
    return (
        f"Report {k} studies {a} and {b}. The {a} depend on {b} and {c} every season. Local {c} shape how {a} use {b}."
    )


def test_task_summary_covers_every_document_before_second_sentences(backend: ExtractiveBackend) -> None:
    docs = [_document_summary(k) for k in range(len(_DOC_TOPICS))]
    result = run(backend, SummaryKind.TASK, *docs, labels=tuple(f"doc{k}.pdf" for k in range(len(docs))))

    sentences = split_sentences(result.text)
    owners = [next(k for k, d in enumerate(docs) if s in d) for s in sentences]
    assert sorted(set(owners)) == list(range(len(docs))), "every document contributes"
    assert owners == sorted(owners), "in document order"
    assert len(result.text) <= 1200
    # with room for 12 sentences only, each document gives exactly one
    assert len(sentences) == len(docs)


def test_task_summary_budget_and_round_robin() -> None:
    backend = ExtractiveBackend(merge_max_sentences=2, merge_max_chars=10_000)
    docs = [_document_summary(k) for k in range(4)]
    result = run(backend, SummaryKind.TASK, *docs)
    sentences = split_sentences(result.text)
    owners = [next(k for k, d in enumerate(docs) if s in d) for s in sentences]
    # the budget grows to the number of documents: one sentence each (not two from two documents)
    assert owners == [0, 1, 2, 3]
    # a DOCUMENT merge keeps the plain merge budget
    assert len(split_sentences(run(backend, SummaryKind.DOCUMENT, *docs).text)) == 2
