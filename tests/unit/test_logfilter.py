"""Library warnings collapse per document: the first few pass, then one line says how many did not.

What the service's log handlers see is what reaches the root logger's handlers; the tests collect that
with a handler of their own (pytest's caplog also hooks non-propagating loggers such as "pypdf" directly,
so it would see what the filter holds back).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from docsum_parser import logfilter
from docsum_parser.extract import Limits
from docsum_parser.worker import Job, run_job
from tests.hostile import pdf_with_wrong_offsets


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logged() -> Iterator[Collected]:
    logfilter.install()
    root = logging.getLogger()
    handler, level = Collected(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def pypdf_lines(logged: Collected) -> list[str]:
    return [r.getMessage() for r in logged.records if r.name.startswith("pypdf")]


def summaries(logged: Collected) -> list[str]:
    return [r.getMessage() for r in logged.records if "suppressed" in r.getMessage()]


def test_the_first_few_pass_then_one_summary(logged: Collected) -> None:
    with logfilter.one_document("doc-1"):
        for i in range(20_000):
            logging.getLogger("pypdf._reader").warning("Ignoring wrong pointing object %d 0", i)

    assert pypdf_lines(logged) == [f"Ignoring wrong pointing object {i} 0" for i in range(logfilter.KEEP)]
    assert summaries(logged) == ["pypdf: 19,995 more warnings suppressed for document doc-1"]


def test_each_document_counts_afresh_and_few_warnings_need_no_summary(logged: Collected) -> None:
    for document in ("a", "b"):
        with logfilter.one_document(document):
            for _ in range(3):
                logging.getLogger("pypdf.generic._data_structures").warning("odd object")
    assert len(pypdf_lines(logged)) == 6 and summaries(logged) == []


def test_outside_a_document_nothing_is_held_back(logged: Collected) -> None:
    for _ in range(50):
        logging.getLogger("pypdf._page").warning("loose")
    logging.getLogger("docsum_parser").info("ours")
    assert len(pypdf_lines(logged)) == 50 and "ours" in [r.getMessage() for r in logged.records]


def test_documents_parsed_side_by_side_count_apart(logged: Collected) -> None:
    barrier = threading.Barrier(2)

    def parse(document: str, warnings: int) -> None:
        with logfilter.one_document(document):
            barrier.wait()
            for _ in range(warnings):
                logging.getLogger("pypdf._reader").warning("from %s", document)

    threads = [threading.Thread(target=parse, args=args) for args in (("left", 100), ("right", 10))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(summaries(logged)) == [
        "pypdf: 5 more warnings suppressed for document right",
        "pypdf: 95 more warnings suppressed for document left",
    ]


def test_a_malformed_pdf_logs_a_handful_of_lines(logged: Collected) -> None:
    result = run_job(Job(pdf_with_wrong_offsets(200), "repaired.pdf", None, Limits(), "doc-9"))

    assert result.pages == 200
    assert len(pypdf_lines(logged)) == logfilter.KEEP
    [summary] = summaries(logged)
    assert summary.startswith("pypdf: ") and summary.endswith(" more warnings suppressed for document doc-9")
    assert int(summary.split()[1].replace(",", "")) > 300
