"""What an operator sees of a running stack: every process's health, readiness and Prometheus metrics."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.documents import english_prose
from tests.integration.conftest import SERVICES, Stack
from tests.integration.helpers import eventually, submit, txt, wait_for_task

pytestmark = pytest.mark.integration


def _samples(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


async def test_every_service_is_live_ready_and_counts_a_task_in_its_metrics(stack: Stack) -> None:
    ports = {name: stack.health_ports[name] for name in SERVICES}

    async def all_ready() -> bool:
        async with httpx.AsyncClient(timeout=5) as client:
            try:
                codes = [(await client.get(f"http://127.0.0.1:{p}/readyz")).status_code for p in ports.values()]
            except httpx.TransportError:  # a process not listening yet
                return False
        return codes == [200] * len(ports)

    await eventually(all_ready, timeout=60, message="every service ready", stack=stack)
    for port in ports.values():
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/nothing", timeout=5).status_code == 404
    before = {name: _samples(port) for name, port in ports.items()}

    async with stack.client() as client:
        task_id = await submit(client, [txt("metrics.txt", english_prose(12_000, seed=61))])
        task = await wait_for_task(client, task_id, stack)
    assert task["status"] == "COMPLETED"
    chunks = task["documents"][0]["chunks"]["total"]
    assert chunks > 1

    prefix = stack.env["DOCSUM_TOPIC_PREFIX"]
    finished = ("docsum_messages_produced_total", {"topic": prefix + "task-finished"})

    async def counted_the_end() -> dict[str, dict]:
        now = {name: _samples(port) for name, port in ports.items()}
        ended = _total(now["merger"], finished[0], **finished[1]) > _total(before["merger"], finished[0], **finished[1])
        return now if ended else {}

    after = await eventually(counted_the_end, timeout=30, message="the merger to publish the task's end", stack=stack)

    def grew(service: str, name: str, **labels: str) -> float:
        return _total(after[service], name, **labels) - _total(before[service], name, **labels)

    # Each worker counted what it consumed and produced, message by message.
    assert grew("parser", "docsum_messages_consumed_total", topic=prefix + "document-submitted") >= 1
    # The chunker stores the chunks; the summarizer's admission announces them, in the fair order.
    assert grew("summarizer", "docsum_messages_produced_total", topic=prefix + "chunk-created") >= chunks
    assert grew("summarizer", "docsum_messages_consumed_total", topic=prefix + "chunk-created") >= chunks
    assert grew("summarizer", "docsum_handler_seconds_count", topic=prefix + "chunk-created") >= chunks
    assert grew("merger", "docsum_messages_produced_total", topic=prefix + "task-finished") >= 1
    # The LLM calls, their tokens and their cost as the provider reported them.
    answered = grew("summarizer", "docsum_llm_calls_total", kind="chunk", outcome="answered")
    cached = grew("summarizer", "docsum_llm_calls_total", kind="chunk", outcome="cached")
    assert answered + cached >= chunks
    assert grew("summarizer", "docsum_llm_tokens_total", direction="prompt") > 0
    assert (
        grew("merger", "docsum_llm_calls_total", kind="document", outcome="answered")
        + grew("merger", "docsum_llm_calls_total", kind="document", outcome="cached")
        >= 1
    )
    # The gateway's HTTP metrics, by route template (never a task id in a label).
    requests = [ls for (n, ls) in after["gateway"] if n == "http_requests_total"]
    assert any(("handler", "/v1/tasks/{task_id}") in ls for ls in requests), requests
    assert not any(task_id in value for ls in requests for _, value in ls)
