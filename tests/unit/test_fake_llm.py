"""The stand-in LLM provider, driven over HTTP by the real `openai` client."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from openai import NOT_GIVEN, NotGiven, Omit, omit
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionStreamOptionsParam,
)

from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.citations import CitationMode
from docsum_llm.openai.prompts import build_messages
from tests.fake_llm import FakeLLM, FakeLLMProcess, FakeLLMServer, estimate_tokens

MODEL = "stand-in-1"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


@pytest.fixture
def llm(server: FakeLLMServer) -> Iterator[FakeLLM]:
    server.llm.reset(config=True)
    yield server.llm
    server.llm.wait_idle()
    server.llm.reset(config=True)


@pytest.fixture(scope="module")
def client(server: FakeLLMServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=5) as client:
        yield client


def summarize(user: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": "Summarize."}, {"role": "user", "content": user}]


def ask(
    client: openai.OpenAI,
    user: str,
    *,
    max_tokens: int | Omit = omit,
    max_completion_tokens: int | Omit = omit,
    timeout: float | NotGiven = NOT_GIVEN,
    extra_body: object | None = None,
) -> ChatCompletion:
    return client.chat.completions.create(
        model=MODEL,
        messages=summarize(user),
        max_tokens=max_tokens,
        max_completion_tokens=max_completion_tokens,
        timeout=timeout,
        extra_body=extra_body,
    )


def test_answer_with_usage(llm: FakeLLM, client: openai.OpenAI) -> None:
    response = ask(client, "Summarize this.\n\n<text>\nThe cat sat on the mat. Then it slept.\n</text>")
    text = response.choices[0].message.content
    assert text is not None and text.endswith("The cat sat on the mat.") and "slept" not in text
    assert response.model == MODEL and response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.prompt_tokens == llm.entries()[0].prompt_tokens > 0
    assert response.usage.completion_tokens == estimate_tokens(text)
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    entry = llm.entries()[0]
    assert (entry.status, entry.model, entry.error, entry.attempt) == (200, MODEL, None, 0)
    assert entry.prompt_sha256 == hashlib.sha256(entry.prompt.encode()).hexdigest()
    assert "The cat sat" in entry.user and entry.finished >= entry.started
    assert llm.count() == 1 and llm.tokens() == (entry.prompt_tokens, entry.completion_tokens)


def test_token_estimate() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("abcdefghi") == 3
    assert estimate_tokens("中文摘要") == 4
    assert estimate_tokens("中文 abcd") == 2 + 2


def test_answers_are_deterministic_and_keep_the_language(llm: FakeLLM, client: openai.OpenAI) -> None:
    prompt = "Summarize.\n\n<text>\nFirst sentence here. Second one.\n</text>"
    first, second = ask(client, prompt), ask(client, prompt)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert ask(client, prompt + " ").choices[0].message.content != first.choices[0].message.content

    chinese = ask(client, "请总结。\n\n<text>\n今天天气很好。我们去公园散步。\n</text>").choices[0].message.content
    assert chinese is not None and chinese.endswith("今天天气很好。") and "公园" not in chinese
    untagged = ask(client, "这是一份关于人工智能的报告。它讨论了很多问题。").choices[0].message.content
    assert untagged is not None and untagged.endswith("这是一份关于人工智能的报告。")


def test_max_tokens_truncates(llm: FakeLLM, client: openai.OpenAI) -> None:
    response = ask(client, "<text>\n" + "word " * 200 + ".\n</text>", max_tokens=5)
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens <= 5


@pytest.mark.parametrize("citations", ["text", "off"])
def test_a_bound_the_prompt_states_is_obeyed_unless_the_model_rambles(
    llm: FakeLLM, client: openai.OpenAI, citations: CitationMode
) -> None:
    parts = tuple(f"Part {i} says something worth keeping about the orchard. More of it." for i in range(60))
    merge = SummaryRequest(SummaryKind.DOCUMENT, parts, title="orchard.txt", max_tokens=200)
    messages = build_messages(merge, citations)
    assert "must fit in 200 tokens" in str(messages)
    obeyed = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=200)
    text = obeyed.choices[0].message.content or ""
    assert obeyed.choices[0].finish_reason == "stop" and obeyed.usage is not None
    assert 100 < obeyed.usage.completion_tokens <= 200  # as much as fits: the first parts' sentences
    assert "Part 0 says" in text and "Part 59 says" not in text
    llm.configure(answer_min_tokens=400)  # a model that rambles whatever it is told
    rambled = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=200)
    assert rambled.choices[0].finish_reason == "length"


def test_fail_next(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.fail_next(2)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            ask(client, "hello")
    assert ask(client, "hello").choices[0].message.content
    assert [e.status for e in llm.entries()] == [500, 500, 200]
    assert [e.attempt for e in llm.entries()] == [0, 1, 2]
    assert llm.count(500) == 2 and llm.count(None) == 3

    llm.fail_next(1, status=503)
    with pytest.raises(openai.InternalServerError) as info:
        ask(client, "hello")
    assert info.value.status_code == 503


def test_rate_limit_next_sends_retry_after(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.rate_limit_next(1, retry_after=7)
    with pytest.raises(openai.RateLimitError) as info:
        ask(client, "hello")
    assert info.value.response.headers["retry-after"] == "7"
    assert llm.entries(429)[0].retry_after == 7
    assert ask(client, "hello").choices[0].message.content


def test_rpm_limit(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(rpm_limit=3, rate_window_s=0.2)
    for i in range(3):
        ask(client, f"request {i}")
    with pytest.raises(openai.RateLimitError) as info:
        ask(client, "one too many")
    assert info.value.response.headers["retry-after"] == "1"  # whole seconds, rounded up from < 0.2 s
    assert llm.count(429) == 1 and llm.count() == 3
    assert llm.entries(429)[0].error == "rate_limited"
    time.sleep(0.25)  # the window has moved on
    assert ask(client, "accepted again").choices[0].message.content

    llm.configure(rpm_limit=1, rate_window_s=60.0)
    llm.reset()
    ask(client, "first")
    with pytest.raises(openai.RateLimitError) as info:
        ask(client, "second")
    assert 59 <= int(info.value.response.headers["retry-after"]) <= 60


def test_fail_rate_is_deterministic(llm: FakeLLM, client: openai.OpenAI) -> None:
    def run() -> list[int]:
        llm.reset()
        for i in range(30):
            try:
                ask(client, f"prompt {i}")
            except openai.InternalServerError:
                pass
        return [e.status for e in llm.entries()]

    llm.configure(fail_rate=0.5, seed=1)
    statuses = run()
    assert set(statuses) == {200, 500} and all(e.error == "fail_rate" for e in llm.entries(500))
    assert run() == statuses
    llm.seed = 2
    assert run() != statuses

    # A retry is a new attempt, with its own draw: retries get through eventually.
    llm.reset()
    llm.fail_rate = 0.9
    for _ in range(200):
        try:
            ask(client, "retried")
            break
        except openai.InternalServerError:
            pass
    assert llm.count() == 1 and llm.entries(200)[0].attempt == llm.count(500)


def test_hang_times_out_the_client(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.hang_next(1)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        ask(client, "hello", timeout=0.2)
    assert time.monotonic() - started < 2
    assert llm.wait_idle(2)
    (entry,) = llm.entries()
    assert (entry.status, entry.error, entry.hung) == (499, "hang", True)
    assert ask(client, "hello").choices[0].message.content


def test_hang_rate(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(hang_rate=1.0, hang_s=0.2)  # a hang shorter than the client's patience is just slow
    started = time.monotonic()
    assert ask(client, "slow").choices[0].message.content
    assert time.monotonic() - started >= 0.2
    assert llm.entries()[0].hung and llm.entries()[0].status == 200


def test_server_stops_while_a_request_hangs() -> None:
    llm = FakeLLM(hang_rate=1.0, hang_s=3600)
    errors: list[Exception] = []
    with FakeLLMServer(llm) as server:

        def call() -> None:
            with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=30) as client:
                try:
                    ask(client, "never answered")
                except openai.APIError as exc:
                    errors.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        deadline = time.monotonic() + 2
        while not llm.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert llm.in_flight == 1
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 3
    thread.join(5)
    assert not thread.is_alive() and isinstance(errors[0], openai.InternalServerError)
    assert [(e.status, e.error) for e in llm.entries()] == [(503, "hang")]


def test_over_budget(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.max_prompt_tokens = 50
    assert ask(client, "short").choices[0].message.content
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, "long " * 100)
    assert "maximum context length" in info.value.message
    assert info.value.code == "context_length_exceeded"
    refused = llm.entries(400)[0]
    assert refused.over_budget and refused.prompt_tokens > 50
    assert [e.over_budget for e in llm.entries()] == [False, True]
    assert all(e.prompt_tokens <= 50 for e in llm.entries(200))


def test_rejected_marker(llm: FakeLLM, client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        ask(client, "a text with FAKE_LLM_REJECT inside")
    llm.reject_marker = "forbidden"
    with pytest.raises(openai.BadRequestError):
        ask(client, "this is forbidden")
    assert ask(client, "FAKE_LLM_REJECT is fine now").choices[0].message.content
    assert [(e.status, e.error) for e in llm.entries()] == [(400, "rejected_prompt")] * 2 + [(200, None)]


def test_max_in_flight(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.latency_s = 0.3
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: ask(client, f"document {i}"), range(4)))
    assert len(answers) == 4 and llm.max_in_flight == 4 and llm.in_flight == 0
    entries = llm.entries()
    assert max(e.started for e in entries) < min(e.finished for e in entries)  # all four at once
    assert all(e.duration_s >= 0.3 for e in llm.entries())


def test_jitter_is_deterministic(llm: FakeLLM) -> None:
    llm.configure(latency_s=0.1, jitter_s=0.5)
    delays = [llm.delay_s(hashlib.sha256(str(i).encode()).hexdigest()) for i in range(20)]
    assert all(0.1 <= d < 0.6 for d in delays) and len(set(delays)) == 20
    assert delays == [llm.delay_s(hashlib.sha256(str(i).encode()).hexdigest()) for i in range(20)]


def test_repeats(llm: FakeLLM, client: openai.OpenAI) -> None:
    ask(client, "once")
    ask(client, "twice")
    ask(client, "twice")
    llm.fail_next(1)
    with pytest.raises(openai.InternalServerError):
        ask(client, "failed then answered")
    ask(client, "failed then answered")  # the failure was not paid for: not a repeat
    assert llm.repeats() == 1
    ask(client, "once")
    assert llm.repeats() == 2 and llm.count() == 5


def test_models(server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    llm.models = ["a", "b"]
    assert [m.id for m in client.models.list()] == ["a", "b"]
    assert client.models.retrieve("b").id == "b"


def test_http_controls(server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        ask(client, "hello")
        config = http.post("/_config", json={"fail_rate": 1.0, "max_prompt_tokens": 1000, "latency_s": 0.01})
        assert config.status_code == 200 and config.json()["fail_rate"] == 1.0
        assert llm.max_prompt_tokens == 1000
        with pytest.raises(openai.InternalServerError):
            ask(client, "hello")
        assert http.post("/_config", json={"fail_rate": 0, "fail_next": {"n": 1, "status": 429}}).status_code == 200
        with pytest.raises(openai.RateLimitError):
            ask(client, "hello")
        assert http.post("/_config", json={"no_such_field": 1}).status_code == 400
        assert http.post("/_config", json={"fail_rate": 2}).status_code == 400

        summary = http.get("/_ledger").json()
        assert summary["count"] == 3 and summary["by_status"] == {"200": 1, "429": 1, "500": 1}
        assert summary["repeats"] == 0 and summary["max_in_flight"] == 1 and summary["in_flight"] == 0
        assert summary["tokens"] == {"prompt": llm.tokens()[0], "completion": llm.tokens()[1]}
        assert [e["status"] for e in summary["entries"]] == [200, 500, 429]
        assert summary["entries"][0]["user"] == "hello" and summary["config"]["max_prompt_tokens"] == 1000
        assert "prompt" not in http.get("/_ledger", params={"text": 0, "since": 2}).json()["entries"][0]
        assert "entries" not in http.get("/_ledger", params={"entries": 0}).json()

        assert http.post("/_reset").status_code == 200
        assert llm.count(None) == 0 and llm.max_prompt_tokens == 1000
        assert http.post("/_reset", json={"config": True}).json()["config"]["max_prompt_tokens"] is None


# --- Streaming ------------------------------------------------------------------------------------

DOCUMENT = (
    "Summarize this.\n\n<text>\nThe committee met on Tuesday to review the budget for the coming year. "
    "Several members raised concerns.\n</text>\n\n<text>\nThe river flooded the lower town twice this spring, "
    "and the council promised new levees. Work starts soon.\n</text>"
)


def stream(
    client: openai.OpenAI,
    user: str,
    *,
    stream_options: ChatCompletionStreamOptionsParam | Omit = omit,
    max_tokens: int | Omit = omit,
    max_completion_tokens: int | Omit = omit,
    timeout: float | NotGiven = NOT_GIVEN,
) -> list[ChatCompletionChunk]:
    with client.chat.completions.create(
        model=MODEL,
        messages=summarize(user),
        stream=True,
        stream_options=stream_options,
        max_tokens=max_tokens,
        max_completion_tokens=max_completion_tokens,
        timeout=timeout,
    ) as chunks:
        return list(chunks)


def streamed_text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def finish_reasons(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def recorded(llm: FakeLLM, n: int) -> list:
    """The ledger once it holds `n` entries: a stream's entry is recorded just after its last byte is sent,
    so the client can have read the whole answer a moment before."""
    for _ in range(200):
        if len(entries := llm.entries()) >= n:
            return entries
        time.sleep(0.01)
    return llm.entries()


def test_streamed_text_is_the_plain_answer(llm: FakeLLM, client: openai.OpenAI) -> None:
    plain = ask(client, DOCUMENT).choices[0].message.content
    chunks = stream(client, DOCUMENT)
    assert plain and streamed_text(chunks) == plain
    first, last = chunks[0], chunks[-1]
    assert first.object == "chat.completion.chunk" and first.model == MODEL
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    content = [c for c in chunks[1:-1] if c.choices[0].delta.content]
    assert len(content) == len(chunks) - 2 > 2  # the text in pieces of a few words
    assert all(len(c.choices[0].delta.content.split()) <= 3 for c in content)  # type: ignore[union-attr]
    assert last.choices[0].delta.content is None and last.choices[0].finish_reason == "stop"
    assert finish_reasons(chunks) == ["stop"] and all(c.usage is None for c in chunks)
    assert len({c.id for c in chunks}) == 1

    chinese = "请总结。\n\n<text>\n今天天气很好，我们一起去公园散步，看到了很多花。明天下雨。\n</text>"
    assert streamed_text(stream(client, chinese)) == ask(client, chinese).choices[0].message.content
    assert streamed_text(stream(client, DOCUMENT)) == plain  # deterministic

    entries = recorded(llm, 5)
    assert [e.stream for e in entries] == [False, True, True, False, True]
    assert all((e.status, e.finish_reason) == (200, "stop") for e in entries)
    assert entries[1].completion_tokens == entries[0].completion_tokens == estimate_tokens(plain)
    assert llm.repeats() == 3 and llm.max_in_flight == 1 and llm.in_flight == 0


def test_stream_usage_only_when_asked(llm: FakeLLM, client: openai.OpenAI) -> None:
    plain = ask(client, DOCUMENT)
    assert all(c.usage is None for c in stream(client, DOCUMENT))
    assert all(c.usage is None for c in stream(client, DOCUMENT, stream_options={"include_usage": False}))
    chunks = stream(client, DOCUMENT, stream_options={"include_usage": True})
    *answer, usage = chunks
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.model_dump(exclude_none=True) == plain.usage.model_dump(exclude_none=True)  # type: ignore[union-attr]
    assert all(c.usage is None for c in answer) and finish_reasons(answer) == ["stop"]
    assert streamed_text(answer) == plain.choices[0].message.content


def test_a_rambling_model_is_cut_by_max_tokens(llm: FakeLLM, client: openai.OpenAI) -> None:
    short = ask(client, DOCUMENT).choices[0].message.content
    llm.configure(answer_min_tokens=120)
    long = ask(client, DOCUMENT)
    text = long.choices[0].message.content
    assert text is not None and text.startswith(short or "-") and estimate_tokens(text) >= 120
    assert text.count("The committee met") >= 3 and text.count("The river flooded") >= 3
    assert long.choices[0].finish_reason == "stop" and long.usage.completion_tokens == estimate_tokens(text)  # type: ignore[union-attr]
    assert streamed_text(stream(client, DOCUMENT)) == text

    for limit in ({"max_tokens": 30}, {"max_completion_tokens": 30}):
        cut = ask(client, DOCUMENT, **limit)
        assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens <= 30  # type: ignore[union-attr]
        assert text.startswith(cut.choices[0].message.content or "-")
        chunks = stream(client, DOCUMENT, stream_options={"include_usage": True}, **limit)
        assert streamed_text(chunks) == cut.choices[0].message.content and finish_reasons(chunks) == ["length"]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == cut.usage.completion_tokens  # type: ignore[union-attr]
    assert llm.wait_idle(2)  # a stream's entry is recorded just after its last byte
    entries = llm.entries()[-4:]
    assert [(e.stream, e.max_tokens, e.finish_reason) for e in entries] == [
        (False, 30, "length"),
        (True, 30, "length"),
    ] * 2
    assert ask(client, DOCUMENT, max_tokens=1000).choices[0].finish_reason == "stop"


def test_a_server_without_streaming(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(streaming=False)
    with pytest.raises(openai.BadRequestError) as info:
        stream(client, DOCUMENT)
    assert "does not stream" in info.value.message
    assert ask(client, DOCUMENT).choices[0].message.content
    refused = llm.entries()[0]
    assert (refused.status, refused.error, refused.stream, refused.finish_reason) == (
        400,
        "invalid_request",
        True,
        None,
    )


def test_a_server_that_ignores_stream_answers_with_one_json_body(
    server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI
) -> None:
    plain = ask(client, DOCUMENT)
    llm.configure(ignores_stream=True, streaming=False)  # it never looks at stream, so never refuses one
    body = {"model": MODEL, "messages": summarize(DOCUMENT), "stream": True}
    with httpx.Client(timeout=5) as http:
        answer = http.post(f"{server.base_url}/chat/completions", json=body)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    completion = ChatCompletion.model_validate(answer.json())
    assert completion.object == "chat.completion" and completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content == plain.choices[0].message.content
    assert completion.usage == plain.usage  # the usage of a plain answer, though include_usage was not asked
    llm.configure(ignores_stream=False, streaming=True)
    assert streamed_text(stream(client, DOCUMENT)) == plain.choices[0].message.content
    assert llm.wait_idle(2)  # a stream's entry is recorded just after its last byte
    assert [(e.status, e.stream, e.finish_reason) for e in llm.entries()] == [
        (200, False, "stop"),
        (200, True, "stop"),  # what the request asked, though it was answered plain
        (200, True, "stop"),
    ]


def test_errors_come_before_the_stream(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.fail_next(1)
    with pytest.raises(openai.InternalServerError):
        stream(client, DOCUMENT)
    llm.rate_limit_next(1, retry_after=3)
    with pytest.raises(openai.RateLimitError) as limited:
        stream(client, DOCUMENT)
    assert limited.value.response.headers["retry-after"] == "3"
    assert limited.value.response.headers["content-type"] == "application/json"
    llm.max_prompt_tokens = 20
    with pytest.raises(openai.BadRequestError) as refused:
        stream(client, "long " * 100)
    assert refused.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        stream(client, "FAKE_LLM_REJECT")
    llm.hang_next(1)
    with pytest.raises(openai.APITimeoutError):
        stream(client, DOCUMENT, timeout=0.2)
    assert llm.wait_idle(2)
    llm.max_prompt_tokens = None
    assert streamed_text(stream(client, DOCUMENT))
    assert llm.wait_idle(2)  # a stream's entry is recorded just after its last byte
    assert [(e.status, e.stream) for e in llm.entries()] == [
        (500, True),
        (429, True),
        (400, True),
        (400, True),
        (499, True),
        (200, True),
    ]
    assert llm.entries()[2].over_budget and llm.entries()[4].hung


def test_token_latency_makes_a_slow_model(server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(latency_s=0.05, token_latency_s=0.05)
    chunks = stream(client, DOCUMENT)
    n = sum(bool(c.choices and c.choices[0].delta.content) for c in chunks)
    assert n > 2
    body = {"model": MODEL, "messages": [{"role": "user", "content": DOCUMENT}], "stream": True}
    with httpx.Client(timeout=5) as http, http.stream("POST", f"{server.base_url}/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        reads = [raw for raw in r.iter_raw() if raw]
    assert len(reads) > 1 and b"".join(reads).endswith(b"data: [DONE]\n\n")
    plain = ask(client, DOCUMENT)  # not streamed: as slow, all at once
    assert plain.choices[0].message.content
    assert llm.wait_idle(2)  # a stream's entry is recorded just after its last byte
    assert all(e.status == 200 and e.duration_s >= 0.05 + 0.05 * n for e in llm.entries())
    assert [e.stream for e in llm.entries()] == [True, True, False]


def test_a_client_leaving_mid_stream_is_recorded(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(token_latency_s=0.1, answer_min_tokens=200)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": DOCUMENT}]
    chunks = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    pieces = iter(chunks)
    received = [next(pieces), next(pieces)]
    chunks.close()
    assert received[0].choices[0].delta.role == "assistant" and received[1].choices[0].delta.content
    assert llm.wait_idle(3)
    (entry,) = llm.entries()
    assert (entry.status, entry.error, entry.stream, entry.completion_tokens) == (499, "client_closed", True, 0)
    assert entry.finish_reason is None and llm.count() == 0


def test_server_stops_mid_stream() -> None:
    llm = FakeLLM(token_latency_s=0.2, answer_min_tokens=500)
    received: list[str] = []
    with FakeLLMServer(llm) as server:

        def call() -> None:
            with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=30) as client:
                with contextlib.suppress(openai.APIError, httpx.HTTPError):
                    received.extend(c.choices[0].delta.content or "" for c in stream(client, DOCUMENT) if c.choices)

        thread = threading.Thread(target=call)
        thread.start()
        deadline = time.monotonic() + 2
        while not llm.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 3
    thread.join(5)
    assert not thread.is_alive() and llm.in_flight == 0
    assert [(e.status, e.error, e.stream) for e in llm.entries()] == [(503, "shutdown", True)]
    assert estimate_tokens("".join(received)) < 500  # cut short


# --- Dialects -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["openai", "llamacpp", "ollama"])
def test_every_dialect_streams_the_plain_answer(llm: FakeLLM, client: openai.OpenAI, dialect: str) -> None:
    llm.configure(dialect=dialect, num_ctx=40, answer_min_tokens=60)
    for limit in ({}, {"max_tokens": 25}):
        plain = ask(client, DOCUMENT, **limit)
        chunks = stream(client, DOCUMENT, stream_options={"include_usage": True}, **limit)
        assert streamed_text(chunks) == plain.choices[0].message.content
        assert finish_reasons(chunks) == [plain.choices[0].finish_reason]
        assert chunks[-1].usage is not None and plain.usage is not None
        assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    assert [m.id for m in client.models.list()] == [MODEL]


def test_llamacpp_refuses_a_prompt_over_its_context(server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(dialect="llamacpp", max_prompt_tokens=50)
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, "long " * 100)
    refused = llm.entries(400)[0]
    n = refused.prompt_tokens
    assert info.value.body == {
        "code": 400,
        "message": f"request ({n} tokens) exceeds the available context size (50 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": n,
        "n_ctx": 50,
    }
    assert refused.over_budget and refused.error == "context_length_exceeded" and refused.num_ctx == 50
    with pytest.raises(openai.BadRequestError):  # llama-server also refuses a prompt that fills n_ctx exactly
        ask(client, "x" * (4 * 50 - len("Summarize.\n\n")))
    assert llm.entries(400)[1].prompt_tokens == 50
    fits = "x" * (4 * 49 - len("Summarize.\n\n"))
    with pytest.raises(openai.BadRequestError):  # ... and streams: the refusal comes before any stream
        stream(client, "long " * 100)

    with httpx.Client(base_url=server.url, timeout=5) as http:
        messages = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": fits}]
        answer = http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
        assert answer.status_code == 200
        usage, timings = answer.json()["usage"], answer.json()["timings"]
        assert timings["prompt_n"] == usage["prompt_tokens"] == 49
        assert timings["predicted_n"] == usage["completion_tokens"] and timings["predicted_ms"] > 0
        chunks = stream(client, fits)
        assert (chunks[-1].model_extra or {})["timings"]["prompt_n"] == 49

        props = http.get("/props").json()
        assert props["default_generation_settings"]["n_ctx"] == 50 and props["total_slots"] == 1
        assert props["model_path"].endswith(".gguf") and props["build_info"]
        assert http.get("/health").json() == {"status": "ok"}
        llm.configure(max_prompt_tokens=None)
        assert http.get("/props").json()["default_generation_settings"]["n_ctx"] == 4096
        assert ask(client, "long " * 100).choices[0].message.content  # 4096 tokens are enough

        llm.configure(dialect="openai")
        assert http.get("/props").status_code == 404 and http.get("/health").status_code == 404
        assert "timings" not in http.post("/v1/chat/completions", json={"model": MODEL, "messages": []}).json()


def test_ollama_cuts_a_long_prompt_silently(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(dialect="ollama", num_ctx=100)
    document = (
        "Summarize this.\n\n<text>\nAlpha opens the report. "
        + "The middle goes on and on. " * 40
        + "Omega closes the report.\n</text>"
    )
    response = ask(client, document)
    text = response.choices[0].message.content
    entry = llm.entries()[0]
    assert response.usage is not None and entry.status == 200 and not entry.over_budget
    assert entry.prompt_tokens > 100 and entry.num_ctx == 100
    assert response.usage.prompt_tokens == entry.truncated_to == entry.usage_prompt_tokens
    assert 90 <= entry.truncated_to <= 100  # type: ignore[operator]
    assert text is not None and "Alpha" not in text and "Summarize this" not in text  # the start is gone
    whole = FakeLLM().answer([{"role": "user", "content": document}])
    assert whole.endswith("Alpha opens the report.") and text != whole
    assert llm.tokens()[0] == entry.truncated_to and llm.summary()["truncated"] == 1

    short = ask(client, "Summarize this.\n\n<text>\nA short one. Really.\n</text>")
    assert short.choices[0].message.content and short.choices[0].message.content.endswith("A short one.")
    assert llm.entries()[1].truncated_to is None and short.usage.prompt_tokens == llm.entries()[1].prompt_tokens  # type: ignore[union-attr]

    llm.configure(max_prompt_tokens=10)  # Ollama never refuses a long prompt
    assert ask(client, document).choices[0].message.content == text
    llm.reset(config=True)
    llm.configure(dialect="ollama")
    ask(client, document)
    assert llm.entries()[0].num_ctx == 2048 and llm.entries()[0].truncated_to is None


def test_ollama_ignores_options_on_its_openai_endpoint(llm: FakeLLM, client: openai.OpenAI) -> None:
    """Ollama's OpenAI-compatible endpoint has no ``options`` (nor ``max_completion_tokens``): the
    context stays the model's num_ctx whatever options.num_ctx says."""
    llm.configure(dialect="ollama", num_ctx=60, answer_min_tokens=80)
    document = "Summarize.\n\n<text>\n" + "Words and more words. " * 40 + "\n</text>"
    cut = ask(client, document)
    asked = ask(client, document, extra_body={"options": {"num_ctx": 8192}})
    assert asked.choices[0].message.content == cut.choices[0].message.content
    assert [(e.num_ctx, e.truncated_to) for e in llm.entries()] == [(60, cut.usage.prompt_tokens)] * 2  # type: ignore[union-attr]
    assert ask(client, document, max_completion_tokens=10).choices[0].finish_reason == "stop"
    assert ask(client, document, max_tokens=10).choices[0].finish_reason == "length"
    assert [e.max_tokens for e in llm.entries()[2:]] == [10, 10]


def test_ollama_tells_about_its_models(server: FakeLLMServer, llm: FakeLLM) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        assert http.post("/api/show", json={"model": MODEL}).status_code == 404  # not an Ollama
        llm.configure(dialect="ollama", num_ctx=8192, model_context_length=131072)
        for body in ({"model": MODEL}, {"name": MODEL}, {"model": f"{MODEL}:latest"}):
            show = http.post("/api/show", json=body)
            assert show.status_code == 200
            info = show.json()
            assert info["model_info"]["general.architecture"] == "llama"
            assert info["model_info"]["llama.context_length"] == 131072
            parameters = dict(line.split(None, 1) for line in info["parameters"].splitlines())
            assert parameters["num_ctx"] == "8192" and "stop" in parameters
            assert info["details"]["format"] == "gguf"
        missing = http.post("/api/show", json={"model": "llama3"})
        assert missing.status_code == 404 and missing.json() == {"error": "model 'llama3' not found"}
        assert http.post("/api/show", json={}).status_code == 400
        assert [m["name"] for m in http.get("/api/tags").json()["models"]] == [f"{MODEL}:latest"]
        assert http.get("/api/version").json()["version"].startswith("0.")
        assert http.get("/").text == "Ollama is running"
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == [MODEL]


def test_new_config_fields_are_validated(server: FakeLLMServer, llm: FakeLLM) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as http:
        changes = {
            "streaming": False,
            "ignores_stream": True,
            "token_latency_s": 0.01,
            "answer_min_tokens": 50,
            "dialect": "llamacpp",
            "num_ctx": 1024,
            "model_context_length": 8192,
        }
        assert http.post("/_config", json=changes).json() == {**llm.config(), **changes}
        for bad in (
            {"streaming": "no"},
            {"ignores_stream": 1},
            {"token_latency_s": -1},
            {"answer_min_tokens": 0},
            {"answer_min_tokens": 10**7},
            {"dialect": "vllm"},
            {"num_ctx": 0},
            {"model_context_length": True},
        ):
            assert http.post("/_config", json=bad).status_code == 400, bad
        assert http.get("/_ledger").json()["config"]["dialect"] == "llamacpp"
        defaults = http.post("/_reset", json={"config": True}).json()["config"]
    assert {k: defaults[k] for k in changes} == {
        "streaming": True,
        "ignores_stream": False,
        "token_latency_s": 0.0,
        "answer_min_tokens": None,
        "dialect": "openai",
        "num_ctx": 2048,
        "model_context_length": 32768,
    }
    with pytest.raises(ValueError):
        FakeLLM(dialect="vllm")
    with pytest.raises(ValueError):
        llm.configure(num_ctx=-1)


def test_cli_flags() -> None:
    args = ["--no-streaming", "--ignores-stream", "--token-latency", "0.01", "--answer-min-tokens", "40"]
    args += ["--dialect", "ollama", "--num-ctx", "512", "--model-context-length", "4096"]
    with FakeLLMProcess(*args) as process:
        config = process.llm.config()
    assert {k: config[k] for k in ("streaming", "ignores_stream", "token_latency_s", "answer_min_tokens")} == {
        "streaming": False,
        "ignores_stream": True,
        "token_latency_s": 0.01,
        "answer_min_tokens": 40,
    }
    assert (config["dialect"], config["num_ctx"], config["model_context_length"]) == ("ollama", 512, 4096)
    assert process.returncode == 0


def test_a_stand_in_in_its_own_process_is_read_and_set_as_one_in_this_process() -> None:
    with FakeLLMProcess() as process:
        remote = process.llm
        assert remote.configure(latency_s=0.01)["latency_s"] == 0.01
        with pytest.raises(ValueError, match="fail_rate"):
            remote.configure(fail_rate=2)
        client = openai.OpenAI(base_url=process.base_url, api_key="k", max_retries=0)
        for text in ("Kafka stores events.", "Brokers replicate them."):
            client.chat.completions.create(model="stand-in-1", messages=[{"role": "user", "content": text}])
        first = remote.entries()
        remote.configure(fail_next=1)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="stand-in-1", messages=[{"role": "user", "content": "Again."}])
        assert remote.wait_idle()
        entries = remote.entries()  # read on from where the first read ended
        assert [e.user for e in entries] == ["Kafka stores events.", "Brokers replicate them.", "Again."]
        assert entries[:2] == first and [e.status for e in remote.entries(200)] == [200, 200]
        assert entries[0].started < entries[0].finished and entries[0].completion_tokens > 0
        assert remote.batch_times() == []


# --- citations ---------------------------------------------------------------------------------------------

NUMBERED = "<text>\n[S1] Kafka stores events in topics.\n[S2] Brokers replicate them.\n</text>\n\nCite the ids."
CITING_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "cited_summary",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "sentences": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string"},
                            "sources": {"type": "array", "items": {"type": "string", "enum": ["S1", "S2"]}},
                        },
                        "required": ["text", "sources"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["sentences"],
            "additionalProperties": False,
        },
    },
}


def cited(client: openai.OpenAI, schema: bool) -> str:
    answer = ask(client, NUMBERED, extra_body={"response_format": CITING_SCHEMA} if schema else None)
    return answer.choices[0].message.content or ""


def test_a_numbered_prompt_gets_an_answer_that_cites_it(llm: FakeLLM, client: openai.OpenAI) -> None:
    assert json.loads(cited(client, schema=True)) == {
        "sentences": [{"text": "In all, Kafka stores events in topics.", "sources": ["S1"]}]
    }
    assert cited(client, schema=False) == "In all, Kafka stores events in topics. [S1]"
    assert ask(client, "Kafka stores events. Brokers copy.").choices[0].message.content == (
        f"[{hashlib.sha256(b'Kafka stores events. Brokers copy.').hexdigest()[:8]}] Kafka stores events."
    )  # a prompt without numbered sentences is answered as before


def test_a_rambling_model_cites_at_length_too(llm: FakeLLM, client: openai.OpenAI) -> None:
    llm.configure(answer_min_tokens=60)
    sentences = json.loads(cited(client, schema=True))["sentences"]
    assert len(sentences) > 1 and all(
        s == {"text": "In all, Kafka stores events in topics.", "sources": ["S1"]} for s in sentences
    )
    text = cited(client, schema=False)
    assert estimate_tokens(text) >= 60 and set(text.splitlines()) == {"In all, Kafka stores events in topics. [S1]"}


@pytest.mark.parametrize(
    ("fault", "enforced", "plain"),
    [
        ("omit", [], "In all, Kafka stores events in topics."),
        ("invent", ["S1"], "In all, Kafka stores events in topics. [S1001]"),  # a schema forbids inventing
        ("free", [], "In all, Kafka stores events in topics."),
    ],
)
def test_a_weak_model_cites_badly_where_nothing_holds_it(
    llm: FakeLLM, client: openai.OpenAI, fault: str, enforced: list[str], plain: str
) -> None:
    llm.configure(citation_fault=fault)
    assert json.loads(cited(client, schema=True))["sentences"][0]["sources"] == enforced
    assert cited(client, schema=False) == plain
    llm.configure(structured_output="ignore")  # the schema is sent, and ignored
    assert cited(client, schema=True) == plain


def test_a_server_that_refuses_response_format_says_so(
    server: FakeLLMServer, llm: FakeLLM, client: openai.OpenAI
) -> None:
    with httpx.Client(base_url=server.url) as http:
        assert http.post("/_config", json={"structured_output": "refuse"}).json()["structured_output"] == "refuse"
        assert http.post("/_config", json={"citation_fault": "sometimes"}).status_code == 400
        assert http.post("/_config", json={"structured_output": "maybe"}).status_code == 400
    with pytest.raises(openai.BadRequestError) as refused:
        cited(client, schema=True)
    assert "response_format" in refused.value.message and refused.value.param == "response_format"
    assert cited(client, schema=False) == "In all, Kafka stores events in topics. [S1]"
    assert [(e.status, e.error) for e in llm.entries()] == [(400, "response_format"), (200, None)]
