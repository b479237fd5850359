"""A task's mode through the running services: the same documents summarized in realtime and in flex end
the same, flex costing what the provider billed at its flex price; and a flex task whose every flex call
is refused for lack of capacity still completes, at the default tier.

The test runs its own stand-in provider, so its ledger (and its flex capacity) belongs to it alone, and
the pipeline in-process (what is tested is what a mode costs, not processes or the broker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_batches import cost_by_tier
from tests.fake_llm import FakeLLM, FakeLLMServer
from tests.integration.conftest import StackFactory
from tests.integration.helpers import calls, marked_text, new_marker, submit, txt, wait_for_task

pytestmark = pytest.mark.integration

PRICES = {"stand-in-1": [2.0, 8.0]}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(FakeLLM()) as server:
        server.llm.configure(prices=PRICES)
        yield server


def _statuses(task: dict) -> tuple[str, list[tuple[str, str]]]:
    return task["status"], [(d["filename"], d["status"]) for d in task["documents"]]


async def test_flex_ends_as_realtime_does_at_the_flex_price(make_stack: StackFactory, server: FakeLLMServer) -> None:
    provider = server.llm
    stack = make_stack.in_process(
        OPENAI_BASE_URL=server.base_url,
        DOCSUM_LLM_PRICES='{"stand-in-1": [2.0, 8.0]}',
        DOCSUM_LLM_FLEX_TRIES="2",
    )
    marker = new_marker()
    files = [txt("a.txt", marked_text(12_000, seed=81, marker=marker)), txt("b.txt", marked_text(3_000, 82, marker))]
    # Two owners: the result cache is per owner, so the flex task pays for every call too.
    async with stack.client("alice") as client:
        realtime = await wait_for_task(client, await submit(client, files), stack)
    assert provider.wait_idle()
    realtime_paid = cost_by_tier(calls(provider, marker), PRICES)
    async with stack.client("bob") as client:
        flex = await wait_for_task(client, await submit(client, files, mode="flex"), stack)
    assert provider.wait_idle()
    both_paid = cost_by_tier(calls(provider, marker), PRICES)

    assert _statuses(realtime) == _statuses(flex) and realtime["status"] == "COMPLETED"
    assert (realtime["options"]["mode"], flex["options"]["mode"]) == ("realtime", "flex")
    assert set(realtime_paid) == {"realtime"} and set(both_paid) == {"realtime", "flex"}
    assert both_paid["flex"]["calls"] == flex["usage"]["llm_calls"] == realtime["usage"]["llm_calls"]
    assert realtime["usage"]["cost_usd"] == pytest.approx(realtime_paid["realtime"]["cost_usd"])
    assert flex["usage"]["cost_usd"] == pytest.approx(both_paid["flex"]["cost_usd"])
    assert flex["usage"]["cost_usd"] <= 0.56 * realtime["usage"]["cost_usd"]

    # No flex capacity at all: every call is refused twice (DOCSUM_LLM_FLEX_TRIES), then sent at the
    # default tier, and priced so.
    provider.configure(flex_unavailable_rate=1.0)
    refused_marker = new_marker()
    other = [txt("c.txt", marked_text(8_000, seed=83, marker=refused_marker))]
    async with stack.client("alice") as client:
        starved = await wait_for_task(client, await submit(client, other, mode="flex"), stack)
    assert provider.wait_idle()
    entries = calls(provider, refused_marker)
    assert starved["status"] == "COMPLETED" and starved["options"]["mode"] == "flex"
    assert {(e.tier, e.status) for e in entries} == {("flex", 429), ("realtime", 200)}
    answered = [e for e in entries if e.status == 200]
    assert len(entries) == 3 * len(answered) == 3 * starved["usage"]["llm_calls"]
    paid = cost_by_tier(entries, PRICES)
    assert set(paid) == {"realtime"} and starved["usage"]["cost_usd"] == pytest.approx(paid["realtime"]["cost_usd"])
