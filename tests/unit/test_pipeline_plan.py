"""The pipeline's plan against the topic table of the design (ARCHITECTURE.md, "Services and topics"):
the stages in the order a document goes through them, and who produces and who consumes each topic of
the event contract, as the stages' handlers and senders declare it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from docsum_pipeline.plan import stages

from docsum_shared.events import EVENT_TYPES, TOPIC_OF, Topic
from docsum_shared.handlers import Publish

# The design's table, by topic: (the stages whose handlers send it, the stage that owns its consumption).
# The gateway's progress recorder reads every topic beside its owner; task-finished is for other systems.
TABLE: dict[Topic, tuple[set[str], str | None]] = {
    Topic.DOCUMENT_SUBMITTED: (set(), "parser"),  # sent by the gateway's routes and by other systems
    Topic.DOCUMENT_PARSED: ({"parser"}, "chunker"),
    Topic.CHUNK_CREATED: (set(), "summarizer"),  # sent by the summarizer's admission once a chunk is admitted
    Topic.CHUNK_SUMMARIZED: ({"summarizer"}, "merger"),
    # A document that cannot be parsed or cut FAILED: its stage says so on document-merged.
    Topic.DOCUMENT_MERGED: ({"parser", "chunker", "merger"}, "merger"),
    Topic.TASK_EVENTS: ({"chunker", "merger"}, "merger"),
    Topic.TASK_FINISHED: ({"merger"}, None),
}
# What each stage publishes outside its handlers: its routes and its loops.
SENT_BESIDE: dict[Topic, set[str]] = {
    # Every pipeline topic but task-finished: the re-drives, from the gateway (resume, retry, reconcile)
    # and from the merger's maintenance (reconcile).
    Topic.DOCUMENT_SUBMITTED: {"gateway", "merger"},  # and every upload
    Topic.DOCUMENT_PARSED: {"gateway", "merger"},
    Topic.CHUNK_CREATED: {"gateway", "merger", "summarizer"},  # admission, rounds, batch mode; re-drives
    Topic.CHUNK_SUMMARIZED: {"gateway", "merger"},
    Topic.DOCUMENT_MERGED: {"gateway", "merger"},
    Topic.TASK_EVENTS: {"gateway", "parser", "merger", "summarizer"},  # lifecycle; OCR pages; expiry; batch mode
    Topic.TASK_FINISHED: set(),
}


def test_the_plan_lists_the_five_stages_in_pipeline_order() -> None:
    assert [stage.name for stage in stages()] == ["gateway", "parser", "chunker", "summarizer", "merger"]


def test_every_topic_is_consumed_by_its_owner_and_recorded_by_the_gateway() -> None:
    plan = stages()
    assert set(TABLE) == set(Topic) == {TOPIC_OF[model] for model in EVENT_TYPES.values()}
    for topic, (_, owner) in TABLE.items():
        owners = [
            s.name for s in plan if s.handlers.dead_letters and any(TOPIC_OF[t] is topic for t in s.handlers.receives)
        ]
        beside = [
            s.name
            for s in plan
            if not s.handlers.dead_letters and any(TOPIC_OF[t] is topic for t in s.handlers.receives)
        ]
        assert owners == ([owner] if owner else []), topic
        assert beside == (["gateway"] if owner else []), topic


def test_every_topic_is_produced_where_the_table_says() -> None:
    plan = stages()
    for topic, (by_handlers, _) in TABLE.items():
        sent = {
            s.name
            for s in plan
            for received in s.handlers.receives
            if any(TOPIC_OF[out] is topic for out in s.handlers.emits(received))
        }
        assert sent == by_handlers, topic
        beside = {s.name for s in plan for sender in s.senders if any(TOPIC_OF[out] is topic for out in sender.emits)}
        assert beside == SENT_BESIDE[topic], topic


def test_the_gateway_is_served_through_its_front_as_its_main_serves_it() -> None:
    from contextlib import asynccontextmanager

    from docsum_pipeline.plan import FRONTS
    from fastapi import FastAPI

    from docsum_gateway.settings import GatewaySettings

    @asynccontextmanager
    async def attach(settings: object, pool: object) -> AsyncIterator[Publish]:
        raise AssertionError("not started here")
        yield

    settings = GatewaySettings(api_keys="alice=" + "k" * 24)
    config = FRONTS["gateway"](settings, attach)
    assert set(FRONTS) == {"gateway"}
    assert isinstance(config.app, FastAPI)
    served = (config.http, config.ws_per_message_deflate, config.ws_max_size)
    assert served == ("h11", False, settings.ws_max_message_bytes)
