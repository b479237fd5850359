"""The stand-in LLM provider, driven over HTTP by the real `openai` client."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.fake_llm import FakeLLM, FakeLLMServer, estimate_tokens

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


def ask(client: openai.OpenAI, user: str, **kwargs: object) -> openai.types.chat.ChatCompletion:
    messages = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": user}]
    return client.chat.completions.create(model=MODEL, messages=messages, **kwargs)  # type: ignore[arg-type]


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
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: ask(client, f"document {i}"), range(4)))
    assert time.monotonic() - started < 0.3 * 2
    assert len(answers) == 4 and llm.max_in_flight == 4 and llm.in_flight == 0
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
