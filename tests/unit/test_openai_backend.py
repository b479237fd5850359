"""The OpenAI-compatible backend against the stand-in provider (a real HTTP server), through the openai
package: bounded answers, streaming, a stall timeout, what it asks the endpoint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from docsum_shared.errors import ContextLimitExceeded, ProviderUnavailable
from docsum_shared.settings import Settings
from docsum_shared.summarizers.base import SummaryKind, SummaryRequest
from docsum_shared.summarizers.openai_backend import OpenAIBackend, Timeouts, _repeats_the_input, _server_root
from tests.documents import english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


def _backend(server: FakeLLMServer, **timeouts: float) -> OpenAIBackend:
    return OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", timeouts=Timeouts(**timeouts))


def _chunk(chars: int = 1_500, max_tokens: int = 300) -> SummaryRequest:
    return SummaryRequest(SummaryKind.CHUNK, (english_prose(chars, seed=9),), max_tokens=max_tokens)


def test_answer_bounds_follow_kind_and_length() -> None:
    settings = Settings(_env_file=None)
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


def test_slow_prompts_and_long_answers_get_more_time() -> None:
    timeouts = Timeouts(stall_s=60, min_prompt_tps=10, min_output_tps=2)
    assert timeouts.first_token_s(2_900) == 60 + 290
    assert timeouts.ceiling_s(2_900, 300) == 60 + 290 + 150


async def test_a_plain_answer_is_bounded_and_its_usage_is_the_providers(server: FakeLLMServer) -> None:
    backend = _backend(server)
    result = await backend.summarize(_chunk())
    (entry,) = server.llm.entries()
    assert result.text and not result.truncated
    assert (result.prompt_tokens, result.completion_tokens) == (entry.prompt_tokens, entry.completion_tokens)


async def test_a_context_refusal_is_recognised(server: FakeLLMServer) -> None:
    server.llm.configure(max_prompt_tokens=100)
    with pytest.raises(ContextLimitExceeded) as refused:
        await _backend(server).summarize(_chunk())
    assert refused.value.limit == 100


async def test_a_hung_call_fails_within_its_ceiling(server: FakeLLMServer) -> None:
    server.llm.hang_next(1)
    with pytest.raises(ProviderUnavailable):
        await _backend(server, stall_s=0.5, min_prompt_tps=1e6, min_output_tps=1e6).summarize(_chunk(max_tokens=16))
