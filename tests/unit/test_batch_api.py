"""The Batch API as the driver uses it, against the stand-in over HTTP: an input file uploaded from a file
object, and an output file read line by line as it arrives (a line too long to be an answer skipped unread,
one of another shape or nested too deep skipped, a file the provider does not know read as empty)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest

from docsum_llm import batch_api
from docsum_llm.batch_api import BatchAPI, input_line
from docsum_shared.errors import RequestRefused
from tests.fake_llm import FakeLLM, FakeLLMServer

MODEL = "stand-in-1"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture
async def api(server: FakeLLMServer) -> AsyncIterator[BatchAPI]:
    server.llm.reset(config=True)
    server.llm.configure(batch_time_scale=1 / 36000)
    connected = BatchAPI.connect(server.base_url, "test-key")
    yield connected
    await connected.aclose()


def _body(text: str) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": f"<text>\n{text}\n</text>"}]}


async def _output(api: BatchAPI, server: FakeLLMServer, n: int) -> str:
    """The output file id of a batch of `n` lines, uploaded from a file object, once it completed."""
    with tempfile.TemporaryFile() as spool:
        for i in range(n):
            spool.write(input_line(f"line-{i}", _body(f"Sentence {i} says a thing about line {i}.")))
        spool.seek(0)
        file_id = await api.upload("in.jsonl", spool)
    created = await api.create(file_id, {"docsum_batch": "dsb_1"})
    for _ in range(500):
        done = await api.retrieve(created.id)
        if done is not None and done.ended:
            assert done.status == "completed" and done.output_file_id is not None, done
            return done.output_file_id
    raise AssertionError("the batch did not end")


async def test_an_output_is_read_line_by_line_as_it_arrives(api: BatchAPI, server: FakeLLMServer) -> None:
    output = await _output(api, server, 40)
    read = [line async for line in api.lines(output)]
    assert sorted(line.custom_id for line in read) == sorted(f"line-{i}" for i in range(40))
    assert all(line.answered and line.body is not None for line in read)


async def test_lines_too_long_nested_too_deep_or_of_another_shape_are_skipped_unread(
    api: BatchAPI, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = '{"custom_id": "{custom_id}", "response": {"status_code": 200, "body": ' + "[" * 1000 + "]" * 1000 + "}}"
    long = json.dumps({"custom_id": "{custom_id}", "response": {"status_code": 200, "body": {"x": "y" * 5000}}})
    server.llm.configure(batch_answer_line={"line 1.": deep, "line 2.": long, "line 3.": "[1, 2]"})
    monkeypatch.setattr(batch_api, "MAX_LINE_BYTES", 4096)
    output = await _output(api, server, 5)
    assert sorted(line.custom_id for line in [line async for line in api.lines(output)]) == ["line-0", "line-4"]


async def test_a_file_the_provider_does_not_know_has_no_lines_and_a_refusal_is_raised(
    api: BatchAPI, server: FakeLLMServer
) -> None:
    assert [line async for line in api.lines("file-unknown")] == []
    output = await _output(api, server, 2)
    server.llm.configure(batch_refuse=[{"point": "content", "status": 400, "marker": None}])
    with pytest.raises(RequestRefused, match="400"):
        [line async for line in api.lines(output)]
