"""A task's mode: realtime (the provider's default tier) or flex, how it is asked for and defaulted, what
the backend sends for it, how it falls back to the default tier, and what its calls cost."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from docsum_cli import commands
from docsum_cli import main as cli
from docsum_gateway.routers.tasks import _form
from docsum_llm.base import SummaryKind, SummaryRequest
from docsum_llm.openai.client import OpenAIBackend
from docsum_shared.errors import RateLimited
from docsum_shared.events import DocumentSubmitted, Topic, decode
from docsum_shared.options import MODES, TaskOptions
from docsum_shared.readmodel import views
from docsum_shared.retry import Backoff
from docsum_shared.settings import LLMSettings
from tests.cli_doubles import recording_gateway
from tests.documents import english_prose
from tests.fake_llm import FakeLLM, FakeLLMServer, LedgerEntry
from tests.integration.helpers import eventually

NO_WAIT = Backoff(base_s=0.0, cap_s=0.0)  # a flex refusal sent again at once

# --- the option ---------------------------------------------------------------------------------------


def test_the_modes_are_realtime_flex_and_batch() -> None:
    assert MODES == ("realtime", "flex", "batch")
    assert TaskOptions(mode="flex").mode == "flex" and TaskOptions(mode="batch").mode == "batch"
    for bad in ("batches", "FLEX", ""):
        with pytest.raises(ValidationError):
            TaskOptions.model_validate({"mode": bad})


def test_a_task_that_does_not_say_gets_the_deployments_default(monkeypatch: pytest.MonkeyPatch) -> None:
    stored_before = TaskOptions.from_stored('{"strict": true, "length": "brief"}')  # a task stored without one
    assert stored_before.mode is None
    assert LLMSettings(_env_file=None).mode(stored_before) == "realtime"  # type: ignore[call-arg]
    monkeypatch.setenv("DOCSUM_LLM_MODE", "flex")
    flex = LLMSettings(_env_file=None)  # type: ignore[call-arg]
    assert flex.mode(stored_before) == "flex"
    assert flex.mode(TaskOptions(mode="realtime")) == "realtime"  # what the task asked for wins
    monkeypatch.setenv("DOCSUM_LLM_MODE", "batch")
    assert LLMSettings(_env_file=None).mode(stored_before) == "batch"  # type: ignore[call-arg]
    monkeypatch.setenv("DOCSUM_LLM_MODE", "bulk")  # not a mode
    with pytest.raises(ValidationError):
        LLMSettings(_env_file=None)  # type: ignore[call-arg]


def test_a_kafka_submission_carries_its_mode() -> None:
    message = {"task_id": "crm:1", "document_id": "crm:1:1", "owner": "crm", "filename": "a.txt", "task_documents": 1}
    flex = decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"mode": "flex"}}).encode())
    assert isinstance(flex, DocumentSubmitted) and flex.options is not None and flex.options.mode == "flex"
    with pytest.raises(ValidationError):  # not a mode: the parser dead-letters it, like any bad option
        decode(Topic.DOCUMENT_SUBMITTED, json.dumps({**message, "options": {"mode": "bulk"}}).encode())


def test_the_form_field_mode() -> None:
    assert _form({"mode": ["flex"]}).mode == "flex"
    assert _form({}).mode is None  # the deployment's default, when the task runs


def test_the_cli_sends_the_mode_and_names_it_when_not_realtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent = recording_gateway(monkeypatch)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert cli.main(["summarize", "--no-wait", "--mode", "flex", str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", str(doc)]) == 0
    assert cli.main(["summarize", "--no-wait", "--mode", "batch", str(doc)]) == 0
    assert sent[0]["mode"] == "flex" and "mode" not in sent[1] and sent[2]["mode"] == "batch"
    assert commands.mode_note({"options": {"mode": "flex"}}) == " (flex)"
    assert commands.mode_note({"options": {"mode": "realtime"}}) == commands.mode_note({}) == ""
    with pytest.raises(SystemExit):
        cli.main(["summarize", "--mode", "bulk", str(doc)])


# --- cost -----------------------------------------------------------------------------------------------


def test_a_call_answered_at_flex_costs_the_flex_factor() -> None:
    settings = LLMSettings(llm_prices={"m": (1.0, 4.0)}, _env_file=None)  # type: ignore[call-arg]
    assert settings.cost_usd("m", 1_000_000, 0) == 1.0
    assert settings.cost_usd("m", 1_000_000, 1_000_000, "flex") == pytest.approx(2.5)
    cheaper = LLMSettings(llm_prices={"m": (1.0, 4.0)}, llm_flex_price_factor=0.25, _env_file=None)  # type: ignore[call-arg]
    assert cheaper.cost_usd("m", 1_000_000, 0, "flex") == pytest.approx(0.25)


def test_a_tasks_usage_prices_each_call_at_its_tier() -> None:
    settings = LLMSettings(llm_prices={"m": (1.0, 2.0)}, _env_file=None)  # type: ignore[call-arg]

    def row(tier: str | None, prompt: int) -> dict[str, Any]:
        fields = {"document_id": "d1", "model": "m", "prompt_tokens": prompt, "completion_tokens": 0}
        return {**fields, "llm_calls": 1, "cached_calls": 0, **({"tier": tier} if tier else {})}

    total, _ = views.usage_by_document(settings, [row("flex", 1_000_000), row("realtime", 1_000_000)])
    assert total.cost_usd == pytest.approx(1.5)
    total, _ = views.usage_by_document(settings, [row(None, 1_000_000)])  # a row of before tiers
    assert total.cost_usd == pytest.approx(1.0)


def test_the_view_shows_the_mode_the_task_runs_in() -> None:
    flex = LLMSettings(llm_mode="flex", _env_file=None)  # type: ignore[call-arg]
    assert views.resolved(flex, TaskOptions()).mode == "flex"
    assert views.resolved(flex, TaskOptions(mode="realtime")).mode == "realtime"


# --- the backend, against the stand-in ----------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        yield server


def _backend(server: FakeLLMServer, **options: Any) -> OpenAIBackend:
    return OpenAIBackend("stand-in-1", base_url=server.base_url, api_key="k", flex_backoff=NO_WAIT, **options)


def _chunk(seed: int = 9) -> SummaryRequest:
    return SummaryRequest(SummaryKind.CHUNK, (english_prose(1_500, seed=seed),), max_tokens=300)


async def _recorded(server: FakeLLMServer, n: int) -> list[LedgerEntry]:
    """The ledger once it holds `n` entries (the stand-in records a call just after answering it)."""

    def at_least_n() -> list[LedgerEntry] | None:
        entries = server.llm.entries()
        return entries if len(entries) >= n else None

    recorded: list[LedgerEntry] = await eventually(at_least_n, timeout=5, interval=0.01, message=f"{n} entries")
    return recorded


@pytest.mark.parametrize("stream", ["always", "never"])
async def test_flex_calls_are_sent_at_the_flex_tier(server: FakeLLMServer, stream: str) -> None:
    backend = _backend(server, stream=stream)
    realtime = await backend.summarize(_chunk(1))
    flex = await backend.summarize(_chunk(2), "flex")
    entries = await _recorded(server, 2)
    assert [(e.tier, e.status, e.stream) for e in entries] == [
        ("realtime", 200, stream == "always"),
        ("flex", 200, stream == "always"),
    ]
    assert (realtime.tier, flex.tier) == ("realtime", "flex")


async def test_flex_refused_for_capacity_falls_back_to_the_default_tier(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.llm.configure(flex_unavailable_rate=1.0)  # flex never has capacity
    with caplog.at_level(logging.WARNING):
        result = await _backend(server, flex_tries=3).summarize(_chunk(), "flex")
    entries = await _recorded(server, 4)
    assert [(e.tier, e.status) for e in entries] == [("flex", 429)] * 3 + [("realtime", 200)]
    assert result.text and result.tier == "realtime"  # priced as what answered it
    assert "sending it at the default tier" in caplog.text


async def test_flex_refused_for_capacity_once_is_tried_again_at_flex(server: FakeLLMServer) -> None:
    server.llm.configure(flex_unavailable_rate=0.5, seed=3)
    backend = _backend(server, flex_tries=50)
    results = [await backend.summarize(_chunk(seed), "flex") for seed in range(6)]
    entries = server.llm.entries()
    assert any(e.status == 429 for e in entries)  # some were refused, and sent again at flex
    assert {e.tier for e in entries} == {"flex"} and {r.tier for r in results} == {"flex"}


async def test_the_users_own_rate_limit_on_a_flex_call_is_still_a_rate_limit(server: FakeLLMServer) -> None:
    server.llm.rate_limit_next(1, retry_after=2.0)
    with pytest.raises(RateLimited) as limited:
        await _backend(server).summarize(_chunk(), "flex")
    assert limited.value.retry_after == 2.0
    assert [(e.tier, e.status) for e in server.llm.entries()] == [("flex", 429)]


async def test_an_endpoint_without_flex_gets_the_default_tier_from_then_on(server: FakeLLMServer) -> None:
    server.llm.configure(flex_known=False)
    backend = _backend(server)
    first = await backend.summarize(_chunk(1), "flex")
    second = await backend.summarize(_chunk(2), "flex")
    entries = await _recorded(server, 3)
    assert [(e.tier, e.status) for e in entries] == [("flex", 400), ("realtime", 200), ("realtime", 200)]
    assert (first.tier, second.tier) == ("realtime", "realtime") and not backend.flex
