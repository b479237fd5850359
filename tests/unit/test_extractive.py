"""The offline extractive summarizer: TextRank over sentences, English and Chinese, merges."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import replace

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest, SummaryResult
from docsum_llm.extractive import ExtractiveBackend, _is_candidate, non_prose_line, textrank
from docsum_shared.text import cjk_ratio, split_sentences, tokens_for_similarity

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
    assert result.model == "extractive-textrank-v2"
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
    assert cjk_ratio(result.text) > 0.5  # Chinese
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
        "from docsum_llm.extractive import ExtractiveBackend\n"
        "from docsum_llm.base import SummaryKind, SummaryRequest\n"
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
    # short summaries already fit a document's paragraph: each is kept whole, under its name
    assert result.text == f"a.docx\n{chinese_summary}\n\nb.pdf\n{english_summary}"


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


def _task_paragraphs(text: str) -> list[tuple[str, str]]:
    """(name, paragraph) pairs of an organised task summary."""
    blocks = text.split("\n\n")
    out = []
    for block in blocks:
        name, _, paragraph = block.partition("\n")
        out.append((name, paragraph))
    return out


def test_task_summary_has_one_paragraph_per_document_in_submission_order(backend: ExtractiveBackend) -> None:
    docs = [_document_summary(k) for k in range(len(_DOC_TOPICS))]
    # names that do not sort the way the documents were submitted
    names = tuple(f"{'zyxwvutsrqpo'[k]}-report.pdf" for k in range(len(docs)))
    result = run(backend, SummaryKind.TASK, *docs, labels=names)

    paragraphs = _task_paragraphs(result.text)
    assert [name for name, _ in paragraphs] == list(names), "every document, in submission order"
    for k, (_, paragraph) in enumerate(paragraphs):
        sentences = split_sentences(paragraph)
        assert sentences, "at least one sentence each"
        assert is_subsequence(sentences, split_sentences(docs[k])), "its own sentences, in its order"
        assert "\n" not in paragraph
        assert len(paragraph) <= 220  # 1200 / 12 documents, raised to the 220-character floor


def test_task_summary_paragraphs_are_short_summaries_of_their_documents(backend: ExtractiveBackend) -> None:
    kafka = run(
        backend, SummaryKind.DOCUMENT, ENGLISH_CHUNK.split("\n", 1)[1] + " " + _english_sentences(30, seed=3)
    ).text
    chinese = CHINESE_CHUNK.split("\n", 1)[1]
    result = run(backend, SummaryKind.TASK, kafka, chinese, labels=("kafka.pdf", "系统.docx"))
    (name1, para1), (name2, para2) = _task_paragraphs(result.text)
    assert (name1, name2) == ("kafka.pdf", "系统.docx")
    assert 1 <= len(split_sentences(para1)) <= 3 and len(para1) <= 500
    assert is_subsequence(split_sentences(para1), split_sentences(kafka))
    assert cjk_ratio(para2) > 0.5 and " " not in para2  # Chinese, joined without spaces
    assert 1 <= len(split_sentences(para2)) <= 3
    assert is_subsequence(split_sentences(para2), split_sentences(chinese))


def test_task_summary_options_and_names() -> None:
    backend = ExtractiveBackend()
    docs = [" ".join(_document_summary(k) for k in range(j, j + 4)) for j in (0, 4, 8)]
    request = SummaryRequest(SummaryKind.TASK, tuple(docs), labels=("a.pdf", "b.docx", "c.txt"))
    brief = backend.summarize_sync(replace(request, length="brief")).text
    standard = backend.summarize_sync(request).text
    detailed = backend.summarize_sync(replace(request, length="detailed")).text
    assert len(brief) < len(standard) < len(detailed)
    bullets = backend.summarize_sync(replace(request, style="bullets")).text
    for block, name in zip(bullets.split("\n\n"), ("a.pdf", "b.docx", "c.txt"), strict=True):
        first, *items = block.split("\n")
        assert first == name
        assert items and all(item.startswith("- ") and not item.startswith("- - ") for item in items)
    # without (matching) labels the documents are numbered; empty summaries are left out
    unnamed = backend.summarize_sync(SummaryRequest(SummaryKind.TASK, (docs[0], "  ", docs[2]))).text
    assert [name for name, _ in _task_paragraphs(unnamed)] == ["Document 1", "Document 3"]
    skipped = backend.summarize_sync(replace(request, texts=(docs[0], "", docs[2]))).text
    assert [name for name, _ in _task_paragraphs(skipped)] == ["a.pdf", "c.txt"]


def test_task_summary_of_bulleted_document_summaries() -> None:
    backend = ExtractiveBackend()
    docs = [_document_summary(k) for k in range(2)]
    bulleted = [backend.summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (d,), style="bullets")).text for d in docs]
    assert bulleted[0].startswith("- Report 0 studies")
    result = backend.summarize_sync(SummaryRequest(SummaryKind.TASK, tuple(bulleted), labels=("x.pdf", "y.pdf")))
    assert result.text.startswith("x.pdf\nReport 0 studies rivers and barges.")
    assert "- " not in result.text


# ------------------------------------------------------------------------------------- non-prose


@pytest.mark.parametrize(
    "line",
    [
        # box drawing and trees
        "│ ├─► 更新状态 …",
        "┌──────────┐     ┌──────────┐",
        "└── services/summarizer/handlers.py",
        # code, English and Chinese around it
        "def update_status(task_id, status):",
        "    task.status = status    # 更新状态",
        'update_status(task_id, "完成")',
        "    return task",
        "if task.status == FAILED:",
        "for (int i = 0; i < n; i++) {",
        "}",
        ">>> print(sorted(counts.items()))",
        "$ docsum summarize --title demo examples/*",
        "import numpy as np",
        "from docsum_shared.text import sentence_spans",
        '<dependency groupId="org.apache.kafka"/>',
        "const consumer = kafka.consumer({ groupId: 'docsum' });",
        # formula fragments of a LaTeX PDF
        "h t = σ(W h h t−1 + W x x t + b)",
        "s(i, j) = h ⊤ i U h j + u ⊤ h j",
        "L = − ∑ i log p(y i | x i ; θ)",
        # lines of symbols, digits, single letters
        "----------------------------------------",
        "* * *",
        "(3)",
        "12 15 18 21 24 27",
        "Ours 94.1 92.3 88.0",
        "x y z",
        "α β γ δ",
        # a tab-separated table row
        "PENDING\twaiting\t3\t12%",
    ],
)
def test_non_prose_lines(line: str) -> None:
    assert non_prose_line(line) == "block"
    assert not _is_candidate(line + "。", 3)


@pytest.mark.parametrize(
    "line",
    [
        "12",
        "- 12 -",
        "Page 3 of 9",
        "3 / 9",
        "第 3 页",
        "第3页，共10页",
        "arXiv:2101.00001v2 [cs.CL] 5 Jan 2021",
        "© 2020 Association for Computational Linguistics",
        "Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics, pages 12–20",
    ],
)
def test_page_furniture_lines(line: str) -> None:
    assert non_prose_line(line) == "furniture"


@pytest.mark.parametrize(
    "line",
    [
        # prose lines as PDF text wraps them: lower-case starts, words that are also keywords
        "from the log and commit their offsets, so that",
        "return to the previous state when the consumer restarts, and",
        "class of models that predict the next token from the",
        "if the broker fails, the followers elect a new leader and",
        "for every partition, and the producer writes to it.",
        "import statements bind names in the local namespace of the block.",
        'The string argument passed to the built-in functions "eval()" and "exec()" is a code block.',
        "使用 print() 函数输出结果，再用 update_status() 更新任务状态。",
        "In 2023 the cluster served 1,200 requests per second across 3 regions.",
        "The function f(x) = 2x + 1 is linear, and g(x) = x^2 is not.",
        "　　我出生的城市沿着一条河展开。",
        "# 1 Introduction",
    ],
)
def test_prose_lines_are_not_masked(line: str) -> None:
    assert non_prose_line(line) is None


@pytest.mark.parametrize(
    "sentence",
    [
        "Table 1: Results on the test sets.",
        "Figure 3. The architecture of the system.",
        "图 2 系统的整体架构。",
        "This means that the following will fail:",
        "系统的整体架构如下：",
        "define a name or names in the local namespace for the scope where it occurs.",
        "where W h , W x ∈ R d×d and b ∈ R d are learned parameters.",
        "A B C D E F G.",
        "Kafka partitions and replicas",  # a title: no end mark
    ],
)
def test_captions_lead_ins_fragments_and_formulas_are_not_candidates(sentence: str) -> None:
    assert not _is_candidate(sentence, 3)


CHINESE_TECHNICAL = """# 任务调度系统的设计

本文介绍一个基于消息队列的任务调度系统，重点说明任务状态如何在各个服务之间流转。系统由网关、调度器和执行器三部分组成，它们之间只通过消息通信。

整体架构如下：

┌──────────┐     ┌──────────┐     ┌──────────┐
│  网关服务  │ ──► │  调度器   │ ──► │  执行器   │
└──────────┘     └──────────┘     └──────────┘
     │ ├─► 更新状态     │ └─► 写入数据库
     └─────────────────┘
调度器收到任务以后，先把任务写入数据库，再把任务消息发布到执行器订阅的主题。执行器完成任务后发布完成事件，调度器据此更新任务状态。

核心的状态更新代码如下：

def update_status(task_id, status):
    task = db.get(task_id)  # 读取任务
    task.status = status    # 更新状态
    db.save(task)
    return task

if task.status == "失败":
    retry(task)

```python
retry_all(tasks)  # 重试所有任务
```

每一次状态变化都会写入一条审计记录，因此任何时候都可以追溯一个任务的完整历史。当执行器崩溃时，调度器会在超时之后重新分配任务，所以任务不会丢失。

总之，这个系统依靠持久化的消息和幂等的处理逻辑来保证任务最终完成。

第 3 页
"""

LATEX_PDF = """Attention Is Not All You Need for Tiny Parsers
1 Introduction
Neural dependency parsers have become accurate but slow. In this paper, we propose a small parser that
uses a single recurrent layer and a biaffine scorer, and we show that it matches larger models on three
treebanks.
h t = σ(W h h t−1 + W x x t + b)
(1)
where W h , W x ∈ R d×d and b ∈ R d are learned parameters.
s(i, j) = h ⊤ i U h j + u ⊤ h j
(2)
The scorer assigns every pair of words a score, and the parser picks the highest-scoring tree.
Table 1: Results on the test sets.
Model UAS LAS
Ours 94.1 92.3
Base 93.8 91.9
Our parser is three times faster than the baseline while losing less than half a point of accuracy.
Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics, pages 12–20
2
We release the code and the trained models so that others can reproduce the results.
"""


@pytest.mark.parametrize("kind", [SummaryKind.CHUNK, SummaryKind.DOCUMENT])
def test_a_chinese_technical_article_is_summarized_from_its_prose(
    backend: ExtractiveBackend, kind: SummaryKind
) -> None:
    result = run(backend, kind, CHINESE_TECHNICAL, labels=())
    assert result.text
    assert not any("\u2500" <= c <= "\u259f" for c in result.text), "no box drawing"
    assert "►" not in result.text and "def " not in result.text and "task." not in result.text
    assert "(" not in result.text and "=" not in result.text and "```" not in result.text
    assert "如下：" not in result.text and "第 3 页" not in result.text
    assert result.text.startswith("本文介绍一个基于消息队列的任务调度系统")
    # the prose right after the diagram is a sentence of its own, not glued to the diagram
    candidates, _ = backend._candidates([CHINESE_TECHNICAL])
    assert "调度器收到任务以后，先把任务写入数据库，再把任务消息发布到执行器订阅的主题。" in [
        c.text for c in candidates
    ]


def test_a_latex_pdf_is_summarized_without_formula_fragments(backend: ExtractiveBackend) -> None:
    candidates, _ = backend._candidates([LATEX_PDF])
    texts = [c.text for c in candidates]
    assert texts == [
        "Neural dependency parsers have become accurate but slow.",
        "In this paper, we propose a small parser that uses a single recurrent layer and a biaffine scorer, "
        "and we show that it matches larger models on three treebanks.",
        "The scorer assigns every pair of words a score, and the parser picks the highest-scoring tree.",
        "Our parser is three times faster than the baseline while losing less than half a point of accuracy.",
        "We release the code and the trained models so that others can reproduce the results.",
    ]
    result = run(backend, SummaryKind.CHUNK, LATEX_PDF)
    assert "In this paper, we propose a small parser" in result.text
    assert "σ" not in result.text and "Proceedings" not in result.text and "Table 1" not in result.text


def test_a_chinese_clause_ending_in_a_semicolon_keeps_the_rest_of_its_sentence(backend: ExtractiveBackend) -> None:
    text = "有人说，看一座城市，要看它的博物馆和图书馆；我却觉得，看一座城市，更要看它的河。河流是城市的记忆。"
    candidates, _ = backend._candidates([text])
    assert [c.text for c in candidates] == [
        "有人说，看一座城市，要看它的博物馆和图书馆；我却觉得，看一座城市，更要看它的河。",
        "河流是城市的记忆。",
    ]


def test_list_marks_and_footnote_marks_are_dropped(backend: ExtractiveBackend) -> None:
    text = (
        "- Kafka stores records in topics.\n- [2] Consumers read records from topics.\n3. Brokers replicate partitions."
    )
    candidates, _ = backend._candidates([text])
    assert [c.text for c in candidates] == [
        "Kafka stores records in topics.",
        "Consumers read records from topics.",
        "Brokers replicate partitions.",
    ]
    bullets = backend.summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,), style="bullets")).text
    assert bullets.splitlines() == ["- " + c.text for c in candidates]


# ------------------------------------------------------------------------------ selection and order

_PARAPHRASES = [
    "Kafka replicates every partition across three brokers for durability.",
    "Kafka replicates every partition across three brokers, which keeps topics durable when machines fail.",
    "Consumers commit offsets so that a restarted consumer resumes where it stopped.",
    "Every partition has a leader broker that producers write to.",
    "Producers batch records to raise throughput.",
    "Retention settings decide how long brokers keep old records.",
]


def test_mmr_does_not_take_a_sentence_that_says_the_same_again() -> None:
    text = " ".join(_PARAPHRASES)
    # without the diversity term and the redundancy cap, the paraphrase is the second-best sentence ...
    plain = ExtractiveBackend(chunk_max_sentences=2, mmr_lambda=1.0, redundant_cosine=1.1)
    assert split_sentences(run(plain, SummaryKind.CHUNK, text).text) == _PARAPHRASES[:2]
    # ... with them, the summary says something else instead
    result = split_sentences(run(ExtractiveBackend(chunk_max_sentences=2), SummaryKind.CHUNK, text).text)
    assert result[0] == _PARAPHRASES[0] and len(result) == 2
    assert _PARAPHRASES[1] not in result


@pytest.mark.parametrize("seed", range(4))
def test_no_two_sentences_of_a_summary_say_the_same(seed: int) -> None:
    from docsum_llm.extractive import _TfIdf

    backend = ExtractiveBackend()
    # overlapping chunk summaries: every part repeats a sentence of the previous one, reworded
    parts = [_english_sentences(5, seed=seed * 100 + k) for k in range(25)]
    for k in range(1, 25):
        parts[k] = split_sentences(parts[k - 1])[0].replace(".", " again.") + " " + parts[k]
    chosen = split_sentences(run(backend, SummaryKind.DOCUMENT, *parts).text)
    candidates, _ = backend._candidates(parts)
    texts = [c.text for c in candidates]
    tfidf = _TfIdf([c.tokens for c in candidates])
    indexes = [texts.index(s) for s in chosen]
    for a in indexes:
        similarities = tfidf.similarities(a)
        assert all(similarities[b] < backend.redundant_cosine for b in indexes if b != a)


def test_summary_sentences_keep_the_document_order() -> None:
    sentences = [
        "Bicycles need regular chain lubrication.",
        "Copper wires conduct electricity well.",
        "Dolphins communicate with clicks underwater.",
        "Engines convert fuel into motion.",
        "Granite is a common igneous rock.",
        "The hub report links bicycles, copper wires, dolphins, engines and granite together.",
    ]
    text = " ".join(sentences)
    # the best sentence is the last one ...
    assert run(ExtractiveBackend(chunk_max_sentences=1), SummaryKind.CHUNK, text).text == sentences[5]
    # ... and it stays last when the lead joins it
    assert split_sentences(run(ExtractiveBackend(chunk_max_sentences=2), SummaryKind.CHUNK, text).text) == [
        sentences[0],
        sentences[5],
    ]
    merge = run(ExtractiveBackend(merge_max_sentences=2), SummaryKind.DOCUMENT, *sentences)
    assert split_sentences(merge.text) == [sentences[0], sentences[5]]
    long_doc = [_english_sentences(8, seed=k) for k in range(20)]
    chosen = split_sentences(run(ExtractiveBackend(), SummaryKind.DOCUMENT, *long_doc).text)
    everything = [s for p in long_doc for s in split_sentences(p)]
    positions = [everything.index(s) for s in chosen]
    assert positions == sorted(positions) and len(positions) > 1


def test_length_and_style_options(backend: ExtractiveBackend) -> None:
    text = _english_sentences(400, seed=2)
    sizes = [
        len(backend.summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,), length=n)).text)
        for n in ("brief", "", "detailed")
    ]
    assert sizes[0] < sizes[1] < sizes[2] <= 2400
    bullets = backend.summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,), style="bullets")).text
    prose = backend.summarize_sync(SummaryRequest(SummaryKind.DOCUMENT, (text,))).text
    assert bullets.splitlines() == [f"- {s}" for s in split_sentences(prose)]
