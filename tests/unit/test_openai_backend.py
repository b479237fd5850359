"""The OpenAI-compatible backend against the stand-in provider (a real HTTP server), through the openai
package: bounded answers, streaming where it is needed, a stall timeout, what it asks the endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from docsum_llm.base import SummaryKind, SummaryRequest, SummaryResult, SummarySentence
from docsum_llm.cache import cache_key
from docsum_llm.openai.citations import CitationMode, numbered
from docsum_llm.openai.client import (
    EndpointFeatures,
    OpenAIBackend,
    StreamMode,
    Timeouts,
    _read_completion,
    _repeats_the_input,
    _server_root,
)
from docsum_shared.errors import AnsweredWithInput, ContextLimitExceeded, ProviderUnavailable
from docsum_shared.settings import LLMSettings
from tests.documents import english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer, LedgerEntry, free_port
from tests.integration.helpers import eventually


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


def _backend(server: FakeLLMServer, stream: StreamMode = "auto", **timeouts: float) -> OpenAIBackend:
    return OpenAIBackend(
        "stand-in-1", base_url=server.base_url, api_key="k", timeouts=Timeouts(**timeouts), stream=stream
    )


async def _recorded(server: FakeLLMServer, n: int = 1) -> list[LedgerEntry]:
    """The stand-in's ledger once it holds `n` entries: it records a call (in its own thread) just after
    answering it."""

    def at_least_n() -> list[LedgerEntry] | None:
        entries = server.llm.entries()
        return entries if len(entries) >= n else None

    recorded: list[LedgerEntry] = await eventually(
        at_least_n, timeout=5, interval=0.01, message=lambda: f"{n} ledger entries, not {len(server.llm.entries())}"
    )
    return recorded


def _chunk(chars: int = 1_500, max_tokens: int = 300) -> SummaryRequest:
    return SummaryRequest(SummaryKind.CHUNK, (english_prose(chars, seed=9),), max_tokens=max_tokens)


def test_answer_bounds_follow_kind_and_length() -> None:
    settings = LLMSettings(_env_file=None)
    assert settings.max_answer_tokens("chunk", "") == 300
    assert settings.max_answer_tokens("chunk", "brief") == 150
    assert settings.max_answer_tokens("document", "detailed") == 1_200
    assert settings.max_answer_tokens("task", "") == 800


def test_the_server_root_is_the_base_url_without_v1() -> None:
    assert _server_root("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert _server_root("http://host:11434/v1/") == "http://host:11434"
    assert _server_root("https://example.org/proxy/v1") == "https://example.org/proxy"


def test_an_answer_that_only_repeats_its_input_is_no_summary() -> None:
    text = english_prose(600, seed=3)
    request = SummaryRequest(SummaryKind.CHUNK, (text,))
    assert _repeats_the_input(text.upper(), request)
    assert not _repeats_the_input(text[:150], request)  # short answers are never judged so
    assert not _repeats_the_input("A different summary of the text. " * 10, request)


@pytest.mark.parametrize("citations", ["json_schema", "text", "off"])
async def test_a_merge_answered_with_its_first_text_copied_is_told_apart_from_a_failure(
    citations: CitationMode, server: FakeLLMServer
) -> None:
    server.llm.configure(copies_merges=True)
    backend = OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", citations=citations)
    texts = tuple(english_prose(700, seed=20 + i).replace("\n\n", " ") for i in range(3))
    with pytest.raises(AnsweredWithInput, match="answered with the input itself"):
        await backend.summarize(SummaryRequest(SummaryKind.DOCUMENT, texts, max_tokens=600))
    assert (await backend.summarize(_chunk())).text  # a chunk (one text) is summarized as ever


def test_a_completion_is_read_from_its_json_leniently_and_json_that_is_none_fails_the_call() -> None:
    whole = {
        "model": "m-1",
        "service_tier": "flex",
        "choices": [{"message": {"role": "assistant", "content": "A summary."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }
    assert _read_completion(json.dumps(whole).encode(), "a request") == ("A summary.", "stop", (12, 3), "m-1", "flex")
    sparse = {"choices": [{"message": {"content": None}}], "usage": {"prompt_tokens": 12}}
    assert _read_completion(json.dumps(sparse).encode(), "a request") == ("", None, None, None, None)
    with pytest.raises(ProviderUnavailable, match="answered a request with unreadable JSON"):
        _read_completion(b"<html>Bad gateway</html>", "a request")
    with pytest.raises(ProviderUnavailable, match="JSON that is no chat completion"):
        _read_completion(b'["a", "list"]', "a request")


def test_slow_prompts_and_long_answers_get_more_time() -> None:
    timeouts = Timeouts(stall_s=60, min_prompt_tps=10, min_output_tps=2)
    assert timeouts.first_token_s(2_900) == 60 + 290
    assert timeouts.ceiling_s(2_900, 300) == 60 + 290 + 150


async def test_a_plain_answer_is_bounded_and_its_usage_is_the_providers(server: FakeLLMServer) -> None:
    backend = _backend(server)
    result = await backend.summarize(_chunk())
    (entry,) = await _recorded(server)
    assert result.text and not result.truncated
    assert (result.prompt_tokens, result.completion_tokens) == (entry.prompt_tokens, entry.completion_tokens)


async def test_a_frequency_penalty_is_sent_only_when_set(server: FakeLLMServer) -> None:
    await _backend(server).summarize(_chunk())
    penalised = OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", frequency_penalty=0.5)
    await penalised.summarize(_chunk(1_200))
    assert [e.frequency_penalty for e in await _recorded(server, 2)] == [None, 0.5]


def test_what_the_backend_sends_besides_the_request_is_part_of_the_cache_key() -> None:
    # A changed penalty changes the answers: the stored ones of another penalty are not reused.
    plain = OpenAIBackend("stand-in-1", base_url="http://127.0.0.1:9/v1", api_key="k")
    keys = {
        cache_key(b.model, _chunk(), "alice", b.sampling)
        for b in (
            plain,
            OpenAIBackend("stand-in-1", base_url="http://127.0.0.1:9/v1", api_key="k", frequency_penalty=0.5),
            OpenAIBackend("stand-in-1", base_url="http://127.0.0.1:9/v1", api_key="k", frequency_penalty=0.8),
        )
    }
    assert len(keys) == 3
    # Without one, the key is what it always was: answers stored before stay found.
    assert cache_key(plain.model, _chunk(), "alice", plain.sampling) == cache_key(plain.model, _chunk(), "alice")


async def test_a_context_refusal_is_recognised(server: FakeLLMServer) -> None:
    server.llm.configure(max_prompt_tokens=100)
    with pytest.raises(ContextLimitExceeded) as refused:
        await _backend(server).summarize(_chunk())
    assert refused.value.limit == 100


async def test_a_hung_call_fails_within_its_ceiling(server: FakeLLMServer) -> None:
    server.llm.hang_next(1)
    with pytest.raises(ProviderUnavailable):
        await _backend(server, stall_s=0.5, min_prompt_tps=1e6, min_output_tps=1e6).summarize(_chunk(max_tokens=16))


async def test_a_streamed_calls_usage_is_still_the_providers(server: FakeLLMServer) -> None:
    result = await _backend(server, stream="always").summarize(_chunk())
    (entry,) = await _recorded(server)
    assert entry.stream and entry.max_tokens == 300 and entry.status == 200
    assert (result.prompt_tokens, result.completion_tokens) == (entry.prompt_tokens, entry.completion_tokens)


@pytest.mark.parametrize("stream", ["always", "never"])
async def test_an_answer_cut_at_its_bound_is_asked_again_shorter_then_kept_marked(
    server: FakeLLMServer, stream: StreamMode
) -> None:
    server.llm.configure(answer_min_tokens=500)  # a model that rambles whatever it is asked
    result = await _backend(server, stream).summarize(_chunk(max_tokens=40))
    first, second = await _recorded(server, 2)
    assert first.stream is second.stream is (stream == "always")
    assert first.finish_reason == second.finish_reason == "length"
    assert "cut off" not in first.prompt and "cut off" in second.prompt  # asked again, shorter
    assert result.truncated and result.text
    assert result.completion_tokens == first.completion_tokens + second.completion_tokens  # both paid
    assert result.requests == 2  # and both counted


async def test_an_answer_cut_once_then_short_enough_is_not_marked(server: FakeLLMServer) -> None:
    result = await _backend(server).summarize(_chunk(max_tokens=1))  # the stand-in's answers are longer
    assert len(await _recorded(server, 2)) == 2 and result.truncated  # still too long for one token
    server.llm.reset()
    result = await _backend(server).summarize(_chunk(max_tokens=300))
    assert len(await _recorded(server)) == 1 and not result.truncated


async def test_a_slow_model_still_producing_tokens_is_waited_for(server: FakeLLMServer) -> None:
    server.llm.configure(dialect="llamacpp", token_latency_s=0.1, answer_min_tokens=60)
    backend = _backend(server, stall_s=0.5, min_prompt_tps=1e6, min_output_tps=1.0)
    await backend.probe()  # llama.cpp's server: its calls stream
    result = await backend.summarize(_chunk(max_tokens=300))
    (entry,) = await _recorded(server)
    assert result.text and entry.status == 200 and entry.stream
    assert entry.duration_s > 0.5  # longer than the stall timeout


async def test_a_model_that_stops_producing_tokens_fails_the_call(server: FakeLLMServer) -> None:
    server.llm.configure(token_latency_s=2.0, answer_min_tokens=60)
    backend = _backend(server, "always", stall_s=0.3, min_prompt_tps=1e6, min_output_tps=1e-3)
    with pytest.raises(ProviderUnavailable, match="stalled"):
        await backend.summarize(_chunk(max_tokens=300))


async def test_a_server_that_cannot_stream_gets_plain_calls(server: FakeLLMServer) -> None:
    server.llm.configure(streaming=False)
    backend = _backend(server, "always")
    assert (await backend.summarize(_chunk())).text and not backend.streaming
    assert [e.status for e in server.llm.entries()] == [400, 200]
    await backend.summarize(_chunk(chars=1_600))
    assert [e.status for e in server.llm.entries()] == [400, 200, 200]  # asked once, remembered


async def test_a_server_that_ignores_stream_is_read_whole_then_gets_plain_calls(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    streamed = await _backend(server, "always").summarize(_chunk())  # what the same endpoint streams
    server.llm.reset()
    server.llm.configure(ignores_stream=True)
    backend = _backend(server, "always")
    requests = (_chunk(), _chunk(chars=1_600))
    results = [await backend.summarize(request) for request in requests]
    entries = await _recorded(server, 2)
    assert [(e.status, e.stream) for e in entries] == [(200, True), (200, False)]  # plain from the second call
    assert not backend.streaming and results[0] == streamed
    for request, result, entry in zip(requests, results, entries, strict=True):
        assert (result.prompt_tokens, result.completion_tokens) == (entry.prompt_tokens, entry.completion_tokens)
        assert result.sentences and all(s.support == "cited" for s in result.sentences), result.sentences
        assert _inside(result, request)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{server.base_url} answers a stream request with one JSON chat completion; plain calls from now on"
    ]


@pytest.mark.parametrize(
    ("dialect", "config", "server_name", "window"),
    [
        ("llamacpp", {"max_prompt_tokens": 4_096}, "llama.cpp", 4_096),
        ("ollama", {"num_ctx": 2_048, "model_context_length": 32_768}, "Ollama", 2_048),
        ("openai", {}, "OpenAI-compatible", None),
    ],
)
async def test_the_endpoint_is_asked_what_it_can(
    server: FakeLLMServer, dialect: str, config: dict, server_name: str | None, window: int | None
) -> None:
    server.llm.configure(dialect=dialect, **config)
    facts = await _backend(server).probe()
    # OpenAI answers with no window (learned from refusals then), and is not asked again.
    assert facts is not None and (facts.server, facts.context_tokens) == (server_name, window)


async def test_an_endpoint_that_answers_nothing_is_asked_again_later() -> None:
    """Nothing listening: no facts, so the next probe (a minute later) asks again."""
    backend = OpenAIBackend("stand-in-1", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k")
    try:
        assert await backend.probe() is None
    finally:
        await backend.aclose()


@pytest.mark.parametrize(("dialect", "streams"), [("openai", False), ("llamacpp", True), ("ollama", True)])
async def test_calls_stream_by_default_only_to_the_servers_that_may_stall(
    server: FakeLLMServer, dialect: str, streams: bool
) -> None:
    server.llm.configure(dialect=dialect)
    backend = _backend(server)
    await backend.probe()
    result = await backend.summarize(_chunk())
    (entry,) = await _recorded(server)
    assert entry.status == 200 and entry.stream is streams and result.text
    assert (result.prompt_tokens, result.completion_tokens) == (entry.prompt_tokens, entry.completion_tokens)


async def test_never_streams_not_even_to_llama_cpp(server: FakeLLMServer) -> None:
    server.llm.configure(dialect="llamacpp")
    backend = _backend(server, "never")
    await backend.probe()
    assert backend.server == "llama.cpp"
    await backend.summarize(_chunk())
    await backend.summarize(_chunk(chars=1_600))
    assert [(e.status, e.stream) for e in await _recorded(server, 2)] == [(200, False), (200, False)]


async def test_a_prompt_ollama_read_only_in_part_is_refused_as_too_long(server: FakeLLMServer) -> None:
    server.llm.configure(dialect="ollama", num_ctx=256)
    backend = _backend(server)
    await backend.probe()
    with pytest.raises(ContextLimitExceeded) as refused:
        await backend.summarize(_chunk(chars=4_000))
    (entry,) = await _recorded(server)
    assert entry.truncated_to is not None and refused.value.limit is not None and refused.value.limit <= 256


# --- citations ---------------------------------------------------------------------------------------------


def _citing(server: FakeLLMServer, citations: CitationMode) -> OpenAIBackend:
    return OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", citations=citations)


def _inside(result: SummaryResult, request: SummaryRequest) -> bool:
    """Every sentence is in the summary's text, and every range it rests on is in the request's texts."""
    return all(
        s.text in result.text
        and 0 <= x.source < len(request.texts)
        and 0 <= x.start < x.end <= len(request.texts[x.source])
        for s in result.sentences
        for x in s.spans
    )


def _merge() -> SummaryRequest:
    parts = (english_prose(400, seed=1), english_prose(400, seed=2), english_prose(400, seed=3))
    return SummaryRequest(SummaryKind.DOCUMENT, parts, style="bullets", max_tokens=300)


@pytest.mark.parametrize("citations", ["json_schema", "text"])
async def test_the_model_cites_the_requests_sentences(server: FakeLLMServer, citations: CitationMode) -> None:
    for request in (_chunk(), _merge()):
        result = await _citing(server, citations).summarize(request)
        assert result.sentences and all(s.support == "cited" for s in result.sentences), result.sentences
        assert _inside(result, request)
        first = numbered(request).spans["S1"]
        assert result.sentences[0].spans == (first,)
    assert result.text.startswith("- ")  # the merge asked for bullets
    asked = [e.user for e in await _recorded(server, 2)]
    assert all(("Answer in JSON" in u) is (citations == "json_schema") and "[S1] " in u for u in asked)


async def test_citations_off_asks_for_none_and_aligns_the_answer(server: FakeLLMServer) -> None:
    backend = _citing(server, "off")
    result = await backend.summarize(_chunk())
    (entry,) = await _recorded(server)
    assert "[S1]" not in entry.user and backend.sampling == {"citations": "off"}
    # The stand-in's answer without ids: a digest, then the chunk's first sentence, matched to it.
    assert [s.support for s in result.sentences][-1] == "aligned" and _inside(result, _chunk())


async def test_an_endpoint_that_refuses_response_format_is_asked_in_text_from_then_on(server: FakeLLMServer) -> None:
    server.llm.configure(structured_output="refuse")
    backend = _citing(server, "json_schema")
    first = await backend.summarize(_chunk())
    second = await backend.summarize(_chunk(1_200))
    assert [(e.status, e.error) for e in await _recorded(server, 3)] == [
        (400, "response_format"),
        (200, None),
        (200, None),
    ]
    assert not backend.structured
    assert all(s.support == "cited" for s in (*first.sentences, *second.sentences))
    assert "response_format" not in backend.chat_body(_chunk())


async def test_a_refusal_replaces_what_the_endpoint_takes_whole(server: FakeLLMServer) -> None:
    """What the endpoint takes is one state: a refusal replaces it, and the state read before is unchanged."""
    server.llm.configure(structured_output="refuse")
    backend = _citing(server, "json_schema")
    before = backend.features
    await backend.summarize(_chunk())
    assert before == EndpointFeatures() and backend.features == EndpointFeatures(structured=False)


@pytest.mark.parametrize("fault", ["omit", "invent", "free"])
@pytest.mark.parametrize(("citations", "structured_output"), [("json_schema", "ignore"), ("text", "enforce")])
async def test_a_weak_model_still_gets_every_sentence_labelled_and_nothing_invented(
    server: FakeLLMServer, fault: str, citations: CitationMode, structured_output: str
) -> None:
    server.llm.configure(citation_fault=fault, structured_output=structured_output)
    for request in (_chunk(), _merge()):
        result = await _citing(server, citations).summarize(request)
        assert result.sentences and _inside(result, request)
        # It named no id of the request: each sentence was matched to the request's words instead.
        assert all(s.support == "aligned" for s in result.sentences), result.sentences


def test_a_batch_line_is_held_to_the_schema_and_its_answer_read_the_same_way() -> None:
    backend = OpenAIBackend("stand-in-1", base_url="http://127.0.0.1:9/v1", api_key="k")
    request = _chunk()
    ids = numbered(request).ids
    body = backend.chat_body(request)
    assert (
        body["response_format"]["json_schema"]["schema"]["properties"]["sentences"]["items"]["properties"]["sources"][
            "items"
        ]["enum"]
        == ids
    )
    quoted = numbered(request).texts["S2"]
    answer = {
        "sentences": [{"text": quoted, "sources": ["S2", "S99"]}, {"text": "Unrelated words entirely.", "sources": []}]
    }
    line = {"choices": [{"message": {"content": json.dumps(answer)}, "finish_reason": "stop"}], "usage": {}}
    result = backend.read_answer(line, request)
    assert result.tier == "batch" and result.text == f"{quoted} Unrelated words entirely."
    assert result.sentences == (
        SummarySentence(quoted, (numbered(request).spans["S2"],), "cited"),
        SummarySentence("Unrelated words entirely.", (), "unsupported"),
    )
