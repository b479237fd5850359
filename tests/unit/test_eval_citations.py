"""The citation evaluation's figures (eval/citation_metrics.py) and the real PDFs' checks (eval/real_pdfs.py),
on sentences made up here; tests/integration/test_eval_pipeline.py runs them on the pipeline's."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

from pypdf import PdfReader

from docsum_llm.citations import supports
from docsum_shared.cited import CitedSentence, Source, Support
from docsum_shared.positions import Positions, position_of
from tests.documents import make_pdf
from tests.generators import ROOT


def _eval_module(name: str) -> ModuleType:
    """eval/<name>.py, imported once (its dataclasses need a module of their own in sys.modules); eval/ on
    the path, for the eval modules import each other by name, as when run as scripts."""
    key = f"docsum_eval_{name}"
    if str(ROOT / "eval") not in sys.path:
        sys.path.append(str(ROOT / "eval"))
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "eval" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


m = _eval_module("citation_metrics")

TEXT = "Kafka keeps a log. Consumers read it in order.\n\nA crash repeats work, never loses it."
TEXTS = {"doc": TEXT}


def _words(text: str) -> list[str]:
    return [w.strip(".,").lower() for w in text.split() if w.strip(".,")]


def word_precision(sentence: str, quoted: str) -> float:
    """A stand-in for ROUGE-1 precision: the share of the sentence's words found in the quoted text."""
    words, pool = _words(sentence), set(_words(quoted))
    return sum(w in pool for w in words) / len(words) if words else 0.0


def at(text: str, document: str = "doc", page: int | None = 1) -> Source:
    start = TEXT.index(text)
    return Source(document, page, start, start + len(text))


def sentence(text: str, *sources: Source, support: Support = "cited") -> CitedSentence:
    return CitedSentence(text, sources, support, (0, len(text)))


def test_a_quoted_source_is_valid_and_a_source_out_of_the_text_or_saying_else_is_not() -> None:
    summary = m.Mapped(
        "…",
        (
            sentence("Kafka keeps a log.", at("Kafka keeps a log.")),
            sentence("Consumers read it in order.", Source("doc", 1, 80, 200)),  # past the text's end
            sentence("Consumers read it in order.", at("A crash repeats work, never loses it.")),
            sentence("A crash repeats work.", Source("other", None, 0, 5)),  # no such document
        ),
    )
    assert m.validity(summary, TEXTS, supports) == m.Share(1, 4)
    assert m.validity(summary, TEXTS, lambda quoted, said: True) == m.Share(2, 4)  # the ranges alone


def test_validity_by_the_lexical_check_takes_a_paraphrase_and_refuses_another_sentence() -> None:
    match = m.lexical_match(word_precision, 0.7)
    paraphrase = sentence("Consumers read it all in order.", at("Consumers read it in order."), support="aligned")
    other = sentence("Brokers replicate partitions.", at("Kafka keeps a log."), support="aligned")
    # the sentence's words in the source, not the source's in the sentence
    part = sentence("Kafka keeps a log.", at("Kafka keeps a log. Consumers read it in order."), support="aligned")
    assert m.validity(m.Mapped("…", (paraphrase, other, part)), TEXTS, match) == m.Share(2, 3)
    assert not supports(TEXT[paraphrase.sources[0].start : paraphrase.sources[0].end], paraphrase.text)


def test_coverage_counts_each_label_over_all_sentences() -> None:
    summary = m.Mapped(
        "…",
        (
            sentence("Kafka keeps a log.", at("Kafka keeps a log.")),
            sentence("Consumers read it.", at("Consumers read it in order."), support="aligned"),
            sentence("Both.", at("Kafka keeps a log."), at("Consumers read it in order."), support="synthesis"),
            sentence("Nothing.", support="synthesis"),
        ),
    )
    shares = m.coverage(summary)
    assert shares == {
        "cited": m.Share(1, 4),
        "aligned": m.Share(1, 4),
        "synthesis": m.Share(2, 4),
        "unsupported": m.Share(0, 4),
    }
    assert m.with_sources(summary) == m.Share(3, 4)


def test_the_supported_share_counts_every_label_but_unsupported_over_the_labelled_sentences() -> None:
    summary = m.Mapped(
        "…",
        (
            sentence("Kafka keeps a log.", at("Kafka keeps a log.")),
            sentence("Both.", at("Kafka keeps a log."), support="synthesis"),
            sentence("Penguins juggle.", support="unsupported"),
        ),
    )
    assert m.coverage(summary)["unsupported"] == m.Share(1, 3)
    assert m.labelled_supported(summary) == m.Share(2, 3)
    assert m.labelled_supported(m.Mapped("Kafka keeps a log.", None)) == m.Share(0, 0)  # nothing labelled


def test_a_summary_whose_backend_did_not_say_has_its_sentences_unlabelled() -> None:
    summary = m.Mapped("Kafka keeps a log. Consumers read it. Work is repeated.", None)
    assert m.coverage(summary)["cited"] == m.Share(0, 3)
    assert m.with_sources(summary) == m.Share(0, 3)
    assert m.lexical_support(summary, TEXTS, word_precision, 0.7) == m.Share(0, 3)
    assert m.validity(summary, TEXTS, supports) == m.Share(0, 0)
    assert m.Share(0, 0).value is None


def test_lexical_support_reads_a_sentence_against_all_its_sources_together() -> None:
    both = sentence(
        "Kafka keeps a log consumers read in order.",
        at("Kafka keeps a log."),
        at("Consumers read it in order."),
        support="synthesis",
    )
    one = sentence("Kafka keeps a log consumers read in order.", at("Kafka keeps a log."), support="aligned")
    unsupported = sentence("Brokers replicate partitions.", at("Kafka keeps a log."), support="aligned")
    summary = m.Mapped("…", (both, one, unsupported))
    assert m.lexical_support(summary, TEXTS, word_precision, 0.7) == m.Share(1, 3)
    assert m.lexical_support(summary, TEXTS, word_precision, 0.5) == m.Share(2, 3)


def test_gold_sentences_are_found_whitespace_aside_and_a_missing_one_is_none() -> None:
    found = m.find_gold(["Consumers read it in order .", "A crash repeats work , never loses it .", "Absent ."], TEXT)
    assert found[0] == (TEXT.index("Consumers"), TEXT.index("order.") + len("order."))
    assert found[1] is not None and TEXT[found[1][0] : found[1][1]] == "A crash repeats work, never loses it."
    assert found[2] is None


def test_gold_recall_counts_the_gold_spans_a_source_overlaps_in_the_same_document() -> None:
    first, second = (0, 18), (19, 46)
    summary = m.Mapped("…", (sentence("read", Source("doc", 1, 30, 35)), sentence("x", Source("other", 1, 0, 18))))
    assert m.gold_recall([summary], {"doc": [first, second]}) == m.Share(1, 2)
    touching = m.Mapped("…", (sentence("x", Source("doc", 1, 18, 19)),))  # between the two: overlaps neither
    assert m.gold_recall([touching], {"doc": [first, second]}) == m.Share(0, 2)
    assert m.gold_recall([summary, touching], {}) == m.Share(0, 0)


def test_shares_add_up() -> None:
    assert m.total([m.Share(1, 2), m.Share(3, 4)]) == m.Share(4, 6)
    assert m.Share(1, 4).value == 0.25


# --- real PDFs (eval/real_pdfs.py): the checks and the report; the download is not exercised here ---

PAGED = "Kafka keeps a log.\nConsumers read it in order.\nA crash repeats work, never loses it."
PAGE_STARTS = Positions("page", (0, PAGED.index("Consumers"), PAGED.index("A crash")))


def on_page(text: str, page: int | None) -> Source:
    start = PAGED.index(text)
    return Source("manual.pdf", page, start, start + len(text))


def test_a_quoted_sentence_on_its_page_passes_and_each_fault_is_a_miss_saying_why() -> None:
    r = _eval_module("real_pdfs")
    texts = {"manual.pdf": PAGED}
    positions = {("manual.pdf", i): position_of(PAGE_STARTS, i) for i in range(len(PAGED))}  # the text route's
    good = sentence("Consumers read it in order.", on_page("Consumers read it in order.", 2))
    wrong_page = sentence("Consumers read it in order.", on_page("Consumers read it in order.", 1))
    elsewhere = sentence("Consumers read it in order.", on_page("Kafka keeps a log.", 1))
    past_end = sentence("A crash repeats work.", Source("manual.pdf", 3, 60, 500))
    unknown = sentence("A crash repeats work.", Source("other.pdf", 1, 0, 5))
    bare = sentence("A crash repeats work.")
    assert r.miss_of(good, texts, positions) is None
    found = r.misses([good, wrong_page, elsewhere, past_end, unknown, bare], texts, positions)
    assert [(m.sentence, m.why) for m in found] == [
        (wrong_page, "page 1, but its start is on page 2"),
        (elsewhere, "its sources' text does not hold the sentence"),
        (past_end, f"range outside the text ({len(PAGED)} characters)"),
        (unknown, "no such document"),
        (bare, "no source"),
    ]
    assert [m.source for m in found] == [*(s.sources[0] for s in (wrong_page, elsewhere, past_end, unknown)), None]
    assert [m.quoted for m in found[:2]] == ["Consumers read it in order.", "Kafka keeps a log."]


def test_a_summary_without_mapped_sentences_is_a_miss() -> None:
    r = _eval_module("real_pdfs")
    assert [m.why for m in r.misses(None, {}, {})] == ["no sentences mapped"]


def test_the_candidate_is_read_from_apt_cache_policy_and_none_when_not_offered() -> None:
    r = _eval_module("real_pdfs")
    offered = "flex-doc:\n  Installed: (none)\n  Candidate: 2.6.4-8.2\n  Version table:\n     2.6.4-8.2 500\n"
    assert r.candidate_of(offered) == "2.6.4-8.2"
    assert r.candidate_of("flex-doc:\n  Installed: (none)\n  Candidate: (none)\n") is None
    assert r.candidate_of("") is None  # a name apt knows nothing of


def test_an_excerpt_is_the_middle_pages_of_a_pdf_as_a_pdf_of_their_own(tmp_path: Path) -> None:
    r = _eval_module("real_pdfs")
    pdf = tmp_path / "manual.pdf"
    pdf.write_bytes(make_pdf([f"Page {n} of the manual says thing number {n}." for n in range(1, 11)]))
    name, data = r.excerpt(pdf, 3)
    assert name == "manual-pages-5-7.pdf"
    pages = [page.extract_text() for page in PdfReader(io.BytesIO(data)).pages]
    assert [p.split(" of the manual")[0].strip() for p in pages] == ["Page 5", "Page 6", "Page 7"]
    assert r.excerpt(pdf, 20)[0] == "manual-pages-1-10.pdf"  # more pages than it has: all of them
